"""Leases and acknowledgements on a subscription cursor (ams_app.service.cursor)."""

from __future__ import annotations

import pytest

from ams_app.models import Cursor, Lease
from ams_app.service import cursor as cur

S = cur.NS  # one second in ns
T0 = 1_700_000_000 * S


def lease(c: Cursor, low: int, high: int, now: int, n: int, deadline: int = 10) -> tuple[Cursor, int, int]:
    found = cur.next_free_range(c, low, high, now, n)
    assert found is not None
    base, start, end = found
    return cur.with_lease(base, start, end, cur.pull_id(base, now), deadline), start, end


def test_first_range_starts_at_the_offset_and_respects_max() -> None:
    _, start, end = lease(Cursor(offset=3), 0, 100, T0, 5)
    assert (start, end) == (3, 8)


def test_nothing_to_lease_at_the_end_of_the_log() -> None:
    assert cur.next_free_range(Cursor(offset=10), 0, 10, T0, 5) is None


def test_a_second_pull_gets_the_next_messages_not_the_leased_ones() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 4)
    _, start, end = lease(c, 0, 10, T0, 4)
    assert (start, end) == (4, 8)


def test_expired_leases_are_delivered_again_first() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 4, deadline=2)
    c, _, _ = lease(c, 0, 10, T0, 4, deadline=100)
    _, start, end = lease(c, 0, 10, T0 + 3 * S, 10)
    assert (start, end) == (0, 4)  # stops at the still-leased range


def test_the_deadline_counts_whole_seconds() -> None:
    one = Lease(0, 1, T0, 2)
    assert not cur.expired(one, T0 + 2 * S + S // 2)
    assert cur.expired(one, T0 + 3 * S)


def test_ack_is_cumulative_within_a_lease() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 5)
    c = cur.acknowledge(c, [3], T0 + S)
    assert c.offset == 4
    assert [(x.start, x.end) for x in c.leases] == [(4, 5)]


def test_acks_of_a_later_lease_wait_for_the_earlier_one() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 3)  # 0..2
    c, _, _ = lease(c, 0, 10, T0, 3)  # 3..5
    c = cur.acknowledge(c, [5], T0)
    assert c.offset == 0
    assert c.acked == [(3, 6)]
    c = cur.acknowledge(c, [2], T0)
    assert (c.offset, c.acked, c.leases) == (6, [], [])


def test_late_ack_raises_timeout_and_drops_the_lease() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 3, deadline=1)
    with pytest.raises(cur.AckError) as err:
        cur.acknowledge(c, [2], T0 + 2 * S)
    assert err.value.problem is cur.AckProblem.TIMEOUT
    assert err.value.cursor.leases == []
    _, start, end = lease(err.value.cursor, 0, 10, T0 + 2 * S, 3)
    assert (start, end) == (0, 3)


def test_ack_without_anything_pending() -> None:
    with pytest.raises(cur.AckError) as err:
        cur.acknowledge(Cursor(offset=5), [7], T0)
    assert err.value.problem is cur.AckProblem.NO_PENDING


@pytest.mark.parametrize("offset", [1, 8])
def test_wrong_ack_already_acked_or_never_delivered(offset: int) -> None:
    c, _, _ = lease(Cursor(offset=2), 0, 10, T0, 3)  # 2..4
    with pytest.raises(cur.AckError) as err:
        cur.acknowledge(c, [offset], T0)
    assert err.value.problem is cur.AckProblem.WRONG


def test_acks_are_all_or_nothing() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 3)
    with pytest.raises(cur.AckError):
        cur.acknowledge(c, [1, 9], T0)
    assert cur.acknowledge(c, [1], T0).offset == 2


def test_retention_moves_the_offset_and_clips_leases() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 6)
    n = cur.normalize(c, 4)
    assert n.offset == 4
    assert [(x.start, x.end) for x in n.leases] == [(4, 6)]


def test_next_wakeup_is_the_earliest_expiry() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 1, deadline=5)
    c, _, _ = lease(c, 0, 10, T0, 1, deadline=2)  # a pull at the same instant: named T0 + 1 ns
    assert cur.next_wakeup_ns(c, T0) == T0 + 1 + 3 * S
    assert cur.next_wakeup_ns(Cursor(), T0) is None


def test_a_lease_taken_before_its_read_is_cut_to_what_was_read() -> None:
    c = cur.with_lease(Cursor(offset=0), 0, 100, 5, 10)
    c = cur.with_lease(c, 100, 200, 6, 10)  # another pull leased the range after it meanwhile
    cut = cur.trim_lease(c, 0, 5, 40)
    assert [(lease.start, lease.end) for lease in cut.leases] == [(0, 40), (100, 200)]
    # the messages between come with the next pull
    found = cur.next_free_range(cut, 0, 300, 7, 100)
    assert found is not None
    assert found[1:] == (40, 100)


def test_a_lease_of_which_nothing_was_read_is_removed() -> None:
    c = cur.with_lease(Cursor(offset=0), 0, 100, 5, 10)
    assert cur.trim_lease(c, 0, 5, 0).leases == []
    assert cur.trim_lease(c, 0, 99, 0).leases == c.leases  # another pull's lease is left alone


def test_two_pulls_at_the_same_instant_stay_two_pulls_for_cumulative_acks() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 3)  # 0..2
    c, _, _ = lease(c, 0, 10, T0, 3)  # 3..5, at the same nanosecond
    assert len({x.delivered_ns for x in c.leases}) == 2
    c = cur.acknowledge(c, [4], T0)
    assert (c.offset, c.acked) == (0, [(3, 5)])


def test_a_lease_split_by_a_deadline_change_still_acks_cumulatively_by_its_pull() -> None:
    c, _, _ = lease(Cursor(), 0, 10, T0, 5)
    first = c.leases[0]
    c.leases = [
        Lease(0, 2, first.delivered_ns, 10),
        Lease(2, 3, first.delivered_ns, 10, until_ns=T0 + 100 * S),
        Lease(3, 5, first.delivered_ns, 10),
    ]
    c = cur.acknowledge(c, [3], T0 + S)
    assert (c.offset, [(x.start, x.end) for x in c.leases]) == (4, [(4, 5)])


def test_a_lease_moved_by_a_deadline_change_expires_then_not_by_the_deadline() -> None:
    moved = Lease(0, 1, T0, 10, until_ns=T0 + 30 * S)
    assert not cur.expired(moved, T0 + 20 * S)
    assert cur.expired(moved, T0 + 30 * S)
