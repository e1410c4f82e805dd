"""Which push worker owns which subscription.

Every worker registers itself; each active push subscription is owned by at most one worker at
a time, the one that the subscription's key ranks highest among the live workers (rendezvous
hashing, so adding or losing a worker moves only its share). Ownership is a claim that dies
with its worker: an ephemeral znode in ZooKeeper (backend kafka), or a set in memory when the
only worker is ``ams serve`` itself (backend embedded). The API reads the same claims to tell
``pushStatus`` and ``/v1/status``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from ams_app.settings import Settings
from ams_app.zookeeper import zookeeper_client

log = logging.getLogger("ams.push")
Claim = dict[str, Any]  # {"worker": id, "failures": n, "error": "..."}


def new_worker_id(settings: Settings) -> str:
    node = settings.node_name or socket.gethostname()
    return f"{node}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def preferred_worker(key: str, workers: list[str]) -> str | None:
    """The live worker that should own ``key`` (highest rendezvous hash)."""
    if not workers:
        return None
    return max(workers, key=lambda w: hashlib.sha256(f"{w}\n{key}".encode()).digest())


class Coordinator(Protocol):
    worker_id: str
    #: Called when the workers or the session change (a worker rescans then).
    on_change: Callable[[], None]

    def start(self) -> None: ...
    def close(self) -> None: ...
    def ensure_registered(self) -> bool:
        """Register this worker if it is not (after a lost session); False when unreachable."""
        ...

    def workers(self) -> list[str]: ...
    def claims(self, keys: list[str]) -> dict[str, Claim]:
        """key -> claim, of those of ``keys`` that some worker owns."""
        ...

    def claim(self, key: str, claim: Claim) -> bool: ...
    def owns(self, key: str) -> bool:
        """This worker holds ``key`` as far as it knows (no doubt about its session)."""
        ...

    def confirm(self, key: str) -> bool:
        """``owns``, checked with the coordinator itself: right before each delivery, so that a
        worker that was cut off (paused, partitioned) and lost its claim meanwhile learns it
        before it posts rather than after."""
        ...

    def report(self, key: str, claim: Claim) -> None: ...
    def release(self, key: str) -> None: ...


class LocalCoordinator:
    """One worker in this process owns everything (backend embedded: one process per data dir)."""

    def __init__(self, settings: Settings) -> None:
        self.worker_id = new_worker_id(settings)
        self.on_change: Callable[[], None] = lambda: None
        self._claims: dict[str, Claim] = {}
        self._running = False

    def start(self) -> None:
        self._running = True

    def close(self) -> None:
        self._running = False
        self._claims.clear()

    def ensure_registered(self) -> bool:
        return self._running

    def workers(self) -> list[str]:
        return [self.worker_id] if self._running else []

    def claims(self, keys: list[str]) -> dict[str, Claim]:
        return {key: dict(self._claims[key]) for key in keys if key in self._claims}

    def claim(self, key: str, claim: Claim) -> bool:
        if key in self._claims:
            return False
        self._claims[key] = dict(claim)
        return True

    def owns(self, key: str) -> bool:
        return self._running and key in self._claims

    def confirm(self, key: str) -> bool:
        return self.owns(key)

    def report(self, key: str, claim: Claim) -> None:
        if key in self._claims:
            self._claims[key] = dict(claim)

    def release(self, key: str) -> None:
        self._claims.pop(key, None)


class ZkCoordinator:
    """Claims as ephemeral znodes under ``{root}/owners``, workers under ``{root}/workers``.

    A worker whose connection is suspended stops delivering at once (it cannot know whether
    its session survives); one whose session is lost forgets every claim: by then ZooKeeper
    has removed them and another worker may hold them.
    """

    def __init__(
        self, settings: Settings, *, register: bool = True, on_change: Callable[[], None] | None = None
    ) -> None:
        self.worker_id = new_worker_id(settings)
        self.root = settings.push_root
        self.register = register
        self.on_change: Callable[[], None] = on_change or (lambda: None)
        self.client = zookeeper_client(settings, settings.push_session_seconds, max_delay=2.0)
        self.client.add_listener(self._state)
        self._versions: dict[str, int] = {}  # key -> znode version of our claim
        self._suspended = True
        self._watching = False
        self._workers: list[str] = []  # kept current by a watch: reading it never waits

    # --- session ---------------------------------------------------------------------------
    def _state(self, state: str) -> None:
        from kazoo.client import KazooState

        if state == KazooState.LOST:
            log.warning("push: ZooKeeper session lost; dropping %d claims", len(self._versions))
            self._versions.clear()
            self._workers = []
            self._suspended = True
        elif state == KazooState.SUSPENDED:
            log.warning("push: ZooKeeper connection suspended; deliveries pause")
            self._suspended = True
        else:
            self._suspended = False
        self.on_change()

    def start(self) -> None:
        """Connect in the background (the service starts even while ZooKeeper is down)."""
        import gevent

        self.client.start_async()

        def setup() -> None:
            while not self.ensure_registered():
                gevent.sleep(0.5)

        gevent.spawn(setup)

    def close(self) -> None:
        try:
            self.client.stop()  # ends the session: our claims go at once
            self.client.close()
        except Exception:
            log.exception("push: closing the ZooKeeper client")
        self._versions.clear()

    def _path(self, kind: str, name: str = "") -> str:
        return f"{self.root}/{kind}/{name}" if name else f"{self.root}/{kind}"

    def ensure_registered(self) -> bool:
        from kazoo.exceptions import KazooException, NodeExistsError

        if not self.client.connected:
            return False
        try:
            self.client.ensure_path(self._path("owners"))
            self.client.ensure_path(self._path("workers"))
            if self.register and self.client.exists(self._path("workers", self.worker_id)) is None:
                with contextlib.suppress(NodeExistsError):
                    self.client.create(self._path("workers", self.worker_id), b"", ephemeral=True)
            if not self._watching:
                self._watching = True
                self.client.ChildrenWatch(self._path("workers"), self._workers_changed)
        except KazooException:
            log.exception("push: registering with ZooKeeper")
            return False
        return True

    def _workers_changed(self, children: list[str]) -> None:
        self._workers = sorted(children)
        self.on_change()

    # --- reads -------------------------------------------------------------------------------
    def workers(self) -> list[str]:
        return list(self._workers) if self.client.connected else []

    def claims(self, keys: list[str]) -> dict[str, Claim]:
        from kazoo.exceptions import KazooException, NoNodeError

        out: dict[str, Claim] = {}
        for key in keys:
            try:
                data, _ = self.client.get(self._path("owners", key))
                out[key] = json.loads(data or b"{}")
            except (NoNodeError, ValueError):
                continue
            except KazooException:
                return out
        return out

    # --- claims ------------------------------------------------------------------------------
    def claim(self, key: str, claim: Claim) -> bool:
        from kazoo.exceptions import KazooException, NodeExistsError

        if self._suspended:
            return False
        try:
            self.client.create(self._path("owners", key), json.dumps(claim).encode(), ephemeral=True)
        except NodeExistsError:
            return False
        except KazooException:
            log.exception("push: claiming %s", key)
            return False
        self._versions[key] = 0
        return True

    def owns(self, key: str) -> bool:
        return not self._suspended and key in self._versions

    def confirm(self, key: str) -> bool:
        from kazoo.exceptions import KazooException

        if not self.owns(key):
            return False
        try:  # a request on an expired session fails: the claim is not ours any more
            stat = self.client.exists(self._path("owners", key))
        except KazooException:
            return False
        session = self.client.client_id
        if stat is None or session is None or stat.ephemeralOwner != session[0]:
            self._versions.pop(key, None)
            return False
        return True

    def report(self, key: str, claim: Claim) -> None:
        from kazoo.exceptions import BadVersionError, KazooException, NoNodeError

        version = self._versions.get(key)
        if version is None:
            return
        try:
            stat = self.client.set(self._path("owners", key), json.dumps(claim).encode(), version=version)
            self._versions[key] = stat.version
        except (BadVersionError, NoNodeError):
            log.warning("push: the claim of %s is gone", key)
            self._versions.pop(key, None)
        except KazooException:
            log.exception("push: reporting on %s", key)

    def release(self, key: str) -> None:
        from kazoo.exceptions import KazooException

        version = self._versions.pop(key, None)
        if version is None:
            return
        with contextlib.suppress(KazooException):  # gone already, or the session is: it goes with it
            self.client.delete(self._path("owners", key), version=version)
