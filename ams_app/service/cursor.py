"""Leases and acknowledgements on a subscription cursor. Pure functions, no I/O.

A pull leases a contiguous range of messages for the ack deadline; messages leased to one
consumer are not handed to another until the lease expires. An ack id acknowledges its
message and every earlier message of the same pull (acks are cumulative within a pull).
Everything below ``cursor.offset`` is acknowledged; acknowledged ranges above it (acked out
of order by other consumers) are kept until the offset reaches them.

These are the rules of a plain subscription, the AMS contract. A subscription with any of the
per-message features keeps the same cursor with more in it and follows ams_app/service/delivery.py;
a lease whose end a ``modifyAckDeadline`` moved (``until_ns``) is honoured by both.
"""

from __future__ import annotations

import bisect
import dataclasses
from enum import Enum

from ams_app.models import Cursor, Lease

NS = 1_000_000_000


def expired(lease: Lease, now_ns: int) -> bool:
    """Late when whole seconds since delivery exceed the deadline (as the original server), or
    past the end a modifyAckDeadline gave the lease."""
    return now_ns >= expiry_ns(lease)


def expiry_ns(lease: Lease) -> int:
    return lease.until_ns or lease.delivered_ns + (lease.deadline_s + 1) * NS


def _copy(cursor: Cursor) -> Cursor:
    """A cursor whose lists may change without changing ``cursor`` (leases and given-back ranges
    are frozen: they are shared)."""
    return dataclasses.replace(
        cursor,
        leases=list(cursor.leases),
        acked=list(cursor.acked),
        retries=list(cursor.retries),
        deliveries=list(cursor.deliveries),
    )


def normalize(cursor: Cursor, log_min: int) -> Cursor:
    """Move the offset over retention and over acknowledged ranges; merge ranges."""
    c = _copy(cursor)
    c.offset = max(c.offset, log_min)
    c.leases = sorted(
        (
            lease if lease.start >= c.offset else dataclasses.replace(lease, start=c.offset)
            for lease in c.leases
            if lease.end > c.offset
        ),
        key=lambda lease: lease.start,
    )
    merged: list[tuple[int, int]] = []
    for start, end in sorted(c.acked):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    acked: list[tuple[int, int]] = []
    for start, end in merged:
        if start <= c.offset:
            c.offset = max(c.offset, end)
        else:
            acked.append((start, end))
    c.acked = [(s, e) for s, e in acked if e > c.offset]
    if c.retries:
        starts = [s for s, _ in c.acked]

        def covered(start: int, end: int) -> bool:  # within one acknowledged range
            i = bisect.bisect_right(starts, start) - 1
            return i >= 0 and end <= c.acked[i][1]

        c.retries = [
            r if r.start >= c.offset else dataclasses.replace(r, start=c.offset)
            for r in c.retries
            if r.end > c.offset and not covered(r.start, r.end)
        ]
    return c


def next_free_range(
    cursor: Cursor, log_min: int, log_max: int, now_ns: int, max_count: int
) -> tuple[Cursor, int, int] | None:
    """The cursor without expired leases, and the first range [start, end) free to lease."""
    c = _copy(cursor)
    c.leases = [lease for lease in c.leases if not expired(lease, now_ns)]
    c = normalize(c, log_min)
    occupied = sorted([(x.start, x.end) for x in c.leases] + [(x.start, x.end) for x in c.retries] + c.acked)
    start = c.offset
    limit = log_max
    for s, e in occupied:
        if start < s:
            limit = min(limit, s)
            break
        start = max(start, e)
    end = min(limit, log_max, start + max(1, max_count))
    if start >= end:
        return None
    return c, start, end


def pull_id(cursor: Cursor, now_ns: int) -> int:
    """The ``delivered_ns`` of a new pull: its time, moved on by nanoseconds when another pull of
    this cursor has it already, since it names the pull for cumulative acks."""
    taken = {lease.delivered_ns for lease in cursor.leases}
    while now_ns in taken:
        now_ns += 1
    return now_ns


def with_lease(cursor: Cursor, start: int, end: int, now_ns: int, deadline_s: int) -> Cursor:
    """The cursor with [start, end) leased by a pull at ``now_ns``, which must be ``pull_id``'s."""
    c = _copy(cursor)
    c.leases = sorted([*c.leases, Lease(start, end, now_ns, deadline_s)], key=lambda lease: lease.start)
    return c


def trim_lease(cursor: Cursor, start: int, delivered_ns: int, end: int) -> Cursor:
    """The lease made at ``delivered_ns`` from ``start`` ends at ``end`` instead (removed when
    empty): a range leased before it was read, of which fewer messages came back."""
    c = _copy(cursor)
    leases = []
    for lease in c.leases:
        if lease.start == start and lease.delivered_ns == delivered_ns:
            if end > start:
                leases.append(dataclasses.replace(lease, end=min(lease.end, end)))
        else:
            leases.append(lease)
    c.leases = leases
    return c


def next_wakeup_ns(cursor: Cursor, now_ns: int) -> int | None:
    """When the earliest active lease expires, if any."""
    times = [expiry_ns(lease) for lease in cursor.leases if not expired(lease, now_ns)]
    return min(times) if times else None


class AckProblem(Enum):
    WRONG = "wrong ack"
    NO_PENDING = "no ack pending"
    TIMEOUT = "ack timeout"


class AckError(Exception):
    def __init__(self, problem: AckProblem, cursor: Cursor) -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.cursor = cursor  # what to store anyway (expired leases dropped), or unchanged


def acknowledge(cursor: Cursor, offsets: list[int], now_ns: int) -> Cursor:
    """Apply acks for ``offsets``; all or nothing. Raises AckError. An offset acknowledges the
    messages of its pull up to it: of the leases that share its pull's ``delivered_ns`` (one
    lease, unless a modifyAckDeadline split it), what remains leased up to the offset."""
    c = _copy(cursor)
    active = [lease for lease in c.leases if not expired(lease, now_ns)]
    per_pull: dict[int, int] = {}
    late = False
    wrong = False
    unknown = False
    for m in offsets:
        if m < c.offset or any(s <= m < e for s, e in c.acked):
            wrong = True
            continue
        for lease in c.leases:
            if lease.start <= m < lease.end:
                if expired(lease, now_ns):
                    late = True
                else:
                    per_pull[lease.delivered_ns] = max(per_pull.get(lease.delivered_ns, m), m)
                break
        else:
            unknown = True
    if wrong or (unknown and active):
        raise AckError(AckProblem.WRONG, cursor)
    if unknown:
        raise AckError(AckProblem.NO_PENDING, cursor)
    if late:
        c.leases = active
        raise AckError(AckProblem.TIMEOUT, c)
    leases: list[Lease] = []
    for lease in c.leases:
        top = per_pull.get(lease.delivered_ns)
        if top is None or top < lease.start or expired(lease, now_ns):
            leases.append(lease)
            continue
        c.acked.append((lease.start, min(top + 1, lease.end)))
        if top + 1 < lease.end:
            leases.append(dataclasses.replace(lease, start=top + 1))
    c.leases = leases
    return normalize(c, c.offset)
