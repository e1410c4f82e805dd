"""How a node's metadata cache reads the generation (ams_app/service/metacache.py): every request
uses a ZooKeeper read sent after it began, and requests that begin while a read is under way share
the next one. ZooKeeper is played by a stand-in whose reads answer when the test says."""

from __future__ import annotations

from typing import Any

import gevent
from gevent.event import AsyncResult

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

    def add_listener(self, listener: Any) -> None:
        pass

    def exists_async(self, path: str) -> AsyncResult:
        read = AsyncResult()
        self.reads.append(read)
        return read

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
