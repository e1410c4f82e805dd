"""The ZooKeeper ensemble on kafka1-3: every member serves as leader or follower; the leader's loss
leaves a quorum that elects a new leader and takes writes; the old leader rejoins as a follower.

The tests run in file order (test_10 ... test_60), each leaving the topology whole for the next."""

from __future__ import annotations

import time

import pytest
from multinode import GROUPS, kill, report, srvr_mode, start, unique, wait_until, zookeeper_client

MEMBERS = GROUPS["zookeeper"]


def modes() -> dict[str, str]:
    return {member: srvr_mode(member) for member in MEMBERS}


def one_leader(members: list[str]) -> str | None:
    current = {m: srvr_mode(m) for m in members}
    leaders = [m for m, mode in current.items() if mode == "leader"]
    if len(leaders) == 1 and all(mode in ("leader", "follower") for mode in current.values()):
        return leaders[0]
    return None


def write_and_read(members: list[str]) -> None:
    """A write through the given members (a quorum must acknowledge it), read back, removed."""
    client = zookeeper_client(members)
    client.start(timeout=20)
    try:
        path = f"/multinode-test/{unique('w')}"
        client.create(path, b"written", makepath=True)
        assert client.get(path)[0] == b"written"
        client.delete(path)
    finally:
        client.stop()
        client.close()


def test_every_member_is_leader_or_follower():
    current = wait_until(lambda: one_leader(MEMBERS) and modes(), "one leader and two followers", timeout=60)
    assert sorted(current.values()) == ["follower", "follower", "leader"], current
    write_and_read(MEMBERS)


@pytest.mark.timeout(600)
def test_losing_the_leader_elects_another_and_it_rejoins_as_follower():
    leader = wait_until(lambda: one_leader(MEMBERS), "a leader")
    others = [m for m in MEMBERS if m != leader]
    killed = kill(leader)  # its Kafka broker goes with it: the host is lost
    new_leader = wait_until(lambda: one_leader(others), "a leader among the two left", timeout=60, every=0.2)
    elected = time.monotonic() - killed
    assert new_leader in others
    write_and_read(others)

    start(leader)
    wait_until(lambda: srvr_mode(leader) == "follower", f"{leader} back as follower", timeout=120)
    rejoined = time.monotonic() - killed
    assert one_leader(MEMBERS) == new_leader
    write_and_read(MEMBERS)
    report(
        "zookeeper_leader_loss",
        {"killed": leader, "new_leader": new_leader, "elected_after_s": round(elected, 1),
         "rejoined_after_kill_s": round(rejoined, 1)},
    )  # fmt: skip
