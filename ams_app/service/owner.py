"""One owner per pull subscription (backend kafka with ``consume_owner``): leases in memory, only
acknowledgements written, other nodes forward to the owner. docs/production.md tells why.

Ownership is an ephemeral znode ``{consume_root}/owners/{project uuid}.{subscription}`` holding the
owner's URL. A node that meets a subscription nobody owns claims it; one that finds another's claim
answers with :class:`ForwardTo` (the HTTP layer sends the request on, once). The owner reads the
cursor from the store when it claims, and then keeps it in memory:

- a pull leases messages in memory only. When the owner is lost its leases are lost with it and
  the messages are delivered again once the next owner holds the subscription (at-least-once);
- an acknowledge changes the cursor in memory and is answered only after the store holds it.
  Concurrent acks share one write (group commit), which is the store's single writer for that
  cursor. (The gRPC API's acknowledgements without exactly-once are answered once applied, and
  written behind as leases are: ``durable=False``; docs/pubsub.md);
- the store's compare-and-swap on the cursor's version is the fence. The new owner writes a version
  as soon as it claims, so a former owner that still believes it owns the subscription fails its
  next write and lets go;
- an owner hands out leases only while it has heard from ZooKeeper, on the session its claim
  belongs to, within a third of the session timeout. ZooKeeper expires a session no sooner than one
  whole timeout after it last heard from it, so a cut-off or paused owner has stopped before
  another node can claim.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from ams_app.errors import AmsError
from ams_app.models import Cursor, subscription_of_key
from ams_app.service import cursor as cur
from ams_app.settings import Settings
from ams_app.zookeeper import zookeeper_client

log = logging.getLogger("ams.owner")
R = TypeVar("R")

#: Seconds a waiting acknowledge gives the store's write before it answers 503.
_COMMIT_SECONDS = 10.0
#: Changes that need not wait for the store (leases) are written this long after the first of
#: them: the store's figures and a next owner lag this node by that much, at one write per round.
_BEHIND_SECONDS = 0.2
#: A request whose owner cannot be reached waits for its claim to go for twice the session and
#: this (ZooKeeper expires a session at the first tick past its timeout), looking again at least
#: every _RELEASE_RECHECK_SECONDS should a watch's event be lost with a reconnection.
_RELEASE_SLACK_SECONDS = 2.0
_RELEASE_RECHECK_SECONDS = 1.0


class ForwardTo(Exception):
    """The subscription is owned by the node at ``url``: send the request there (or to its
    Pub/Sub gRPC API at ``grpc``, host:port, when it serves one; ams_app/pubsub/relay.py)."""

    def __init__(self, url: str, key: str, grpc: str = "") -> None:
        super().__init__(url)
        self.url = url
        self.key = key
        self.grpc = grpc


def _claim_of(data: bytes) -> tuple[str, str]:
    """A claim's owner: its URL, and its gRPC address ("" when it serves none, or when it is of a
    release that did not say). Raises ValueError, KeyError or TypeError for a claim that is not one."""
    found = json.loads(data)
    grpc = found.get("grpc") or ""
    return str(found["url"]), str(grpc)


def moved() -> AmsError:
    return AmsError.unavailable("The subscription is moving to another node, try again")


@dataclasses.dataclass(eq=False)
class Held:
    """A subscription this node owns: the authoritative cursor and its write-behind state."""

    key: str
    session: int
    cursor: Cursor  # leases and acks; its version and store mark are the two fields below
    version: int  # the version the store holds (the last this node wrote)
    mark: Any  # the store's mark for writing the version after it (Cursor.store_mark)
    lock: Semaphore = dataclasses.field(default_factory=Semaphore)
    changes: int = 0  # changes made in memory that must reach the store
    committed: int = 0  # of those, how many the store holds
    flushing: bool = False
    round: Event = dataclasses.field(default_factory=Event)  # set when a write ends
    lost: bool = False
    behind: bool = False  # a write of the changes not made durable is on its way


class Owners:
    """The subscriptions this node owns, their claims in ZooKeeper and their cursors."""

    def __init__(self, settings: Settings, store: Any, client: Any = None) -> None:
        self.settings = settings
        self.store = store
        self.url = settings.node_url
        self.root = settings.consume_root
        self.session_seconds = settings.consume_session_seconds
        self.client = client or zookeeper_client(settings, self.session_seconds, max_delay=1.0)
        self.client.add_listener(self._state)
        self._held: dict[str, Held] = {}
        self._claiming: dict[str, Semaphore] = {}
        self.grpc = settings.node_grpc
        self._others: dict[str, tuple[str, str]] = {}  # key -> owner URL and gRPC, until the claim's watch fires
        self._confirmed_at = 0.0  # monotonic time of the last answer from ZooKeeper
        self._heartbeat: gevent.Greenlet | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self.client.start_async()
        self._heartbeat = gevent.spawn(self._beat)

    def close(self) -> None:
        """At a graceful stop (after the server has drained): write each held cursor as it is, its
        leases with it, so that acks for messages this node handed out are taken by the next owner
        instead of answering 409; then end the session, and the claims go at once."""
        if self._heartbeat is not None:
            self._heartbeat.kill()
        give_up = time.monotonic() + _COMMIT_SECONDS  # a store that is down must not hold the stop
        for held in list(self._held.values()):
            if held.changes > held.committed and not held.lost and time.monotonic() < give_up:
                try:
                    self._commit(held, held.changes)
                except AmsError as exc:  # not written: those leases' messages come again (at-least-once)
                    log.warning("owner: the leases of %s were not written at the stop: %s", held.key, exc.message)
        self._drop_all("closing")
        with contextlib.suppress(Exception):
            self.client.stop()  # the session ends: the claims go at once
            self.client.close()

    def _beat(self) -> None:
        """Keep ``_confirmed_at`` fresh without a request waiting for it."""
        while True:
            with contextlib.suppress(Exception):
                self._confirm()
            gevent.sleep(self.session_seconds / 6)

    def _state(self, state: str) -> None:
        from kazoo.client import KazooState

        if state == KazooState.CONNECTED:
            return
        # suspended: the session may live on, but another node may own our subscriptions by the
        # time we know; lost: it is gone. Either way our leases are forgotten (delivered again).
        self._confirmed_at = 0.0
        gevent.spawn(self._drop_all, f"ZooKeeper connection {state.lower()}")

    def _session(self) -> int | None:
        client_id = self.client.client_id if self.client.connected else None
        return int(client_id[0]) if client_id else None

    def _confirm(self) -> bool:
        """Ask ZooKeeper something; True when it answered on a live session."""
        from kazoo.exceptions import KazooException

        if not self.client.connected:
            return False
        asked = time.monotonic()
        try:
            self.client.exists(self.root)
        except KazooException:
            return False
        if not self.client.connected:
            return False
        self._confirmed_at = asked
        return True

    def _fresh(self, held: Held) -> bool:
        if held.lost or held.session != self._session():
            return False
        if time.monotonic() - self._confirmed_at < self.session_seconds / 3:
            return True
        return self._confirm() and held.session == self._session()

    # --- who owns what ---------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return f"{self.root}/owners/{key}"

    def hold(self, key: str) -> Held:
        """This node's hold on ``key``, claiming it when nobody owns it; ForwardTo when another
        node does; 503 while ZooKeeper cannot say."""
        held = self._held.get(key)
        if held is not None and self._fresh(held):
            return held
        if held is not None:
            self._drop(held, "its ZooKeeper session is not confirmed")
        other = self._others.get(key)
        if other is not None:
            raise ForwardTo(other[0], key, other[1])
        claiming = self._claiming.setdefault(key, Semaphore())
        with claiming:  # one claim attempt per key at a time on this node
            held = self._held.get(key)
            if held is not None and self._fresh(held):
                return held
            return self._claim(key)

    def elsewhere(self, key: str) -> str | None:
        """The URL of the node that owns ``key`` when it is another one, as far as ZooKeeper
        says; None when this node owns it, nobody does, or ZooKeeper cannot say (the request is
        then served here, which claims or answers 503). Never claims: it runs before the caller
        is authenticated."""
        found = self.owner_elsewhere(key)
        return found.url if found is not None else None

    def owner_elsewhere(self, key: str) -> ForwardTo | None:
        """As ``elsewhere``: where to send a call for ``key``, URL and gRPC address."""
        from kazoo.exceptions import KazooException, NoNodeError

        if key in self._held:
            return None
        other = self._others.get(key)
        if other is None:
            session = self._session()
            if session is None:
                return None
            try:
                data, stat = self.client.get(self._path(key), watch=lambda event, key=key: self._others.pop(key, None))
                if stat.ephemeralOwner == session:
                    return None
                other = _claim_of(data)
            except (NoNodeError, KazooException, ValueError, KeyError, TypeError):
                return None
            self._others[key] = other
        return ForwardTo(other[0], key, other[1])

    def _claim(self, key: str) -> Held:
        from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

        session = self._session()
        if session is None:
            raise AmsError.unavailable("Coordination is unavailable, try again")
        for _ in range(3):
            try:
                data, stat = self.client.get(self._path(key), watch=lambda event, key=key: self._others.pop(key, None))
            except NoNodeError:
                try:
                    self.client.ensure_path(f"{self.root}/owners")
                    claim = {"url": self.url, "grpc": self.grpc} if self.grpc else {"url": self.url}
                    self.client.create(self._path(key), json.dumps(claim).encode(), ephemeral=True)
                except NodeExistsError:
                    continue  # another node was quicker: look again
                except KazooException as exc:
                    raise AmsError.unavailable("Coordination is unavailable, try again") from exc
                return self._take(key, session)
            except KazooException as exc:
                raise AmsError.unavailable("Coordination is unavailable, try again") from exc
            if stat.ephemeralOwner == session:  # ours already (a hold dropped while the claim stayed)
                return self._take(key, session)
            try:
                other = _claim_of(data)
            except (ValueError, KeyError, TypeError):
                raise moved() from None
            self._others[key] = other
            raise ForwardTo(other[0], key, other[1])
        raise moved()

    def _take(self, key: str, session: int) -> Held:
        """Start owning ``key``: read the cursor and write it back at once (the fence)."""
        project_uuid, name = subscription_of_key(key)
        for _ in range(5):
            cursor = self.store.get_cursor(project_uuid, name)
            if cursor is None:
                self.release(key)
                raise AmsError.not_found("Subscription")
            if self.store.swap_cursor(project_uuid, name, cursor):
                held = Held(key, session, cursor, cursor.version + 1, cursor.store_mark)
                self._held[key] = held
                with contextlib.suppress(Exception):  # a claim deleted by another node: let go
                    self.client.exists(self._path(key), watch=self._on_claim_event(held))
                log.info("owner: holding %s", key)
                return held
            gevent.sleep(0.01)  # a former owner's last write: read it again
        self.release(key)
        raise moved()

    def _on_claim_event(self, held: Held) -> Callable[[Any], None]:
        return lambda event: self._drop(held, "its claim was removed")

    def release(self, key: str) -> None:
        from kazoo.exceptions import KazooException

        held = self._held.pop(key, None)
        if held is not None:
            held.lost = True
            held.round.set()
        with contextlib.suppress(KazooException):
            _, stat = self.client.get(self._path(key))
            if stat.ephemeralOwner == self._session():
                self.client.delete(self._path(key), version=stat.version)

    def forget(self, key: str) -> None:
        """The subscription was deleted or became a push subscription: remove its claim, whoever
        holds it (the holder's watch makes it let go), so that a subscription made again under
        the same name starts from the store."""
        from kazoo.exceptions import KazooException

        self._others.pop(key, None)
        held = self._held.pop(key, None)
        if held is not None:
            self._drop(held, "the subscription changed")
        with contextlib.suppress(KazooException):
            self.client.delete(self._path(key))

    def unreachable(self, key: str) -> None:
        """A forward to the owner failed: ask ZooKeeper again next time."""
        self._others.pop(key, None)

    def wait_for_release(self, key: str, url: str) -> bool:
        """After the owner at ``url`` could not be reached: wait until its claim on ``key`` is gone
        or names another node, and say whether it did. A node that died keeps its claim until
        ZooKeeper expires its session (``consume_session_seconds``, and up to a tick more), so the
        wait is bounded by twice that and a little; the request is then served by the next owner
        instead of answering 503 meanwhile. False when ZooKeeper cannot say, or the claim stayed."""
        from kazoo.exceptions import KazooException, NoNodeError

        self._others.pop(key, None)
        deadline = time.monotonic() + 2 * self.session_seconds + _RELEASE_SLACK_SECONDS
        changed = Event()
        while True:
            changed.clear()
            try:
                data, _ = self.client.get(self._path(key), watch=lambda event: changed.set())
                holder = _claim_of(data)[0]
            except NoNodeError:
                return True
            except (KazooException, ValueError, KeyError, TypeError):
                return False
            if holder != url:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            changed.wait(min(remaining, _RELEASE_RECHECK_SECONDS))  # the watch, or a look again

    def _drop(self, held: Held, why: str) -> None:
        if self._held.get(held.key) is held:
            del self._held[held.key]
        if not held.lost:
            log.warning("owner: letting go of %s: %s", held.key, why)
        held.lost = True
        held.round.set()

    def _drop_all(self, why: str) -> None:
        for held in list(self._held.values()):
            self._drop(held, why)
        self._others.clear()

    def held_keys(self) -> list[str]:
        return sorted(self._held)

    def leases_in_flight(self) -> int:
        """Leases of the held cursors not yet expired (a gauge for docs/monitoring.md)."""
        now_ns = time.time_ns()
        return sum(
            1 for held in list(self._held.values()) for lease in held.cursor.leases if not cur.expired(lease, now_ns)
        )

    # --- the cursor --------------------------------------------------------------------------------
    def change(self, key: str, change: Callable[[Cursor], tuple[Cursor | None, R]], *, durable: bool) -> R:
        """Apply ``change`` to the held cursor (one change at a time per subscription); with
        ``durable``, return only once the store holds the result."""
        held = self.hold(key)
        with held.lock:
            if held.lost or not self._fresh(held):
                self._drop(held, "its ZooKeeper session is not confirmed")
                raise moved()
            updated, result = change(held.cursor)
            if updated is not None:
                held.cursor = updated
                held.changes += 1
            mine = held.changes
        if durable and updated is not None:
            self._commit(held, mine)
        elif updated is not None and not held.behind:
            held.behind = True
            gevent.spawn_later(_BEHIND_SECONDS, self._write_behind, held)
        return result

    def _write_behind(self, held: Held) -> None:
        held.behind = False
        if held.lost or held.committed >= held.changes:
            return
        try:
            self._commit(held, held.changes)
        except AmsError as exc:  # the next change or acknowledgement writes it
            log.debug("owner: writing %s behind: %s", held.key, exc.message)

    def cursor_of(self, key: str) -> Cursor | None:
        """The cursor of a subscription this node holds, as it is now (None: not held here)."""
        held = self._held.get(key)
        return held.cursor if held is not None and not held.lost else None

    def _commit(self, held: Held, mine: int) -> None:
        give_up = time.monotonic() + _COMMIT_SECONDS
        while held.committed < mine:
            if held.lost:
                raise moved()
            if time.monotonic() > give_up:
                raise AmsError.unavailable("The store did not take the acknowledgement in time, try again")
            if held.flushing:
                held.round.wait(max(give_up - time.monotonic(), 0.01))
                continue
            held.flushing = True
            try:
                self._flush(held)
            finally:
                held.flushing = False
                done, held.round = held.round, Event()
                done.set()

    def _flush(self, held: Held) -> None:
        """One write of the cursor as it is now; every change made so far rides along."""
        project_uuid, name = subscription_of_key(held.key)
        target = held.changes
        snapshot = dataclasses.replace(held.cursor, version=held.version, store_mark=held.mark)
        try:
            written = self.store.swap_cursor(project_uuid, name, snapshot)
        except Exception:
            log.exception("owner: writing the cursor of %s", held.key)
            return
        if written:
            held.version, held.mark = snapshot.version + 1, snapshot.store_mark
            held.committed = max(held.committed, target)
            return
        fresh = self.store.get_cursor(project_uuid, name)
        if fresh is not None and fresh.version == snapshot.version:  # only our read was too old to prove
            held.mark = fresh.store_mark
            return
        found = fresh.version if fresh is not None else "none"
        self._drop(held, f"another writer changed its cursor (this node had {snapshot.version}, the store {found})")
        self.release(held.key)
