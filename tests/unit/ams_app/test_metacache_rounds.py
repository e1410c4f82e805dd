"""How a node's metadata cache reads the generation (ams_app/service/metacache.py): a request uses
a ZooKeeper read sent after it began, requests that begin while a read is under way share the next
one, and while the watch a read set has not fired, requests take what it found without a read.
ZooKeeper is played by a stand-in whose reads answer when the test says."""

from __future__ import annotations

from typing import Any

import gevent
from gevent.event import AsyncResult

from ams_app.service import metacache
from ams_app.service.metacache import MetadataCache
from ams_app.settings import Settings


class _Stat:
    def __init__(self, mzxid: int) -> None:
        self.mzxid = mzxid


class _Client:
    """The reads MetadataCache sends, each answered by the test (``answer``)."""

    class handler:  # kazoo names it so
        timeout_exception = gevent.Timeout

    connected = True

    def __init__(self) -> None:
        self.reads: list[AsyncResult] = []
        self.watches: list[Any] = []

    def add_listener(self, listener: Any) -> None:
        pass

    def exists_async(self, path: str, watch: Any = None) -> AsyncResult:
        read = AsyncResult()
        self.reads.append(read)
        self.watches.append(watch)
        return read

    def fire(self) -> None:
        """The znode changed: every watch set so far fires, once."""
        watches, self.watches = self.watches, [None] * len(self.watches)
        for watch in {w for w in watches if w is not None}:
            watch(object())

    def answer(self, index: int, mzxid: int) -> None:
        self.reads[index].set(_Stat(mzxid))
        gevent.sleep(0.01)


def _cache() -> tuple[MetadataCache, _Client]:
    client = _Client()
    settings = Settings(backend="kafka", zookeeper_hosts="127.0.0.1:1", mongo_database="d")
    return MetadataCache(settings, object(), client=client), client


def test_requests_that_begin_during_a_read_share_the_next_one_not_that_one() -> None:
    cache, client = _cache()
    first = gevent.spawn(cache._read)
    gevent.sleep(0.01)
    assert len(client.reads) == 1  # sent for the first request
    later = [gevent.spawn(cache._read) for _ in range(5)]
    gevent.sleep(0.01)
    assert len(client.reads) == 1  # the others wait: that read was sent before they began
    client.answer(0, 10)  # a change answered elsewhere may lie between it and them
    assert first.get(timeout=1) == 10
    assert len(client.reads) == 2  # one read for the five, sent after they all began
    assert not any(g.ready() for g in later)
    client.answer(1, 12)
    assert [g.get(timeout=1) for g in later] == [12] * 5


def test_a_lone_request_sends_its_own_read_and_nothing_lingers() -> None:
    cache, client = _cache()
    for expected in (1, 2, 3):
        request = gevent.spawn(cache._read)
        gevent.sleep(0.01)
        client.answer(expected - 1, expected)
        assert request.get(timeout=1) == expected
    assert len(client.reads) == 3
    assert cache._gathering is None
    assert not cache._reading


def _request_sees(cache: MetadataCache) -> gevent.Greenlet:
    """A request's view: the generation it saw."""

    def request() -> int | None:
        with cache.view():
            seen = metacache._seen.get()
            return None if seen is None else seen[0]

    return gevent.spawn(request)


def _read_by_a_request(cache: MetadataCache, client: _Client, generation: int) -> int | None:
    """A request that sends a read, the read answered with ``generation``: what the request saw."""
    request = _request_sees(cache)
    gevent.sleep(0.01)
    client.answer(len(client.reads) - 1, generation)
    return request.get(timeout=1)  # type: ignore[no-any-return]


def test_while_the_watch_stands_requests_take_the_generation_without_a_read() -> None:
    cache, client = _cache()
    assert _read_by_a_request(cache, client, 7) == 7
    assert [_request_sees(cache).get(timeout=1) for _ in range(3)] == [7, 7, 7]
    assert len(client.reads) == 1  # the watch that read set has not fired


def test_once_the_watch_fires_the_next_request_reads_again() -> None:
    cache, client = _cache()
    assert _read_by_a_request(cache, client, 7) == 7
    client.fire()  # a change through another node
    second = _request_sees(cache)
    gevent.sleep(0.01)
    assert len(client.reads) == 2
    assert not second.ready()  # it waits for the generation after the change
    client.answer(1, 9)
    assert second.get(timeout=1) == 9


def test_a_read_overtaken_by_an_event_is_used_once_and_not_trusted_after() -> None:
    cache, client = _cache()
    first = _request_sees(cache)
    gevent.sleep(0.01)
    client.fire()  # an event (a connection change, an earlier watch) while the read is out
    client.answer(0, 7)
    assert first.get(timeout=1) == 7  # it began before the change: this generation is its
    second = _request_sees(cache)
    gevent.sleep(0.01)
    assert len(client.reads) == 2  # but no later request takes it without reading
    client.answer(1, 8)
    assert second.get(timeout=1) == 8


def test_a_connection_change_drops_the_watched_generation() -> None:
    from kazoo.client import KazooState

    cache, client = _cache()
    assert _read_by_a_request(cache, client, 7) == 7
    cache._state(KazooState.SUSPENDED)
    cache._state(KazooState.CONNECTED)  # events may have been missed meanwhile
    second = _request_sees(cache)
    gevent.sleep(0.01)
    assert len(client.reads) == 2
    client.answer(1, 7)
    assert second.get(timeout=1) == 7


def test_without_metadata_watch_every_request_reads() -> None:
    client = _Client()
    settings = Settings(backend="kafka", zookeeper_hosts="127.0.0.1:1", mongo_database="d", metadata_watch=False)
    cache = MetadataCache(settings, object(), client=client)
    for expected in (4, 4, 5):
        assert _read_by_a_request(cache, client, expected) == expected
    assert len(client.reads) == 3
