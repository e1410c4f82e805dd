"""A node's cache of the metadata that nearly every request looks up (the caller's user, the
project, the topic, the subscription), consistent across nodes through one ZooKeeper znode.

Why: on backend kafka each such lookup is a MongoDB round trip; a pull and its acknowledge made
seven of them, which cost the metadata server more CPU than the messages themselves
(docs/benchmarks.md). Why not a time-to-live: a change made through one node (a deleted topic, a
refreshed token, a revoked ACL) must hold on every node as soon as its request has answered.

How (docs/production.md, "Metadata cache"):

- The znode ``/ams-metadata/{mongo_database}`` is the *generation*: its ``mzxid``, which
  ZooKeeper makes grow with every write.
- A change to cached metadata writes the znode before the store (no ZooKeeper: 503 and nothing
  changed) and again after it (retried in the background until ZooKeeper takes it).
- Every API request takes the generation when it begins (:meth:`MetadataCache.view`). It uses a
  cached entry only when the entry was read from the store after a generation at least as recent
  as the one it saw. Any change that answered before the request began has moved the generation
  past every entry read before the change, so the request reads it afresh.
- The generation comes from a read of the znode's stat, which also sets a ZooKeeper watch on it.
  Until that watch fires (any write to the znode, through any node) or the connection changes
  state, the generation read is still the znode's, and requests take it without a round trip;
  once it fires, the next request reads again. ZooKeeper sends the watch's event to a node when
  its server applies the write, before the writing node's call returns, so a change that has
  answered has been announced to every node connected to a server that has it, just as a read
  would have seen it; what a request no longer waits for is the round trip (about a millisecond
  of a lone publish's 2.5: docs/benchmarks.md, "Publishing against the raw producer").
- A request that cannot read the generation, and any work outside a request (push deliveries,
  background tasks), reads the store directly. A node whose ZooKeeper connection is suspended or
  lost forgets its entries.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
from gevent.event import AsyncResult

from ams_app.errors import AmsError
from ams_app.settings import Settings
from ams_app.zookeeper import zookeeper_client

log = logging.getLogger(__name__)

#: Store methods whose answers are cached (by their arguments).
CACHED = frozenset({"get_project", "get_user", "get_topic", "get_subscription"})
#: Store methods that neither change cached metadata nor are cached. Every other method is taken
#: as a change and moves the generation (a new method is safe until it is listed here).
PASSTHROUGH = frozenset(
    {
        "ping",
        "close",
        "list_projects",
        "get_users",
        "list_users",
        "acl_of_user",
        "list_topics",
        "list_subscriptions",
        "subscriptions_of_topic",
        "push_subscriptions",
        "get_schema",
        "list_schemas",
        "create_registration",
        "get_registration",
        "list_registrations",
        "update_registration",
        "delete_registration",
        # AuthN: never cached, and no cached metadata changes with them (a binding names a user)
        "create_service_type",
        "get_service_type",
        "list_service_types",
        "update_service_type",
        "delete_service_type",
        "create_binding",
        "get_binding",
        "list_bindings",
        "find_binding",
        "update_binding",
        "delete_binding",
        "record_binding_use",
        "add_usage",
        "usage",
        "all_usage",
        "daily_messages",
        "daily_totals",
        "replace_daily_usage",
        "created_between",
        "put_node_metrics",
        "node_metrics",
        "get_cursor",
        "swap_cursor",
    }
)
#: Entries kept at most; past it the cache starts again empty.
MAX_ENTRIES = 20_000
_RETRY_SECONDS = 0.5
_CONNECT_SECONDS = 10.0
_RECONNECT_SECONDS = 2.0  # how long a change waits for a lost connection to come back
_READ_SECONDS = 2.0  # a request waits this long at most for the generation
_QUIET_SECONDS = 1.0  # after a read that timed out, requests do not ask for this long

#: The generation the current request saw (a one-item list: the request's own changes raise it);
#: None outside a request, or when the generation could not be read.
_seen: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("ams_metadata_seen", default=None)


class MetadataCache:
    """Wraps a MetadataStore: the same methods, the four lookups cached (see the module's doc)."""

    def __init__(self, settings: Settings, store: Any, client: Any = None) -> None:
        from kazoo.exceptions import KazooException

        self.inner = store
        self.path = f"/ams-metadata/{settings.mongo_database}"
        self.client = client or zookeeper_client(settings, 10.0, max_delay=1.0)
        self._unreachable = (KazooException, self.client.handler.timeout_exception)
        self._entries: dict[tuple[Any, ...], tuple[int, bytes]] = {}
        self.connect_seconds = _CONNECT_SECONDS  # a change waits this long for a connection
        self._latest = 0  # the highest generation seen on this node
        self._quiet_until = 0.0
        self._connected_once = False
        self._pending: gevent.Greenlet | None = None  # a move of the generation still to make
        self._gathering: AsyncResult | None = None  # the round of reads requests are joining
        self._reading = False  # a greenlet is sending rounds (_rounds)
        #: the generation the last read found, while the watch that read set has not fired
        self._watched: int | None = None
        self._events = 0  # watch events and connection changes so far
        self._watch = settings.metadata_watch
        self.client.add_listener(self._state)

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.client.start_async()

    def close(self) -> None:
        if self._pending is not None:
            self._pending.join(timeout=5)
        with contextlib.suppress(Exception):
            self.client.stop()
            self.client.close()
        self.inner.close()

    def _state(self, state: str) -> None:
        from kazoo.client import KazooState

        self._changed()
        if state == KazooState.CONNECTED:
            self._connected_once = True
        else:  # changes may go unannounced to this node meanwhile
            self._entries = {}

    def _changed(self, event: Any = None) -> None:
        """The watch fired (the generation moved), or the connection changed: read it again."""
        self._events += 1
        self._watched = None

    # --- the generation ------------------------------------------------------------------------
    def _ask(self, call: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """One ZooKeeper call, bounded: kazoo queues a call made while it is disconnected until
        it reconnects, which could be never."""
        return call(*args).get(timeout=timeout or self.connect_seconds)

    def _read(self) -> int | None:
        """The generation, from a ZooKeeper read sent after this call began. Requests that begin
        while a read is under way share the next one (a *round*): it is sent once that read has
        answered, so it too was sent after each of them began, and a busy node makes one read per
        round trip instead of one per request."""
        if not self.client.connected or time.monotonic() < self._quiet_until:
            return None
        mine = self._gathering
        if mine is None:
            mine = self._gathering = AsyncResult()
            if not self._reading:
                self._reading = True
                gevent.spawn(self._rounds)
        try:
            return mine.get(timeout=_READ_SECONDS * 2 + 1)  # type: ignore[no-any-return]
        except gevent.Timeout:
            return None

    def _rounds(self) -> None:
        """Send the gathered rounds' reads one after another, until no request waits."""
        current: AsyncResult | None = None
        try:
            while self._gathering is not None:
                current, self._gathering = self._gathering, None
                current.set(self._generation())
                current = None
        finally:
            self._reading = False
            if current is not None:  # stopped mid-read: its requests read the store directly
                current.set(None)
            if self._gathering is not None:  # a round gathered meanwhile gets a greenlet of its own
                self._reading = True
                gevent.spawn(self._rounds)

    def _generation(self) -> int | None:
        if not self.client.connected or time.monotonic() < self._quiet_until:
            return None
        events = self._events
        try:
            stat = self._ask(self.client.exists_async, self.path, self._changed, timeout=_READ_SECONDS)
            if stat is None:
                self._create()
                stat = self._ask(self.client.exists_async, self.path, self._changed, timeout=_READ_SECONDS)
        except self._unreachable:
            # a server that stalls without closing the connection: the next requests read the
            # store directly for a while instead of each waiting on it
            self._quiet_until = time.monotonic() + _QUIET_SECONDS
            return None
        if stat is None or not self.client.connected:
            return None
        if self._watch and self._events == events:  # nothing fired since the read: its watch stands for it
            self._watched = int(stat.mzxid)
        return int(stat.mzxid)

    def _create(self) -> None:
        from kazoo.exceptions import NodeExistsError

        with contextlib.suppress(NodeExistsError):
            self.client.ensure_path_async("/".join(self.path.split("/")[:-1]) or "/").get(timeout=self.connect_seconds)
            self._ask(self.client.create_async, self.path, b"")

    def _move(self) -> int:
        """Write the znode; its new mzxid. Raises KazooException or the handler's timeout."""
        from kazoo.exceptions import ConnectionLoss, NoNodeError

        # just started: wait for the first connection; reconnecting (a leader election): a moment
        patience = self.connect_seconds if not self._connected_once else min(self.connect_seconds, _RECONNECT_SECONDS)
        waited = 0.0
        while not self.client.connected and waited < patience:
            gevent.sleep(0.05)
            waited += 0.05
        if not self.client.connected:
            raise ConnectionLoss("not connected to ZooKeeper")
        try:
            stat = self._ask(self.client.set_async, self.path, b"")
        except NoNodeError:
            self._create()
            stat = self._ask(self.client.set_async, self.path, b"")
        return int(stat.mzxid)

    def _seen_now(self, generation: int) -> None:
        if generation > self._latest:
            self._latest = generation
            self._entries = {}  # read before it: no request that begins from now on can use them
        seen = _seen.get()
        if seen is not None and generation > seen[0]:
            seen[0] = generation  # this request's own change: it must read it back

    def _move_later(self) -> None:
        """After a change the store took: move the generation until ZooKeeper takes it."""

        def retry() -> None:
            while True:
                try:
                    self._seen_now(self._move())
                    log.warning("metadata generation moved after a ZooKeeper outage")
                    return
                except self._unreachable:  # keep trying
                    gevent.sleep(_RETRY_SECONDS)

        try:
            self._seen_now(self._move())
        except self._unreachable:
            log.warning("metadata generation not moved after a change (ZooKeeper unreachable); retrying")
            if self._pending is None or self._pending.dead:
                self._pending = gevent.spawn(retry)

    @contextlib.contextmanager
    def view(self) -> Iterator[None]:
        """The scope of one request: lookups in it may be served from the cache."""
        generation = self._watched if self.client.connected else None
        if generation is None:
            generation = self._read()
        if generation is None:
            self._entries = {}
            yield
            return
        self._seen_now(generation)
        token = _seen.set([generation])
        try:
            yield
        finally:
            _seen.reset(token)

    # --- the store's methods -------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        if name in CACHED:
            wrapped = self._cached(name, attr)
        elif name in PASSTHROUGH:
            wrapped = attr
        else:
            wrapped = self._changing(attr)
        self.__dict__[name] = wrapped  # found directly from now on
        return wrapped

    def _cached(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(*args: Any, **kwargs: Any) -> Any:
            seen = _seen.get()
            if seen is None:
                return fn(*args, **kwargs)
            key = (name, args, tuple(sorted(kwargs.items())))
            entry = self._entries.get(key)
            if entry is not None and entry[0] >= seen[0]:
                # a copy each time: callers change what they get before writing it. Kept pickled,
                # a copy costs a third of a deepcopy of the model (a user: 10 µs against 33)
                return pickle.loads(entry[1])
            read_at = seen[0]
            value = fn(*args, **kwargs)
            current = self._entries.get(key)
            if read_at >= self._latest and (current is None or current[0] <= read_at):
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries = {}
                self._entries[key] = (read_at, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
            return value

        return lookup

    def _changing(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def change(*args: Any, **kwargs: Any) -> Any:
            try:
                self._seen_now(self._move())
            except self._unreachable as exc:  # nothing is changed yet
                raise AmsError.unavailable("Metadata cannot change now: ZooKeeper is unreachable") from exc
            try:
                return fn(*args, **kwargs)
            finally:
                self._move_later()

        return change
