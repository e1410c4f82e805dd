"""Per-message delivery: the rules of a subscription created with any of ``retryPolicy``,
``deadLetterPolicy``, ``filter``, ``enableMessageOrdering`` or ``enableExactlyOnceDelivery``
(docs/delivery.md). Pure functions over the same cursor as ams_app/service/cursor.py, no I/O.

Why the same cursor, and ranges rather than one record per message: the state a subscription keeps
must follow what is outstanding, not the backlog, and most of what is outstanding moves in whole
pulls. So the cursor keeps ranges of messages in the same state, and splits a range only where one
of its messages is treated on its own (a nack, a deadline moved, an ack out of order):

- below ``offset``, and in ``acked``: acknowledged;
- in a ``Lease``: out with a consumer until the lease ends, on its ``attempt``-th delivery;
- in a ``Retry``: given back (nacked, or its lease ran out), with the deliveries it has had, not
  delivered again before ``after_ns`` (the retry policy's backoff); or, once it has had
  ``maxDeliveryAttempts``, ``dead``: waiting for its hand-off to the dead-letter topic;
- anywhere else above ``offset``: never delivered.

A pull is two steps, because the log is read between them and the cursor must not be held over
the read: ``reserve`` leases what may be delivered (a span of the log to read), and ``finish``,
given what the read found, keeps what is delivered, acknowledges what the filter turns away, and
gives back what must wait (the ordering rules, or what the read did not reach).

Ordering: a message with an ordering key is delivered only when no other message of its key is
out or given back; one message per key per pull. A pull starts at the oldest message not settled,
so the first message of a key that may go is always the oldest of that key not acknowledged, and
a key's messages go in publish order. A message given back blocks its key until it is delivered
again and acknowledged, so nothing published after it overtakes it.

Exactly-once: an ack id names the delivery (offset and attempt). An ack or deadline change for a
delivery that is not the message's current one, or whose lease ran out, fails for that id only;
the rest of the request is applied.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from ams_app.models import Cursor, Lease, Retry, Subscription
from ams_app.service.cursor import NS, _copy, expired, expiry_ns, normalize, pull_id

T = TypeVar("T", Lease, Retry)

#: Why an ack id was not taken, as the error envelope says it (ams_app/openapi.yaml, AckIdError).
STALE = "a later delivery of the message has been made: only its ack id is valid"
EXPIRED = "the ack deadline of this delivery has passed"
UNKNOWN = "the message is not outstanding: acknowledged already or not delivered"

#: Seconds a pull that takes dead messages has to publish them to the dead-letter topic before
#: another pull may try.
HAND_OFF_SECONDS = 30


@dataclass(frozen=True)
class Policy:
    tracked: bool = False  # count attempts and keep what is given back (any per-message feature)
    min_backoff_ns: int = 0
    max_backoff_ns: int = 0
    max_attempts: int = 0  # 0: no dead-letter topic
    ordered: bool = False
    exactly_once: bool = False


PLAIN = Policy()


def policy_of(sub: Subscription) -> Policy:
    if not sub.per_message:
        return PLAIN
    return Policy(
        tracked=True,
        min_backoff_ns=sub.min_backoff_ms * 1_000_000,
        max_backoff_ns=sub.max_backoff_ms * 1_000_000,
        max_attempts=sub.max_delivery_attempts if sub.dead_letter else 0,
        ordered=sub.ordered,
        exactly_once=sub.exactly_once,
    )


def backoff_ns(policy: Policy, attempts: int) -> int:
    """The pause before delivering again a message that has had ``attempts`` deliveries:
    the minimum, doubled with each attempt after the first, up to the maximum."""
    if policy.max_backoff_ns <= 0:
        return 0
    return min(policy.max_backoff_ns, policy.min_backoff_ns << min(max(attempts - 1, 0), 40))


def _given_back(start: int, end: int, attempts: int, at_ns: int, policy: Policy, key: str = "") -> Retry:
    dead = 0 < policy.max_attempts <= attempts
    return Retry(start, end, attempts, at_ns + (0 if dead else backoff_ns(policy, attempts)), key, dead)


# --- ranges --------------------------------------------------------------------------------------
def _runs(offsets: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted offsets as [start, end) runs."""
    runs: list[tuple[int, int]] = []
    for m in sorted(set(offsets)):
        if runs and runs[-1][1] == m:
            runs[-1] = (runs[-1][0], m + 1)
        else:
            runs.append((m, m + 1))
    return runs


def _cut(items: list[T], runs: list[tuple[int, int]]) -> list[T]:
    """``items`` (disjoint ranges) without the offsets in ``runs`` (sorted, disjoint): one walk
    over both."""
    if not runs:
        return items
    out: list[T] = []
    j = 0
    for item in sorted(items, key=lambda x: x.start):
        while j < len(runs) and runs[j][1] <= item.start:
            j += 1
        pos = item.start
        k = j
        while k < len(runs) and runs[k][0] < item.end:
            s, e = runs[k]
            if s > pos:
                out.append(dataclasses.replace(item, start=pos, end=s))
            pos = max(pos, e)
            k += 1
        if pos < item.end:
            out.append(dataclasses.replace(item, start=pos) if pos != item.start else item)
    return out


def _state(item: Lease | Retry) -> tuple[object, ...]:
    """What a range's messages share, its range aside."""
    if isinstance(item, Lease):
        return (item.delivered_ns, item.deadline_s, item.attempt, item.until_ns, item.key)
    return (item.attempts, item.after_ns, item.key, item.dead)


def _merged(items: list[T]) -> list[T]:
    """Sorted, with neighbours that differ only in their range joined."""
    out: list[T] = []
    for item in sorted(items, key=lambda x: x.start):
        last = out[-1] if out else None
        if last is not None and last.end == item.start and not item.key and _state(last) == _state(item):
            out[-1] = dataclasses.replace(last, end=item.end)
        else:
            out.append(item)
    return out


class _Index:
    """Disjoint ranges, to find the one holding an offset by bisection."""

    def __init__(self, ranges: Iterable[tuple[int, int]]) -> None:
        self.ranges = sorted(ranges)
        self.starts = [s for s, _ in self.ranges]

    def find(self, offset: int) -> int | None:
        """The position of the range holding ``offset``, if one does."""
        i = bisect.bisect_right(self.starts, offset) - 1
        return i if i >= 0 and offset < self.ranges[i][1] else None


class _Ranges:
    """A cursor's leases, given-back ranges and acknowledged ranges, indexed for many lookups."""

    def __init__(self, c: Cursor) -> None:
        self.c = c
        self.leases = sorted(c.leases, key=lambda x: x.start)
        self.retries = sorted(c.retries, key=lambda x: x.start)
        self._leases = _Index((x.start, x.end) for x in self.leases)
        self._retries = _Index((x.start, x.end) for x in self.retries)
        self._acked = _Index(c.acked)

    def lease(self, offset: int) -> Lease | None:
        i = self._leases.find(offset)
        return None if i is None else self.leases[i]

    def retry(self, offset: int) -> Retry | None:
        i = self._retries.find(offset)
        return None if i is None else self.retries[i]

    def acked(self, offset: int) -> bool:
        return offset < self.c.offset or self._acked.find(offset) is not None


def _settle_acks(c: Cursor, offsets: Iterable[int]) -> Cursor:
    runs = _runs(offsets)
    c.leases = _cut(c.leases, runs)
    c.retries = _cut(c.retries, runs)
    c.acked = c.acked + runs
    return normalize(c, c.offset)


# --- time passing --------------------------------------------------------------------------------
def settle(cursor: Cursor, now_ns: int, policy: Policy) -> Cursor:
    """Leases that ran out become messages given back, with the deliveries they had; on a plain
    subscription (attempts not counted) they are simply free again."""
    c = _copy(cursor)
    live: list[Lease] = []
    for lease in c.leases:
        if not expired(lease, now_ns):
            live.append(lease)
        elif policy.tracked:
            c.retries.append(_given_back(lease.start, lease.end, lease.attempt, expiry_ns(lease), policy, lease.key))
    c.leases = live
    c.retries = _merged(c.retries)
    return c


# --- a pull: reserve, read, finish ---------------------------------------------------------------
@dataclass(frozen=True)
class Reservation:
    pull_ns: int  # the leases' delivered_ns
    start: int  # the span of the log to read
    end: int


def reserve(
    cursor: Cursor, low: int, high: int, now_ns: int, max_count: int, deadline_s: int, policy: Policy, window: int
) -> tuple[Cursor, Reservation] | None:
    """Lease up to ``max_count`` messages that may be delivered now, from the oldest: never
    delivered, or given back and past their backoff. The span to read may step over messages
    that are out or acknowledged (nacks and acks out of order leave holes), within ``window``
    offsets of its start; a plain subscription's pull instead stops at the first."""
    c = normalize(settle(cursor, now_ns, policy), low)
    pull = pull_id(c, now_ns)
    busy: list[tuple[int, int, Retry | None]] = sorted(
        [(s, e, None) for s, e in c.acked]
        + [(lease.start, lease.end, None) for lease in c.leases]
        + [(r.start, r.end, r) for r in c.retries],
        key=lambda x: x[0],
    )
    pieces: list[Lease] = []
    taken: list[tuple[int, int]] = []  # offsets of retries taken
    count = 0
    pos = c.offset
    first: int | None = None

    def room(upto: int) -> int:
        stop = min(upto, high)
        if first is not None:
            stop = min(stop, first + window)
        return max(0, min(stop - pos, max_count - count))

    def take(start: int, n: int, attempt: int, key: str) -> None:
        nonlocal count, first
        pieces.append(Lease(start, start + n, pull, deadline_s, attempt=attempt, key=key))
        count += n
        if first is None:
            first = start

    for s, e, retry in [*busy, (high, high, None)]:
        if count >= max_count or pos >= high:
            break
        n = room(s)
        if n > 0:
            take(pos, n, 1, "")
            pos += n
            if pos < s:  # the run ends here: the count, or the window
                break
        if e <= pos:
            continue
        if retry is not None and not retry.dead and retry.after_ns <= now_ns:
            pos = max(pos, s)
            n = room(e)
            if n > 0:
                take(pos, n, retry.attempts + 1, retry.key)
                taken.append((pos, pos + n))
            pos += n
            if pos < e:
                break
            continue
        pos = max(pos, e)
    if not pieces:
        return None
    c.retries = _cut(c.retries, taken)
    c.leases = sorted([*c.leases, *pieces], key=lambda lease: lease.start)
    return c, Reservation(pull, pieces[0].start, pieces[-1].end)


@dataclass(frozen=True)
class Read:
    """What the read found of one message: its key, and whether the filter lets it through."""

    offset: int
    key: str = ""
    wanted: bool = True


def finish(
    cursor: Cursor, reservation: Reservation, found: list[Read], now_ns: int, policy: Policy
) -> tuple[Cursor, list[tuple[int, int]]]:
    """Settle a reservation with what its read found: the (offset, attempt) of each message
    delivered, in offset order. Messages the filter turns away are acknowledged; messages the
    read did not reach, and those the ordering rules hold back, are given back as they were."""
    c = _copy(cursor)
    mine = [lease for lease in c.leases if lease.delivered_ns == reservation.pull_ns]
    if not mine:  # the lease was lost meanwhile (a seek, a change of owner): nothing to deliver
        return cursor, []
    others = [lease for lease in c.leases if lease.delivered_ns != reservation.pull_ns]
    by_offset = {r.offset: r for r in found}
    blocked: set[str] = set()
    if policy.ordered:
        blocked = {lease.key for lease in others if lease.key} | {r.key for r in c.retries if r.key}
    kept: list[Lease] = []
    back: list[Retry] = []
    turned_away: list[int] = []
    delivered: list[tuple[int, int]] = []
    for lease in mine:
        run_start: int | None = None
        for m in range(lease.start, lease.end):
            read = by_offset.get(m)
            keep = False
            if read is None:
                pass
            elif not read.wanted:
                turned_away.append(m)
            elif policy.ordered and read.key:
                if read.key not in blocked:
                    blocked.add(read.key)  # one message per key per pull
                    kept.append(dataclasses.replace(lease, start=m, end=m + 1, key=read.key))
                    delivered.append((m, lease.attempt))
                elif lease.attempt > 1:
                    back.append(Retry(m, m + 1, lease.attempt - 1, now_ns, read.key))
            else:
                keep = True
                delivered.append((m, lease.attempt))
            if read is None and lease.attempt > 1:
                back.append(Retry(m, m + 1, lease.attempt - 1, now_ns, lease.key))
            if keep and run_start is None:
                run_start = m
            if not keep and run_start is not None:
                kept.append(dataclasses.replace(lease, start=run_start, end=m, key=""))
                run_start = None
        if run_start is not None:
            kept.append(dataclasses.replace(lease, start=run_start, end=lease.end, key=""))
    c.leases = sorted([*others, *kept], key=lambda lease: lease.start)
    c.retries = _merged([*c.retries, *back])
    if turned_away:
        c = _settle_acks(c, turned_away)
    _count(c, delivered)
    return c, delivered


#: Buckets of ``Cursor.deliveries``: attempts 1 to 4, then 5 and more.
ATTEMPT_BUCKETS = ("1", "2", "3", "4", "5+")


def deliveries_by_attempt(cursor: Cursor) -> list[tuple[str, int]]:
    """(bucket, deliveries) for each of ATTEMPT_BUCKETS, none missing."""
    counts = (cursor.deliveries + [0] * len(ATTEMPT_BUCKETS))[: len(ATTEMPT_BUCKETS)]
    return list(zip(ATTEMPT_BUCKETS, counts, strict=True))


def _count(c: Cursor, delivered: list[tuple[int, int]]) -> None:
    if not delivered:
        return
    counts = [n for _, n in deliveries_by_attempt(c)]
    for _, attempt in delivered:
        counts[min(attempt, len(ATTEMPT_BUCKETS)) - 1] += 1
    c.deliveries = counts


# --- acks and deadlines ----------------------------------------------------------------------------
AckRef = tuple[int, int | None]  # an ack id: the offset, and the attempt when the id names one


def _check(at: _Ranges, ref: AckRef, now_ns: int, policy: Policy) -> tuple[Lease | Retry | None, str | None]:
    """The lease (or given-back range) an ack id refers to, and why it cannot be used, if so."""
    offset, attempt = ref
    lease = at.lease(offset)
    if lease is not None:
        if policy.exactly_once and attempt is not None and attempt != lease.attempt:
            return None, STALE
        if policy.exactly_once and expired(lease, now_ns):
            return None, EXPIRED
        return lease, None
    retry = at.retry(offset)
    if retry is not None:  # nacked, or its lease ran out: not delivered again yet
        return (None, EXPIRED) if policy.exactly_once else (retry, None)
    return None, UNKNOWN


def acknowledge(cursor: Cursor, refs: list[AckRef], now_ns: int, policy: Policy) -> tuple[Cursor, dict[int, str]]:
    """Acknowledge each message on its own; what could not be, by index of ``refs``, and why.
    Without exactly-once, a message whose lease ran out is still taken (it is not delivered again
    once acknowledged), and a message acknowledged already is no failure."""
    c = settle(cursor, now_ns, policy)
    at = _Ranges(c)
    failed: dict[int, str] = {}
    done: list[int] = []
    for index, ref in enumerate(refs):
        _, problem = _check(at, ref, now_ns, policy)
        if problem is None:
            done.append(ref[0])
        elif problem == UNKNOWN and not policy.exactly_once and at.acked(ref[0]):
            continue
        else:
            failed[index] = problem
    return (_settle_acks(c, done) if done else c), failed


def modify_deadline(
    cursor: Cursor, refs: list[AckRef], seconds: int, now_ns: int, policy: Policy
) -> tuple[Cursor, dict[int, str]]:
    """Move the end of the named messages' leases to ``seconds`` from now; 0 gives them back at
    once (a nack), to be delivered again after the retry policy's backoff. What could not be
    changed, by index of ``refs``, and why: a message not out with a consumer has no lease."""
    c = settle(cursor, now_ns, policy) if policy.tracked else _copy(cursor)
    failed: dict[int, str] = {}
    chosen: dict[int, Lease] = {}
    at = _Ranges(c)
    for index, ref in enumerate(refs):
        found, problem = _check(at, ref, now_ns, policy)
        if isinstance(found, Lease) and not expired(found, now_ns):
            chosen[ref[0]] = found
        else:
            failed[index] = problem or EXPIRED
    if not chosen:
        return c, failed
    runs = _runs(chosen)
    c.leases = _cut(c.leases, runs)
    changed: list[Lease] = []
    for offset, lease in sorted(chosen.items()):
        if seconds > 0:
            changed.append(dataclasses.replace(lease, start=offset, end=offset + 1, until_ns=now_ns + seconds * NS))
        elif policy.tracked:
            c.retries.append(_given_back(offset, offset + 1, lease.attempt, now_ns, policy, lease.key))
    c.leases = _merged([*c.leases, *changed])
    c.retries = _merged(c.retries)
    return c, failed


# --- the dead-letter hand-off ------------------------------------------------------------------------
def take_dead(cursor: Cursor, now_ns: int, policy: Policy) -> tuple[Cursor | None, list[Retry]]:
    """The messages out of attempts that no other pull is handing off, held for this one for
    HAND_OFF_SECONDS; None when there are none (nothing to write)."""
    c = settle(cursor, now_ns, policy)
    due = [r for r in c.retries if r.dead and r.after_ns <= now_ns]
    if not due:
        return (c if c.retries != cursor.retries else None), []
    held = now_ns + HAND_OFF_SECONDS * NS
    c.retries = [dataclasses.replace(r, after_ns=held) if r.dead and r.after_ns <= now_ns else r for r in c.retries]
    return c, due


def handed_off(cursor: Cursor, offsets: Iterable[int]) -> Cursor:
    """The messages published to the dead-letter topic are acknowledged on their subscription."""
    c = _copy(cursor)
    at = _Ranges(c)
    moved = [m for m in set(offsets) if not at.acked(m)]
    c.dead_lettered += len(moved)
    return _settle_acks(c, moved)


# --- what the metrics show ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Backlog:
    """A subscription's messages not yet acknowledged, by state (docs/monitoring.md)."""

    total: int  # not acknowledged
    leased: int  # out with a consumer, within their deadline
    given_back: int  # nacked or late, waiting to go again (or, out of attempts, to be dead-lettered)
    first: int  # the offset of the oldest not acknowledged (when total > 0)

    @property
    def undelivered(self) -> int:
        """Never delivered yet."""
        return max(0, self.total - self.leased - self.given_back)


def backlog(cursor: Cursor, low: int, high: int, now_ns: int) -> Backlog:
    first = max(cursor.offset, low)

    def within(start: int, end: int) -> int:
        return max(0, min(end, high) - max(start, first))

    acked = sum(within(s, e) for s, e in cursor.acked)
    total = max(0, high - first - acked)
    leased = sum(within(lease.start, lease.end) for lease in cursor.leases if not expired(lease, now_ns))
    given_back = sum(within(r.start, r.end) for r in cursor.retries)
    given_back += sum(within(lease.start, lease.end) for lease in cursor.leases if expired(lease, now_ns))
    return Backlog(total, min(leased, total), min(given_back, total), first)
