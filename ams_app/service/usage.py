"""Usage counters: gathered in memory, added to the store in batches.

Counting costs no store write per message, nor per request: every publish and pull adds to an
in-memory batch (greenlets do not preempt each other, so the additions are exact), and a
background greenlet hands the batch to the store every ``flush_seconds`` as atomic increments,
which stay exact with many nodes adding at once. Reads add what is not flushed yet, so this
node's own traffic shows at once; a read that comes while a batch is being written waits for
that write (milliseconds), as the batch is then in neither place, and a read of the store that a
flush overtook (the batch moved from memory to the store while the read was on its way) reads
again. A crash loses at most the last ``flush_seconds`` of counts.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import gevent
from gevent.event import Event

from ams_app.backends.store import MetadataStore
from ams_app.errors import AmsError
from ams_app.models import Usage, UsageBatch

NS = 1_000_000_000
T = TypeVar("T")
log = logging.getLogger("ams")


DAY_SECONDS = 86_400  # a day of POSIX time
DAY_NS = DAY_SECONDS * NS


def day_of(ns: int) -> str:
    """The UTC day of the time ``ns`` (nanoseconds since the epoch), as 2026-11-30. A day of POSIX
    time is 86,400 s, so the day's number names it; the name is kept for the last few days instead
    of formatted on every publish and pull."""
    return _day_name(ns // DAY_NS)


@functools.lru_cache(maxsize=8)
def _day_name(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_SECONDS, UTC).strftime("%Y-%m-%d")


def _combine(stored: Usage, pending: Usage | None) -> Usage:
    if pending is None:
        return stored
    newer = pending if pending.latest_ns >= stored.latest_ns else stored
    return Usage(
        stored.messages + pending.messages,
        stored.bytes + pending.bytes,
        max(stored.latest_ns, pending.latest_ns),
        newer.rate,
    )


class UsageCounters:
    def __init__(self, store: MetadataStore, flush_seconds: float) -> None:
        self.store = store
        self.flush_seconds = flush_seconds
        self._batch = UsageBatch()
        self._settled = Event()  # set while no batch is on its way to the store
        self._settled.set()
        self._flushes = 0  # batches handed to the store so far
        self._last: dict[tuple[str, tuple[str, str]], int] = {}  # previous event time, for rates
        self._loop: Any = gevent.spawn(self._run) if flush_seconds > 0 else None

    def _add(
        self, kind: str, rows: dict[tuple[str, str], Usage], key: tuple[str, str], n: int, size: int, now: int
    ) -> None:
        previous = self._last.get((kind, key))
        if previous is None:
            previous = self.store.usage(kind, *key).latest_ns or now - NS
        self._last[(kind, key)] = now
        seconds = max((now - previous) / NS, 1e-9)
        row = rows.setdefault(key, Usage())
        row.messages += n
        row.bytes += size
        row.latest_ns = max(row.latest_ns, now)
        row.rate = n / seconds

    def published(self, project_uuid: str, topic: str, messages: int, size: int, now: int) -> None:
        self._add("topic", self._batch.topics, (project_uuid, topic), messages, size, now)
        day = (project_uuid, topic, day_of(now))
        self._batch.daily[day] = self._batch.daily.get(day, 0) + messages

    def consumed(self, project_uuid: str, sub: str, messages: int, size: int, now: int) -> None:
        self._add("sub", self._batch.subs, (project_uuid, sub), messages, size, now)

    def _read(self, read_store: Callable[[], T]) -> tuple[T, UsageBatch]:
        """What the store holds and what this node has not flushed, with no flush in between
        (else the counts it moved would be in neither, or in both)."""
        while True:
            self._settled.wait()
            flushes = self._flushes
            stored = read_store()
            if flushes == self._flushes and self._settled.is_set():
                return stored, self._batch

    def usage(self, kind: str, project_uuid: str, name: str) -> Usage:
        stored, batch = self._read(lambda: self.store.usage(kind, project_uuid, name))
        rows = batch.topics if kind == "topic" else batch.subs
        return _combine(stored, rows.get((project_uuid, name)))

    def all_usage(self, kind: str) -> list[tuple[str, str, Usage]]:
        stored, batch = self._read(lambda: self.store.all_usage(kind))
        rows = dict(batch.topics if kind == "topic" else batch.subs)
        out = [(p, n, _combine(u, rows.pop((p, n), None))) for p, n, u in stored]
        return out + [(p, n, dataclasses.replace(u)) for (p, n), u in rows.items()]

    def daily_messages(self, project_uuid: str, topic: str | None, days: int) -> list[tuple[str, int]]:
        stored, batch = self._read(lambda: self.store.daily_messages(project_uuid, topic, days))
        counts = dict(stored)
        for (p, t, day), n in batch.daily.items():
            if p == project_uuid and (topic is None or t == topic):
                counts[day] = counts.get(day, 0) + n
        return sorted(counts.items(), reverse=True)[:days]

    def daily_totals(self, start: str, end: str) -> dict[str, int]:
        totals, batch = self._read(lambda: self.store.daily_totals(start, end))
        for (p, _, day), n in batch.daily.items():
            if start <= day <= end:
                totals[p] = totals.get(p, 0) + n
        return totals

    def forget(self, project_uuid: str, kind: str | None = None, name: str | None = None) -> None:
        """Drop pending counts of a deleted topic or subscription (or of a whole project)."""
        for k, rows in (("topic", self._batch.topics), ("sub", self._batch.subs)):
            if kind in (None, k):
                for key in [key for key in rows if key[0] == project_uuid and name in (None, key[1])]:
                    del rows[key]
                    self._last.pop((k, key), None)
        if kind in (None, "topic"):
            days = [day for day in self._batch.daily if day[0] == project_uuid and name in (None, day[1])]
            for day in days:
                del self._batch.daily[day]

    def flush(self) -> None:
        self._settled.wait()  # one batch on its way at a time
        batch, self._batch = self._batch, UsageBatch()
        if batch.empty():
            return
        self._flushes += 1
        self._settled.clear()
        try:
            self.store.add_usage(batch)
        except Exception:
            self._merge_back(batch)
            raise
        finally:
            self._settled.set()

    def _merge_back(self, batch: UsageBatch) -> None:
        for source, target in ((batch.topics, self._batch.topics), (batch.subs, self._batch.subs)):
            for key, usage in source.items():
                target[key] = _combine(usage, target.get(key))
        for day, n in batch.daily.items():
            self._batch.daily[day] = self._batch.daily.get(day, 0) + n

    def _run(self) -> None:
        while True:
            gevent.sleep(self.flush_seconds)
            try:
                self.flush()
            except AmsError as exc:  # the store is known to be away: the counts wait in memory
                log.warning("usage flush failed (%s); retrying", exc.message)
            except Exception:  # the store failed unexpectedly: the counts wait in memory too
                log.exception("usage flush failed; retrying")

    def close(self) -> None:
        if self._loop is not None:
            self._loop.kill()
        self.flush()
