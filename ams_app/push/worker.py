"""The push worker: one delivery loop per push subscription it owns.

A loop reads the subscription's next messages from its first unacknowledged offset, waits for
the pace of the subscription's retry policy and for the worker's rate limit, posts them to the
endpoint (at most ``push_max_in_flight`` posts in flight per worker) and, on a 2xx answer,
acknowledges them. On any other answer, or none in time, nothing is acknowledged and the same
messages go again after the policy's interval: order is kept and nothing is skipped. A loop
only posts while its worker holds the subscription's claim.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event
from gevent.lock import BoundedSemaphore

from ams_app.backends.log import StoredMessage
from ams_app.models import Project, Subscription
from ams_app.push.coordination import Claim, Coordinator, LocalCoordinator, ZkCoordinator, preferred_worker
from ams_app.push.pacing import Pacer, RateLimiter
from ams_app.service.base import topic_key
from ams_app.service.push import active, push_key
from ams_app.settings import Settings
from ams_app.telemetry import GaugeCallback
from ams_app.webhook import PushClient

if TYPE_CHECKING:
    from ams_app.service.core import AmsService

log = logging.getLogger("ams.push")
#: Longest wait for new messages before looking again (appends by other nodes are not signalled).
_IDLE_POLL = 1.0
#: Pause after an error of the service itself (store or log unavailable).
_ERROR_PAUSE = 1.0


class Runner:
    """The delivery loop of one subscription."""

    def __init__(self, worker: PushWorker, key: str, project: Project, sub: Subscription) -> None:
        self.worker = worker
        self.key = key
        self.project = project
        self.sub = sub
        self.pacer = Pacer(sub.push.retry_type, sub.push.retry_period)
        self.stopping = Event()
        self.failures = 0
        self.delivered = 0
        self.greenlet = gevent.spawn(self._run)

    @property
    def name(self) -> str:
        return f"/projects/{self.project.name}/subscriptions/{self.sub.name}"

    def update(self, project: Project, sub: Subscription) -> None:
        self.project, self.sub = project, sub

    def stop(self) -> None:
        self.stopping.set()

    def _claim(self, error: str = "") -> Claim:
        return {"worker": self.worker.coordinator.worker_id, "failures": self.failures, "error": error}

    def _run(self) -> None:
        svc, coordinator = self.worker.service, self.worker.coordinator
        log.info("push: delivering %s", self.name)
        read_errors = 0
        # a batch that failed is sent again as it is (no store reads per retry); a replay
        # meanwhile makes its acknowledgement fail, and then the batch is read anew
        pending: tuple[int, list[StoredMessage]] | None = None
        try:
            while not self.stopping.is_set() and coordinator.owns(self.key):
                project, sub = self.project, self.sub
                config = sub.push
                self.pacer.reconfigure(config.retry_type, config.retry_period)
                log_key = topic_key(project, sub.topic)
                if pending is None:
                    try:
                        marker = svc.log.marker(log_key)
                        version, messages = svc.push_fetch(project, sub, config.max_messages)
                    except Exception as exc:
                        read_errors += 1
                        if read_errors == 1:
                            log.exception("push: reading %s", self.name)
                        else:
                            log.debug("push: reading %s: %s", self.name, exc)
                        self.stopping.wait(_ERROR_PAUSE)
                        continue
                    read_errors = 0
                    if not messages:
                        svc.log.wait_for_append(log_key, marker, _IDLE_POLL)
                        continue
                    pending = version, messages
                if self.stopping.wait(max(self.pacer.next_at() - time.monotonic(), 0)):
                    break
                # the configuration as it is now, not as of the last scan: once a modify or a
                # delete has answered, no request goes out under the old one
                try:
                    current = svc.store.get_subscription(project.uuid, sub.name)
                except Exception:
                    log.exception("push: reading %s", self.name)
                    self.stopping.wait(_ERROR_PAUSE)
                    continue
                if current is None or not active(current):
                    break
                if current.push != sub.push:
                    self.sub, pending = current, None
                    continue
                outcome = self._post_and_commit(project, sub, *pending)
                if outcome is None:
                    break
                if outcome:
                    pending = None
        finally:
            coordinator.release(self.key)
            log.info("push: stopped delivering %s (%d messages delivered)", self.name, self.delivered)

    def _post_and_commit(
        self, project: Project, sub: Subscription, version: int, messages: list[StoredMessage]
    ) -> bool | None:
        """Post and, on success, acknowledge: True (done), False (failed: again later), None
        (the claim is gone or the runner stops: nothing was sent)."""
        worker = self.worker
        gevent.sleep(worker.rate.delay())
        telemetry = worker.service.telemetry
        with worker.in_flight:
            if self.stopping.is_set() or not worker.coordinator.confirm(self.key):
                return None
            began = time.perf_counter()
            outcome = worker.client.deliver(sub.push, self.name, messages)
            telemetry.push_latency.labels(project.name).observe(time.perf_counter() - began)
        telemetry.push_deliveries.labels(project.name, "success" if outcome.ok else "failure").inc()
        self.pacer.record(outcome.ok)
        if not outcome.ok:
            self.failures += 1
            log.warning("push: %s: delivery failed (%s), attempt %d", self.name, outcome.detail, self.failures)
            worker.coordinator.report(self.key, self._claim(outcome.detail))
            return False
        try:
            if worker.service.push_commit(project, sub, version, messages):
                self.delivered += len(messages)
                telemetry.push_messages.labels(project.name).inc(len(messages))
            else:
                log.info("push: %s moved while delivering; reading again", self.name)
        except Exception:
            log.exception("push: acknowledging on %s", self.name)
        if self.failures:
            self.failures = 0
            worker.coordinator.report(self.key, self._claim())
        return True


class PushWorker:
    """Claims the push subscriptions that rank it first among the live workers, runs them,
    and hands over those that rank another worker first (after their post in flight)."""

    def __init__(self, service: AmsService, coordinator: Coordinator, settings: Settings) -> None:
        self.service = service
        self.coordinator = coordinator
        self.settings = settings
        self.client = PushClient(settings)
        self.in_flight = BoundedSemaphore(settings.push_max_in_flight)
        self.rate = RateLimiter(settings.push_max_rate)
        self.runners: dict[str, Runner] = {}
        self.wake = Event()
        self.stopping = Event()
        self._scanner: gevent.Greenlet | None = None
        self._gauge: GaugeCallback | None = None

    def start(self) -> PushWorker:
        self._gauge = GaugeCallback(
            "ams_push_consecutive_failures",
            "Posts in a row that failed, per push subscription this worker delivers (the most failing "
            "first, at most prometheus_series_limit).",
            ["project", "subscription"],
            self._failing,
        )
        self.service.telemetry.add(self._gauge)
        self.service.push_listeners.append(self.wake.set)
        self.coordinator.on_change = self.wake.set
        self.coordinator.start()
        self._scanner = gevent.spawn(self._scan_loop)
        return self

    def _failing(self) -> list[tuple[list[str], float]]:
        runners = heapq.nlargest(
            self.settings.prometheus_series_limit, list(self.runners.values()), key=lambda r: r.failures
        )
        return [([r.project.name, r.sub.name], float(r.failures)) for r in runners if not r.greenlet.dead]

    def _scan_loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            try:
                self.scan()
            except Exception:
                log.exception("push: scanning the push subscriptions")
            self.wake.wait(self.settings.push_scan_seconds)

    def scan(self) -> None:
        for key in [k for k, r in self.runners.items() if r.greenlet.dead]:
            del self.runners[key]
        if not self.coordinator.ensure_registered():
            return
        wanted = {push_key(p.uuid, s.name): (p, s) for p, s in self.service.active_push_subscriptions()}
        workers = self.coordinator.workers()
        me = self.coordinator.worker_id
        for key, runner in self.runners.items():
            if key in wanted and preferred_worker(key, workers) in (me, None):
                runner.update(*wanted[key])
            else:  # deleted, deactivated, or another worker's now: hand it over
                runner.stop()
        for key, (project, sub) in wanted.items():
            if key in self.runners or preferred_worker(key, workers) != me:
                continue
            claim: Claim = {"worker": me, "failures": 0, "error": ""}
            if self.coordinator.claim(key, claim):
                self.runners[key] = Runner(self, key, project, sub)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming, let the posts in flight finish (up to ``timeout``), release all."""
        self.stopping.set()
        self.wake.set()
        if self._scanner is not None:
            self._scanner.join(timeout)
        for runner in self.runners.values():
            runner.stop()
        gevent.joinall([r.greenlet for r in self.runners.values()], timeout=timeout)
        gevent.killall([r.greenlet for r in self.runners.values()], block=True, timeout=1)
        self.coordinator.close()
        self.client.close()
        if self.wake.set in self.service.push_listeners:
            self.service.push_listeners.remove(self.wake.set)
        if self._gauge is not None:
            self.service.telemetry.registry.unregister(self._gauge)
            self._gauge = None


def coordinator_for(settings: Settings, *, register: bool) -> Coordinator:
    """ZooKeeper with backend kafka (many nodes); in memory with backend embedded (one)."""
    if settings.backend == "kafka":
        return ZkCoordinator(settings, register=register)
    return LocalCoordinator(settings)


def start_push(service: AmsService, settings: Settings) -> Callable[[float], None]:
    """What ``ams serve`` runs for push: a worker in-process, or a view of the external ones.
    Returns what stops it (with the seconds that posts in flight get)."""
    if not settings.push_enabled:
        return lambda timeout: None
    if settings.push_worker == "in-process":
        worker = PushWorker(service, coordinator_for(settings, register=True), settings).start()
        service.push_monitor = worker.coordinator
        return worker.stop
    monitor = coordinator_for(settings, register=False)
    monitor.start()
    service.push_monitor = monitor
    return lambda timeout: monitor.close()
