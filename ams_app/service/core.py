"""AmsService: every API operation, over a MetadataStore and a MessageLog, composed of one module
per resource (users.py, projects.py, topics.py, subscriptions.py, schemas.py, registrations.py,
metrics.py, push.py; their shared lookups in base.py), as the HTTP modules of ams_app/api/ are.
Here: the backends, their health, and who a token stands for."""

from __future__ import annotations

import logging
from typing import cast

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from ams_app import auth
from ams_app.auth import Caller
from ams_app.backends.log import MessageLog
from ams_app.backends.store import MetadataStore
from ams_app.service import owner
from ams_app.service.guard import Guarded
from ams_app.service.metacache import MetadataCache
from ams_app.service.metrics import MetricsOps
from ams_app.service.projects import ProjectOps
from ams_app.service.registrations import RegistrationOps
from ams_app.service.snapshots import SnapshotOps
from ams_app.service.subscriptions import SubscriptionOps
from ams_app.service.topics import TopicOps
from ams_app.service.usage import UsageCounters
from ams_app.settings import Settings
from ams_app.telemetry import Telemetry

_HEALTH_INTERVAL = 2.0
_HEALTH_TIMEOUT = 5.0
logger = logging.getLogger("ams")  # not "log": self.log is the message log


class AmsService(ProjectOps, TopicOps, SubscriptionOps, SnapshotOps, RegistrationOps, MetricsOps):  # each a ServiceBase
    def __init__(self, settings: Settings, store: MetadataStore, log: MessageLog) -> None:
        self.settings = settings
        self._ordered_pulls: dict[str, Semaphore] = {}
        #: What the last health check found unreachable, by name ("Kafka", "the metadata
        #: store", "ZooKeeper"); /v1/status reports it, and calls to a backend named here fail
        #: at once (ams_app/service/guard.py).
        self.unavailable: tuple[str, ...] = ()
        self.store_name = "the metadata store" if settings.backend == "kafka" else "the embedded metadata store"
        self.log_name = "Kafka" if settings.backend == "kafka" else "the embedded message log"
        #: set to have the health check look again now rather than at its next interval
        self._look_again = Event()
        #: This process's metrics for Prometheus (ams_app/telemetry.py, docs/monitoring.md).
        self.telemetry = Telemetry(self.node_name, settings.backend)
        kafka = settings.backend == "kafka"
        self._guards = {
            self.store_name: Guarded(
                store,
                self.store_name,
                lambda: self.store_name in self.unavailable,
                self._look_again.set,
                telemetry=self.telemetry,
                backend="mongodb" if kafka else "embedded_store",
            ),
            self.log_name: Guarded(
                log,
                self.log_name,
                lambda: self.log_name in self.unavailable,
                self._look_again.set,
                telemetry=self.telemetry,
                backend="kafka" if kafka else "embedded_log",
            ),
        }
        store = cast(MetadataStore, self._guards[self.store_name])
        log = cast(MessageLog, self._guards[self.log_name])
        self.metadata: MetadataCache | None = None
        if settings.metadata_cache and settings.backend == "kafka" and settings.zookeeper_hosts:
            self.metadata = MetadataCache(settings, store)
            self.metadata.start()
            store = self.metadata  # the same methods, four of them cached
        self.store = store
        self.log = log
        self.stopping = Event()
        self.usage = UsageCounters(store, settings.metrics_flush_seconds)
        self.push_listeners = []
        self._health_watch = gevent.spawn(self._watch_health)
        if settings.consume_owner and settings.backend == "kafka":
            self.owners = owner.Owners(settings, store)
            self.owners.start()
        self.register_figures()

    @property
    def backend_healthy(self) -> bool:
        """Both backends answered the last health check (ZooKeeper aside: without it the nodes
        serve on, only metadata changes and push ownership wait for it)."""
        return not {self.store_name, self.log_name} & set(self.unavailable)

    def _zookeeper_connected(self) -> bool:
        clients = [getattr(user, "client", None) for user in (self.metadata, self.owners, self.push_monitor)]
        return all(client.connected for client in clients if client is not None)

    def _watch_health(self) -> None:
        """Ping both backends every few seconds, and look at the ZooKeeper sessions, in the
        background: /v1/status reads the result and never waits on a slow or stalled backend."""
        while not self.stopping.is_set():
            down: list[str] = []
            for name, ping in ((self.log_name, self.log.ping), (self.store_name, self.store.ping)):
                try:
                    with gevent.Timeout(_HEALTH_TIMEOUT):
                        ping()
                except (Exception, gevent.Timeout):
                    down.append(name)
            if not self._zookeeper_connected():
                down.append("ZooKeeper")
            if tuple(down) != self.unavailable:
                logger.warning("unavailable: %s", ", ".join(down) or "nothing any more")
            newly = set(down) - set(self.unavailable)
            self.unavailable = tuple(down)
            for name in newly & set(self._guards):  # the calls waiting on it fail now, not at their timeout
                abandoned = self._guards[name].abandon()
                if abandoned:
                    logger.warning("%s is unavailable: %d waiting calls answer 503", name, abandoned)
            self._look_again.wait(_HEALTH_INTERVAL)  # or sooner, when a call found a backend gone
            self._look_again.clear()

    def close(self) -> None:
        self.stopping.set()
        self._health_watch.kill()
        self.figures_aside.close()
        if self.owners is not None:
            self.owners.close()
        self.usage.close()
        self.store.close()
        self.log.close()

    # ----------------------------------------------------------------- lookups ----------
    def caller_for_token(self, token: str) -> Caller | None:
        """The caller a token stands for, with its service roles; None if unknown."""
        if not token:
            return None
        if self.settings.service_token and token == self.settings.service_token:
            return auth.SERVICE_CALLER
        if not token.isprintable():  # no token holds a control character: not worth a lookup
            return None
        user = self.store.get_user(token=token)
        if user is None:
            return None
        return Caller(user, frozenset(user.service_roles))
