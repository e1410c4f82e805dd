"""What a per-message subscription keeps: its state follows the messages outstanding, not the backlog.

    .venv/bin/python -m benchmarks.delivery_state [--seed 1]

In-process and pure: no servers, no log. It drives the rules of ams_app/service/delivery.py
(``reserve``, ``finish``, ``acknowledge``, ``modify_deadline``, with the ``Policy`` that
``policy_of`` gives a subscription) on a ``Cursor`` (ams_app/service/cursor.py) over a log of
1,000,000 messages (offsets 0 to 1,000,000), of which nothing is read: each pull's ``Read`` list is
made up (every message wanted; with ordering, message i has the key ``k{i mod 1000}``). Pulls take
100 messages with an ack deadline of 600 s and the read window the service gives them, a
millisecond apart, so no lease runs out. Every scenario ends with 1,000 messages outstanding
(leased, or given back and waiting for their backoff):

a) per-message (a retryPolicy of 10 s to 600 s), 1,000 messages leased in pulls of 100, none acked;
b) 2,000 leased so, then every other one acked (the worst case for ranges: none of them joins);
c) a) after nacking every third message (``modifyAckDeadline`` 0: given back, ``Retry`` ranges);
d) ordered (``enableMessageOrdering``), 1,000 keys: one lease per message, since each has its key;
e) a subscription that has consumed 999,000 messages, in pulls of 100 acknowledged per message in
   random order within each window of 1,000 (ten requests of 100 ids), then leased the last 1,000:
   what it acknowledged has collapsed into its offset.

For each it prints the cursor's offset, its leases, retries (messages given back) and acked ranges,
and the messages outstanding by ``backlog()``; ``doc B``, the size of the cursor as the store writes
it (``len(json.dumps(cursor_to_doc(cursor)))``); ``mem B``, the memory a node holds for it, measured
with tracemalloc as the net allocation of a copy read back from that document; ``backlog/mem``, how
many times that memory one record per message of the log would take (1,000,000 small dicts of
offset, attempt and lease end, measured the same way: the line under the table); and the median
of 50 repetitions, in microseconds, of one pull of 100 more (``reserve`` + ``finish``, the log
grown by 100 messages so that e) has some; ``got``: what it delivers, none in d) whose 1,000 keys
are all out) and of one ``acknowledge`` of 100 leased ack ids, both on the scenario's cursor.
The whole takes about 15 seconds on one core (most of it building e)).

Its numbers go in docs/benchmarks.md (with the machine's reference figure of benchmarks/consume.py,
which the timings depend on; the sizes do not).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ams_app.models import Cursor, Subscription, cursor_from_doc, cursor_to_doc
from ams_app.service import cursor as cur
from ams_app.service import delivery as dl
from ams_app.service.delivery import Policy, Read

HIGH = 1_000_000  # the log: offsets [0, HIGH)
OUTSTANDING = 1_000
PULL = 100
DEADLINE_S = 600
KEYS = 1_000
T0 = 1_700_000_000 * cur.NS
REPETITIONS = 50

PER_MESSAGE = dl.policy_of(Subscription("bench", "s", "t", min_backoff_ms=10_000, max_backoff_ms=600_000))
ORDERED = dl.policy_of(Subscription("bench", "s", "t", ordered=True))


def window(policy: Policy) -> int:
    """The span a pull may read past its first message, as ams_app/service/subscriptions.py gives it."""
    return max(4 * PULL, 1000) if policy.ordered else max(2 * PULL, 100)


def reads(start: int, end: int, policy: Policy) -> list[Read]:
    """What a read of [start, end) would find: every message wanted, keyed when ordered."""
    return [Read(m, f"k{m % KEYS}" if policy.ordered else "") for m in range(start, end)]


def pull(c: Cursor, now: int, policy: Policy) -> tuple[Cursor, list[tuple[int, int]]]:
    """One pull of PULL messages as the service makes it: reserve, read, finish."""
    reserved = dl.reserve(c, 0, HIGH, now, PULL, DEADLINE_S, policy, window(policy))
    if reserved is None:
        return c, []
    c, r = reserved
    return dl.finish(c, r, reads(r.start, r.end, policy), now, policy)


def lease_outstanding(
    c: Cursor, now: int, policy: Policy, count: int = OUTSTANDING
) -> tuple[Cursor, list[dl.AckRef], int]:
    """Pull until ``count`` more messages are out: the cursor, their ack refs, the clock."""
    out: list[dl.AckRef] = []
    while len(out) < count:
        now += 1_000_000  # a millisecond between pulls
        c, got = pull(c, now, policy)
        if not got:
            raise RuntimeError(f"a pull delivered nothing with {len(out)} of {count} out")
        out += got
    return c, out, now


@dataclass
class Scenario:
    name: str
    cursor: Cursor
    policy: Policy
    now: int


def build(rng: random.Random) -> list[Scenario]:
    scenarios = []
    a, out, now = lease_outstanding(Cursor(), T0, PER_MESSAGE)
    scenarios.append(Scenario("a) 1,000 leased, none acked", a, PER_MESSAGE, now))

    b, two, now = lease_outstanding(Cursor(), T0, PER_MESSAGE, 2 * OUTSTANDING)
    b, failed = dl.acknowledge(b, [(m, n) for m, n in two if m % 2 == 0], now, PER_MESSAGE)
    assert not failed
    scenarios.append(Scenario("b) 2,000 leased, every other acked", b, PER_MESSAGE, now))

    c, failed = dl.modify_deadline(a, [(m, n) for m, n in out if m % 3 == 0], 0, now, PER_MESSAGE)
    assert not failed
    scenarios.append(Scenario("c) every third one nacked", c, PER_MESSAGE, now))

    d, _, now = lease_outstanding(Cursor(), T0, ORDERED)
    scenarios.append(Scenario("d) ordered, 1,000 keys", d, ORDERED, now))

    e, now = Cursor(), T0
    for _ in range(HIGH // OUTSTANDING - 1):
        e, out, now = lease_outstanding(e, now, PER_MESSAGE)
        rng.shuffle(out)
        for i in range(0, len(out), PULL):
            e, failed = dl.acknowledge(e, out[i : i + PULL], now, PER_MESSAGE)
            assert not failed
    assert (e.offset, e.leases, e.acked, e.retries) == (HIGH - OUTSTANDING, [], [], []), e.offset
    e, _, now = lease_outstanding(e, now, PER_MESSAGE)
    scenarios.append(Scenario("e) 999,000 consumed, 1,000 out", e, PER_MESSAGE, now))
    return scenarios


def net_bytes(make: Callable[[], Any]) -> tuple[int, Any]:
    """The memory what ``make`` returns still holds once it has returned (tracemalloc), and it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        return tracemalloc.get_traced_memory()[0] - before, made
    finally:
        tracemalloc.stop()


def median_us(work: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPETITIONS):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def record_bytes() -> float:
    """One record per message, as a naive design would keep it: a small dict, measured over 10,000."""
    n = 10_000
    size, _ = net_bytes(lambda: [{"offset": HIGH + i, "attempt": 1, "until_ns": T0 + i} for i in range(n)])
    return size / n


def row(s: Scenario, backlog_bytes: float) -> str:
    """The scenario's line of the table (module docstring)."""
    c, policy, now = s.cursor, s.policy, s.now
    text = json.dumps(cursor_to_doc(c))
    mem, _ = net_bytes(lambda: cursor_from_doc(json.loads(text), 0))
    state = dl.backlog(c, 0, HIGH, now)

    def one_pull() -> int:
        """A pull of 100 more, the log grown by 100 (e) has leased all it had): what it delivers."""
        reserved = dl.reserve(c, 0, HIGH + PULL, now, PULL, DEADLINE_S, policy, window(policy))
        assert reserved is not None
        after, r = reserved
        return len(dl.finish(after, r, reads(r.start, r.end, policy), now, policy)[1])

    refs: list[dl.AckRef] = []  # the first 100 leased messages' ack ids
    for lease in c.leases:
        refs += [(m, lease.attempt) for m in range(lease.start, lease.end)]
    del refs[PULL:]
    got = one_pull()
    pull_us = median_us(one_pull)
    ack_us = median_us(lambda: dl.acknowledge(c, refs, now, policy))
    return (
        f"{s.name:<35} {c.offset:>7} {len(c.leases):>6} {len(c.retries):>7} {len(c.acked):>5} "
        f"{state.leased + state.given_back:>5} {len(text):>7,} {mem:>7,} {backlog_bytes / mem:>10,.0f}x "
        f"{pull_us:>11,.0f} {got:>4} {ack_us:>10,.0f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.delivery_state",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=1, help="the order of e)'s acks")
    args = parser.parse_args()

    started = time.perf_counter()
    scenarios = build(random.Random(args.seed))
    built = time.perf_counter() - started
    per_record = record_bytes()
    backlog_bytes = per_record * HIGH

    header = (
        f"{'scenario':<35} {'offset':>7} {'leases':>6} {'retries':>7} {'acked':>5} {'out':>5} "
        f"{'doc B':>7} {'mem B':>7} {'backlog/mem':>11} {'pull 100 us':>11} {'got':>4} {'ack 100 us':>10}"
    )
    print(header)
    print("-" * len(header))
    for s in scenarios:
        print(row(s, backlog_bytes))
    print(
        f"one record per message of the log instead: {HIGH:,} x {per_record:.0f} B = {backlog_bytes / 1e6:,.0f} MB "
        f"(a dict of offset, attempt and lease end)"
    )
    print(f"built in {built:.1f}s, all in {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
