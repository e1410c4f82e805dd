"""The per-message delivery rules (ams_app.service.delivery): leases, backoff, attempts, the
dead-letter hand-off, filters' acks, ordering holds, exactly-once ack ids. The clock is an
argument: nothing here waits."""

from __future__ import annotations

import random

from ams_app.models import Cursor, Subscription
from ams_app.service import cursor as cur
from ams_app.service import delivery as dl
from ams_app.service.delivery import Policy, Read

S = cur.NS
T0 = 1_700_000_000 * S
TRACKED = Policy(tracked=True)


def pull(
    c: Cursor,
    now: int,
    n: int,
    policy: Policy = TRACKED,
    high: int = 100,
    keys: dict[int, str] | None = None,
    unwanted: set[int] = frozenset(),  # type: ignore[assignment]
    deadline: int = 10,
    window: int = 1000,
) -> tuple[Cursor, list[tuple[int, int]]]:
    """One pull as the service makes it: reserve, read everything reserved, finish."""
    reserved = dl.reserve(c, 0, high, now, n, deadline, policy, window)
    if reserved is None:
        return c, []
    c, r = reserved
    found = [Read(m, (keys or {}).get(m, ""), m not in unwanted) for m in range(r.start, r.end)]
    return dl.finish(c, r, found, now, policy)


def test_a_pull_leases_the_oldest_messages_with_their_first_attempt() -> None:
    c, got = pull(Cursor(offset=3), T0, 4)
    assert got == [(3, 1), (4, 1), (5, 1), (6, 1)]
    c, got = pull(c, T0, 2)
    assert got == [(7, 1), (8, 1)]


def test_an_ack_acknowledges_its_own_message_only() -> None:
    c, _ = pull(Cursor(), T0, 5)
    c, failed = dl.acknowledge(c, [(3, 1)], T0, TRACKED)
    assert failed == {}
    assert c.offset == 0
    assert c.acked == [(3, 4)]
    c, _ = dl.acknowledge(c, [(0, 1), (1, 1), (2, 1)], T0, TRACKED)
    assert c.offset == 4
    assert [(x.start, x.end) for x in c.leases] == [(4, 5)]


def test_a_nack_gives_the_message_back_with_its_attempt_counted() -> None:
    c, _ = pull(Cursor(), T0, 5)
    c, failed = dl.modify_deadline(c, [(2, 1)], 0, T0 + S, TRACKED)
    assert failed == {}
    assert [(r.start, r.end, r.attempts) for r in c.retries] == [(2, 3, 1)]
    c, got = pull(c, T0 + S, 10)
    assert got[0] == (2, 2)  # the oldest first, on its second delivery
    c, _ = dl.acknowledge(c, [(4, 1)], T0 + S, TRACKED)
    assert not _acked(c, 2)  # a later ack does not undo the nack


def _acked(c: Cursor, offset: int) -> bool:
    return offset < c.offset or any(s <= offset < e for s, e in c.acked)


def test_a_deadline_change_moves_the_lease_of_that_message_only() -> None:
    c, _ = pull(Cursor(), T0, 3, deadline=10)
    c, _ = dl.modify_deadline(c, [(1, 1)], 60, T0 + 5 * S, TRACKED)
    late = T0 + 30 * S
    c, got = pull(c, late, 10, high=3)
    assert got == [(0, 2), (2, 2)]  # 0 and 2 ran out, 1 is still out


def test_backoff_doubles_between_its_bounds() -> None:
    policy = Policy(tracked=True, min_backoff_ns=10 * S, max_backoff_ns=60 * S)
    assert [dl.backoff_ns(policy, a) // S for a in (1, 2, 3, 4, 5, 50)] == [10, 20, 40, 60, 60, 60]
    assert dl.backoff_ns(TRACKED, 3) == 0


def test_a_message_given_back_waits_for_its_backoff() -> None:
    policy = Policy(tracked=True, min_backoff_ns=10 * S, max_backoff_ns=600 * S)
    c, _ = pull(Cursor(), T0, 1, policy, high=1)
    c, _ = dl.modify_deadline(c, [(0, 1)], 0, T0, policy)
    assert pull(c, T0 + 9 * S, 1, policy, high=1)[1] == []
    c, got = pull(c, T0 + 10 * S, 1, policy, high=1, deadline=1)
    assert got == [(0, 2)]
    # its lease runs out at +12 s: the second backoff (20 s) counts from then
    assert pull(c, T0 + 31 * S, 1, policy, high=1)[1] == []
    assert pull(c, T0 + 32 * S, 1, policy, high=1)[1] == [(0, 3)]


def test_a_message_out_of_attempts_is_handed_off_then_acknowledged() -> None:
    policy = Policy(tracked=True, max_attempts=2)
    c, _ = pull(Cursor(), T0, 2, policy, high=2)
    c, _ = dl.modify_deadline(c, [(0, 1)], 0, T0, policy)
    c, got = pull(c, T0, 2, policy, high=2)
    assert got == [(0, 2)]
    c, _ = dl.modify_deadline(c, [(0, 2)], 0, T0, policy)
    assert pull(c, T0, 2, policy, high=2)[1] == []  # dead: never delivered again
    held, dead = dl.take_dead(c, T0, policy)
    assert held is not None
    assert [(r.start, r.end, r.attempts) for r in dead] == [(0, 1, 2)]
    assert dl.take_dead(held, T0 + S, policy)[1] == []  # another pull leaves it to this one
    assert [r.start for r in dl.take_dead(held, T0 + (dl.HAND_OFF_SECONDS + 1) * S, policy)[1]] == [0]
    c = dl.handed_off(held, [0])
    assert c.retries == []
    assert _acked(c, 0)


def test_a_lease_that_runs_out_counts_as_a_failed_delivery() -> None:
    policy = Policy(tracked=True, max_attempts=5)
    c = Cursor()
    for attempt in range(1, 6):
        c, got = pull(c, T0 + attempt * 100 * S, 1, policy, high=1, deadline=10)
        assert got == [(0, attempt)]
    assert pull(c, T0 + 700 * S, 1, policy, high=1)[1] == []
    assert [r.attempts for r in dl.take_dead(c, T0 + 700 * S, policy)[1]] == [5]


def test_messages_the_filter_turns_away_are_acknowledged_and_not_delivered() -> None:
    c, got = pull(Cursor(), T0, 6, unwanted={0, 1, 3})
    assert got == [(2, 1), (4, 1), (5, 1)]
    assert c.offset == 2
    assert c.acked == [(3, 4)]


def test_ordering_delivers_one_message_per_key_and_holds_the_key_while_it_is_out() -> None:
    ordered = Policy(tracked=True, ordered=True)
    keys = {0: "a", 1: "a", 2: "b", 3: "a", 4: "", 5: "b"}
    c, got = pull(Cursor(), T0, 10, ordered, high=6, keys=keys)
    assert got == [(0, 1), (2, 1), (4, 1)]
    c, got = pull(c, T0, 10, ordered, high=6, keys=keys)
    assert got == []  # a and b are out
    c, _ = dl.acknowledge(c, [(0, 1)], T0, ordered)
    c, got = pull(c, T0, 10, ordered, high=6, keys=keys)
    assert got == [(1, 1)]


def test_ordering_redelivers_a_given_back_message_before_the_later_ones_of_its_key() -> None:
    ordered = Policy(tracked=True, ordered=True, min_backoff_ns=5 * S, max_backoff_ns=5 * S)
    keys = {0: "a", 1: "a", 2: "a"}
    c, _ = pull(Cursor(), T0, 10, ordered, high=3, keys=keys)
    c, _ = dl.modify_deadline(c, [(0, 1)], 0, T0, ordered)
    assert pull(c, T0 + S, 10, ordered, high=3, keys=keys)[1] == []  # 1 and 2 wait for 0's backoff
    c, got = pull(c, T0 + 5 * S, 10, ordered, high=3, keys=keys)
    assert got == [(0, 2)]


def test_random_nacks_and_acks_keep_each_keys_order_and_lose_nothing() -> None:
    rng = random.Random(7)
    ordered = Policy(tracked=True, ordered=True)
    keys = {m: f"k{rng.randrange(5)}" for m in range(200)}
    c = Cursor()
    seen: dict[str, list[int]] = {}
    acked: set[int] = set()
    now = T0
    while len(acked) < 200:
        now += S
        c, got = pull(c, now, rng.randrange(1, 20), ordered, high=200, keys=keys)
        for m, attempt in got:
            assert all(k < m or k in acked or keys[k] != keys[m] for k in range(m))  # older ones of its key acked
            seen.setdefault(keys[m], []).append(m)
            if rng.random() < 0.3:
                c, failed = dl.modify_deadline(c, [(m, attempt)], 0, now, ordered)
            else:
                c, failed = dl.acknowledge(c, [(m, attempt)], now, ordered)
                acked.add(m)
            assert failed == {}
    assert c.offset == 200
    assert c.leases == []
    assert c.retries == []
    for key, offsets in seen.items():
        firsts = sorted(set(offsets), key=offsets.index)
        assert firsts == sorted(firsts), key


def test_exactly_once_takes_only_the_newest_delivery_of_a_message() -> None:
    once = Policy(tracked=True, exactly_once=True)
    c, _ = pull(Cursor(), T0, 3, once, high=3, deadline=10)
    c, got = pull(c, T0 + 20 * S, 3, once, high=3)  # all three ran out: second delivery
    assert got == [(0, 2), (1, 2), (2, 2)]
    c, failed = dl.acknowledge(c, [(0, 1), (1, 2), (2, None)], T0 + 21 * S, once)
    assert failed == {0: dl.STALE}
    assert c.offset == 0
    assert c.acked == [(1, 3)]
    c, failed = dl.acknowledge(c, [(1, 2)], T0 + 21 * S, once)
    assert failed == {0: dl.UNKNOWN}  # acknowledged already: said so


def test_exactly_once_refuses_an_ack_after_the_lease_ran_out() -> None:
    once = Policy(tracked=True, exactly_once=True)
    c, _ = pull(Cursor(), T0, 2, once, high=2, deadline=10)
    c, failed = dl.acknowledge(c, [(0, 1), (1, 1)], T0 + 11 * S, once)
    assert failed == {0: dl.EXPIRED, 1: dl.EXPIRED}
    assert c.offset == 0


def test_without_exactly_once_a_late_ack_still_counts() -> None:
    c, _ = pull(Cursor(), T0, 2, high=2, deadline=10)
    c, failed = dl.acknowledge(c, [(0, 1), (1, 9)], T0 + 60 * S, TRACKED)
    assert failed == {}
    assert c.offset == 2


def test_a_deadline_change_for_a_message_not_out_fails_for_that_id_only() -> None:
    c, _ = pull(Cursor(), T0, 2, high=5)
    c, failed = dl.modify_deadline(c, [(0, 1), (4, 1)], 30, T0, TRACKED)
    assert failed == {1: dl.UNKNOWN}
    assert any(lease.until_ns == T0 + 30 * S for lease in c.leases)


def test_a_plain_subscription_nack_frees_the_message_without_keeping_anything() -> None:
    found = cur.next_free_range(Cursor(), 0, 5, T0, 5)
    assert found is not None
    base, start, end = found
    c = cur.with_lease(base, start, end, T0, 10)
    c, failed = dl.modify_deadline(c, [(2, None)], 0, T0, dl.PLAIN)
    assert failed == {}
    assert c.retries == []
    again = cur.next_free_range(c, 0, 5, T0, 5)
    assert again is not None
    assert again[1:] == (2, 3)
    c = cur.acknowledge(c, [4], T0)  # cumulative over what its pull still holds
    assert (c.offset, c.acked) == (2, [(3, 5)])


def test_state_follows_what_is_outstanding_not_the_backlog() -> None:
    c, _ = pull(Cursor(), T0, 1000, high=1_000_000)
    for m in range(0, 1000, 2):  # every other message acknowledged
        c, _ = dl.acknowledge(c, [(m, 1)], T0, TRACKED)
    assert len(c.leases) + len(c.acked) + len(c.retries) <= 1001
    c, _ = dl.acknowledge(c, [(m, 1) for m in range(1, 1000, 2)], T0, TRACKED)
    assert (c.offset, c.leases, c.acked, c.retries) == (1000, [], [], [])


def test_the_policy_follows_the_subscription() -> None:
    assert dl.policy_of(Subscription("p", "s", "t")) == dl.PLAIN
    sub = Subscription("p", "s", "t", min_backoff_ms=10_000, max_backoff_ms=600_000)
    sub.dead_letter_topic, sub.max_delivery_attempts = "dead", 5
    assert dl.policy_of(sub) == Policy(True, 10 * S, 600 * S, 5, False, False)


def test_a_snapshot_lives_seven_days_from_its_oldest_message_and_never_past_the_retention() -> None:
    from ams_app.service.snapshots import expiry_ns

    day = 24 * 3600
    assert expiry_ns(T0, 0) == T0 + 7 * day * S  # the log keeps forever: seven days
    assert expiry_ns(T0, 30 * day) == T0 + 7 * day * S
    assert expiry_ns(T0, 3600) == T0 + 3600 * S  # a topic keeping an hour: an hour from that message


def test_a_plain_subscription_keeps_nothing_of_a_lease_that_ran_out() -> None:
    found = cur.next_free_range(Cursor(), 0, 5, T0, 5)
    assert found is not None
    c = cur.with_lease(found[0], 0, 5, T0, 10)
    settled = dl.settle(c, T0 + 20 * S, dl.PLAIN)
    assert (settled.leases, settled.retries) == ([], [])
    assert dl.settle(c, T0 + 20 * S, TRACKED).retries[0].attempts == 1
