"""The owner's rules in-process (ams_app/service/owner.py): when it trusts its claim, how
acknowledgements share a write, and how a write that lost to another writer ends the hold. The
store and ZooKeeper are played by small stand-ins here; tests/api/test_consume_owner.py runs the
same code on three nodes with the real servers."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import gevent
import pytest
from kazoo.exceptions import ConnectionLoss

from ams_app.models import Cursor, Lease
from ams_app.service import owner as owner_module
from ams_app.service.owner import Held, Owners
from ams_app.settings import Settings

SESSION = 6.0


class _Client:
    """What Owners asks of a KazooClient: the session and one read."""

    def __init__(self) -> None:
        self.connected = True
        self.client_id: tuple[int, bytes] | None = (7, b"")
        self.asked = 0
        self.fail = False

    def add_listener(self, listener: Any) -> None:
        pass

    def exists(self, path: str, watch: Any = None) -> Any:
        self.asked += 1
        if self.fail:
            raise ConnectionLoss()
        return object()


class _Store:
    """Versioned compare-and-swap, as both stores do it; each write takes a moment."""

    def __init__(self) -> None:
        self.versions = [Cursor(offset=0)]
        self.writes = 0

    def get_cursor(self, project_uuid: str, name: str) -> Cursor:
        latest = self.versions[-1]
        return dataclasses.replace(latest, version=len(self.versions) - 1)

    def swap_cursor(self, project_uuid: str, name: str, cursor: Cursor) -> bool:
        gevent.sleep(0.01)
        if cursor.version != len(self.versions) - 1:
            return False
        self.writes += 1
        self.versions.append(cursor)
        return True


def _owners(store: _Store | None = None) -> tuple[Owners, _Client]:
    client = _Client()
    settings = Settings(backend="kafka", zookeeper_hosts="127.0.0.1:1", consume_owner=True)
    owners = Owners(settings, store or _Store(), client=client)
    return owners, client


def _held(owners: Owners, store: _Store) -> Held:
    cursor = store.get_cursor("p", "s")
    held = Held("p.s", 7, cursor, cursor.version, cursor.store_mark)
    owners._held["p.s"] = held
    return held


def test_a_recent_answer_from_zookeeper_is_trusted_without_asking() -> None:
    owners, client = _owners()
    owners._confirmed_at = time.monotonic()
    assert owners._fresh(Held("p.s", 7, Cursor(), 0, 0.0))
    assert client.asked == 0


def test_an_old_answer_is_checked_and_an_unreachable_zookeeper_means_no_lease() -> None:
    owners, client = _owners()
    owners._confirmed_at = time.monotonic() - SESSION / 3 - 0.1
    assert owners._fresh(Held("p.s", 7, Cursor(), 0, 0.0))  # asked, and it answered
    assert client.asked == 1
    owners._confirmed_at = time.monotonic() - SESSION
    client.fail = True
    assert not owners._fresh(Held("p.s", 7, Cursor(), 0, 0.0))


def test_a_hold_from_another_session_is_not_trusted() -> None:
    owners, client = _owners()
    owners._confirmed_at = time.monotonic()
    client.client_id = (8, b"")  # the session was lost and a new one made
    assert not owners._fresh(Held("p.s", 7, Cursor(), 0, 0.0))


def test_concurrent_acknowledgements_share_writes() -> None:
    store = _Store()
    owners, _ = _owners(store)
    owners._confirmed_at = time.monotonic() + 3600
    _held(owners, store)

    def ack(i: int) -> None:
        owners.change("p.s", lambda c: (dataclasses.replace(c, offset=c.offset + 1), None), durable=True)

    gevent.joinall([gevent.spawn(ack, i) for i in range(20)], raise_error=True)
    assert store.versions[-1].offset == 20  # every ack is in the store once they all answered
    assert store.writes < 20 / 2  # and they took far fewer writes than acks


def test_a_change_made_during_a_write_keeps_the_version_straight() -> None:
    # a pull's change can start before a write and end after it; the next write must still
    # carry the version the store holds (this once made every owner let go after a few acks)
    store = _Store()
    owners, _ = _owners(store)
    owners._confirmed_at = time.monotonic() + 3600
    _held(owners, store)

    def slow_lease(c: Cursor) -> tuple[Cursor, None]:
        gevent.sleep(0.05)  # reading from Kafka
        return dataclasses.replace(c, leases=[*c.leases, Lease(0, 1, 0, 600)]), None

    acker = gevent.spawn(owners.change, "p.s", lambda c: (dataclasses.replace(c, offset=1), None), durable=True)
    gevent.sleep(0)  # the ack has changed the cursor and is writing it
    puller = gevent.spawn(owners.change, "p.s", slow_lease, durable=False)
    gevent.joinall([acker, puller], raise_error=True)
    owners.change("p.s", lambda c: (dataclasses.replace(c, offset=2), None), durable=True)
    assert [v.offset for v in store.versions][-1] == 2
    assert "p.s" in owners._held  # still the owner


def test_losing_a_write_to_another_writer_ends_the_hold() -> None:
    store = _Store()
    owners, _ = _owners(store)
    owners._confirmed_at = time.monotonic() + 3600
    held = _held(owners, store)
    store.versions.append(Cursor(offset=5))  # a new owner wrote its fence
    owners.release = lambda key: None  # type: ignore[method-assign]  (no ZooKeeper here)
    with pytest.raises(owner_module.AmsError) as raised:
        owners.change("p.s", lambda c: (dataclasses.replace(c, offset=1), None), durable=True)
    assert raised.value.code == 503
    assert held.lost
    assert "p.s" not in owners._held


class _Claims(_Client):
    """A client whose ``get`` serves one claim and fires its watches when the claim changes."""

    def __init__(self, url: str | None, grpc: str = "") -> None:
        super().__init__()
        self.url = url
        self.grpc = grpc
        self.watches: list[Any] = []
        self.reads = 0

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Any]:
        from kazoo.exceptions import NoNodeError

        self.reads += 1
        if self.fail:
            raise ConnectionLoss()
        if self.url is None:
            raise NoNodeError()
        if watch is not None:
            self.watches.append(watch)
        claim = {"url": self.url, "grpc": self.grpc} if self.grpc else {"url": self.url}
        return json.dumps(claim).encode(), _Stat()

    def change(self, url: str | None) -> None:
        self.url = url
        watches, self.watches = self.watches, []
        for watch in watches:
            watch(object())


class _Stat:
    ephemeralOwner = 1  # another session's claim


def _waiting(client: _Claims, session: float = SESSION) -> Owners:
    settings = Settings(
        backend="kafka", zookeeper_hosts="127.0.0.1:1", consume_owner=True, consume_session_seconds=session
    )
    return Owners(settings, _Store(), client=client)


@pytest.mark.parametrize("successor", [None, "http://node3"])
def test_a_request_whose_owner_is_lost_waits_until_the_claim_goes_or_moves(successor: str | None) -> None:
    client = _Claims("http://node1")
    owners = _waiting(client)
    owners._others["p.s"] = ("http://node1", "")
    waiting = gevent.spawn(owners.wait_for_release, "p.s", "http://node1")
    gevent.sleep(0.05)
    assert not waiting.ready()  # the dead node's session still holds the claim
    assert "p.s" not in owners._others  # and it is no longer taken as the owner
    client.change(successor)  # ZooKeeper ended that session (or another node claimed)
    assert waiting.get(timeout=1) is True
    assert client.reads <= 3  # woken by the watch, not by looking again and again


def test_a_claim_that_outlives_twice_the_session_is_not_waited_for_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owner_module, "_RELEASE_SLACK_SECONDS", 0.1)
    client = _Claims("http://node1")
    owners = _waiting(client, session=0.1)
    started = time.monotonic()
    assert owners.wait_for_release("p.s", "http://node1") is False
    assert time.monotonic() - started < 2 * 0.1 + owner_module._RELEASE_SLACK_SECONDS + 1


def test_a_claim_already_gone_or_unreadable_is_not_waited_for() -> None:
    assert _waiting(_Claims(None)).wait_for_release("p.s", "http://node1") is True
    assert _waiting(_Claims("http://node2")).wait_for_release("p.s", "http://node1") is True
    broken = _Claims("http://node1")
    broken.fail = True
    assert _waiting(broken).wait_for_release("p.s", "http://node1") is False


def test_a_claim_names_the_owners_grpc_api_and_one_of_an_earlier_release_none() -> None:
    """Calls of the gRPC API go on to the owner's gRPC API (ams_app/pubsub/relay.py) when its claim
    gives one; a claim written by a node of an earlier release (a rolling upgrade) has only its URL,
    and such an owner is reached through its REST API."""
    found = _waiting(_Claims("https://node2:8443", "node2:8085")).owner_elsewhere("p.s")
    assert found is not None
    assert (found.url, found.grpc, found.key) == ("https://node2:8443", "node2:8085", "p.s")
    earlier = _waiting(_Claims("https://node2:8443")).owner_elsewhere("p.s")
    assert earlier is not None
    assert (earlier.url, earlier.grpc) == ("https://node2:8443", "")
    owners = _waiting(_Claims("https://node2:8443", "node2:8085"))
    assert owners.elsewhere("p.s") == "https://node2:8443"
    assert _waiting(_Claims(None)).owner_elsewhere("p.s") is None


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, ""),
        ({"grpc_port": 8085, "host": "0.0.0.0", "node_name": "node2"}, "node2:8085"),
        ({"grpc_port": 8085, "advertise_url": "https://ams-2.example.org:8443"}, "ams-2.example.org:8085"),
        ({"grpc_port": 18181, "host": "::1"}, "[::1]:18181"),
    ],
)
def test_a_node_claims_with_the_grpc_address_the_others_reach_it_at(settings: dict[str, Any], expected: str) -> None:
    assert Settings(**settings).node_grpc == expected
