"""The service-wide figures for Prometheus, computed from the backends: on a server, aside from
its scrapes (``FiguresAside``); by ``ams admin metrics``, there and then (docs/monitoring.md,
"Consumers: the service-wide figures" and "What a scrape costs").

Every node computes the same figures from the shared backends, so queries aggregate them with
``max by (project, subscription)`` (the alert rules do). ``ams admin metrics`` writes them alone
to a file for node_exporter's textfile collector.

**Bounded cardinality.** Per project, every figure is given in full. Per topic and per
subscription, each family holds at most ``prometheus_series_limit`` series (settings): the
largest (traffic families: the most messages; backlog families: the longest backlogs), so the
worst offenders are always on the page. ``ams_metrics_series_omitted{family}`` says how many
each family left out; a limit of 0 gives the per-project figures only.

What a round costs: one metadata listing per project, one cursor read per subscription, one
offsets query per topic, and one message read per subscription that is shown with a backlog whose
oldest unacknowledged message is not the one the round before read (for its age; the publish
times read are kept for the next round). The message reads are aside: they move nothing the
consume path keeps in place (``MessageLog.peek``).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ams_app.models import subscription_key
from ams_app.service import delivery as dl
from ams_app.service.base import topic_key

if TYPE_CHECKING:
    from ams_app.backends.log import MessageLog
    from ams_app.backends.store import MetadataStore
    from ams_app.models import Cursor, Project, Subscription
    from ams_app.service.usage import UsageCounters

log = logging.getLogger("ams")
_PAGE = 1000


@dataclass
class SubState:
    project: Project
    sub: Subscription
    counts: dl.Backlog  # its messages not acknowledged, by state
    cursor: Cursor

    @property
    def backlog(self) -> int:
        return self.counts.total

    @property
    def first_unacked(self) -> int:
        return self.counts.first


class ServiceFigures(Collector):
    """Collector of the figures of the whole service (not of this process), read from the
    service's (guarded) backends and usage counters; at most ``limit`` series per family."""

    def __init__(
        self,
        store: MetadataStore,
        log: MessageLog,
        usage: UsageCounters,
        limit: int,
        held: Callable[[str], Cursor | None] = lambda key: None,
    ) -> None:
        self.store, self.log, self.usage, self.limit = store, log, usage, limit
        #: the cursor of a subscription this node owns, fresher than the store's (consume_owner)
        self.held = held
        #: publish times of the oldest unacknowledged messages the last round read, and this
        #: round's: by subscription (its creation too, so that one made again under the same name
        #: is not taken for the other) and offset, a message that stays the oldest is read once
        self._publish_ns: dict[tuple[str, str, int, int], int] = {}
        self._read_publish_ns: dict[tuple[str, str, int, int], int] = {}

    def collect(self) -> Iterator[Metric]:
        """Compute the figures now and give them (``ams admin metrics``, a one-shot command)."""
        yield from self.page(self.compute(), None)

    def compute(self) -> Round:
        """One round: every family, or none when a backend failed (``ok`` false then)."""
        start = time.perf_counter()
        try:
            families, ok = self._families(), True
        except Exception:  # a backend down: say so on the page rather than failing the scrape
            log.warning("metrics: the service-wide figures could not be computed", exc_info=True)
            families, ok = [], False
        finally:  # what this round did not read again is forgotten (a subscription gone, moved on)
            self._publish_ns, self._read_publish_ns = self._read_publish_ns, {}
        return Round(families, ok, time.perf_counter() - start, time.monotonic())

    @staticmethod
    def page(figures: Round | None, age: float | None) -> Iterator[Metric]:
        """The round's families and the gauges that say how it went; ``age``: how long ago it ended,
        for a page that may show an earlier round than the scrape's (``FiguresAside``)."""
        if figures is not None:
            yield from figures.families
        status = GaugeMetricFamily(
            "ams_service_figures_ok", "1 when the service-wide figures below could be read from the backends."
        )
        status.add_metric([], 1.0 if figures is not None and figures.ok else 0.0)
        yield status
        if figures is None:
            return
        took = GaugeMetricFamily(
            "ams_service_figures_duration_seconds", "How long computing the service-wide figures took."
        )
        took.add_metric([], figures.seconds)
        yield took
        if age is not None:
            gauge = GaugeMetricFamily(
                "ams_service_figures_age_seconds",
                "How long ago the round of service-wide figures on this page ended.",
            )
            gauge.add_metric([], age)
            yield gauge

    # ---------------------------------------------------------------------------------------
    def _families(self) -> list[Metric]:
        limit = self.limit
        projects = {p.uuid: p for p in self.store.list_projects()}
        omitted = GaugeMetricFamily(
            "ams_metrics_series_omitted",
            "Series each per-topic or per-subscription family left out (prometheus_series_limit).",
            labels=["family"],
        )
        out: list[Metric] = []

        # traffic: counters, per project in full, the busiest topics and subscriptions
        for kind, what, label in (("topic", "published to", "topic"), ("sub", "delivered from", "subscription")):
            rows = [(projects[p].name, n, u) for p, n, u in self.usage.all_usage(kind) if p in projects]
            noun = "topic" if kind == "topic" else "subscription"
            per_project: dict[str, list[int]] = {}
            for project, _name, usage in rows:
                totals = per_project.setdefault(project, [0, 0])
                totals[0] += usage.messages
                totals[1] += usage.bytes
            verb = "published" if kind == "topic" else "delivered"
            pm = CounterMetricFamily(
                f"ams_project_{verb}_messages", f"Messages {what} the project's {noun}s.", labels=["project"]
            )
            pb = CounterMetricFamily(
                f"ams_project_{verb}_bytes", f"Bytes of data (base64) {what} the project's {noun}s.", labels=["project"]
            )
            for project, (messages, size) in sorted(per_project.items()):
                pm.add_metric([project], messages)
                pb.add_metric([project], size)
            shown = heapq.nlargest(limit, rows, key=lambda row: row[2].messages)
            extra = "" if kind == "topic" else " (redeliveries included)"
            fm = CounterMetricFamily(
                f"ams_{noun}_messages", f"Messages {what} the {noun}{extra}.", labels=["project", label]
            )
            fb = CounterMetricFamily(
                f"ams_{noun}_bytes", f"Bytes of data (base64) {what} the {noun}.", labels=["project", label]
            )
            for project, name, usage in shown:
                fm.add_metric([project, name], usage.messages)
                fb.add_metric([project, name], usage.bytes)
            omitted.add_metric([f"ams_{noun}_messages_total"], len(rows) - len(shown))
            out += [pm, pb, fm, fb]

        # consumer side: backlog, leases, oldest unacknowledged message
        states, topics_per_project = self._states(list(projects.values()))
        per_project_backlog: dict[str, int] = {p.name: 0 for p in projects.values()}
        subs_per_project: dict[str, int] = {p.name: 0 for p in projects.values()}
        for state in states:
            per_project_backlog[state.project.name] += state.backlog
            subs_per_project[state.project.name] += 1
        shown_states = heapq.nlargest(limit, states, key=lambda s: s.backlog)
        backlog = GaugeMetricFamily(
            "ams_subscription_backlog_messages",
            "Messages of the subscription's topic not yet acknowledged by it.",
            labels=["project", "subscription"],
        )
        leased = GaugeMetricFamily(
            "ams_subscription_leased_messages",
            "Messages pulled and not yet acknowledged, within their ack deadline.",
            labels=["project", "subscription"],
        )
        age = GaugeMetricFamily(
            "ams_subscription_oldest_unacked_age_seconds",
            "Age of the subscription's oldest unacknowledged message (0 with no backlog).",
            labels=["project", "subscription"],
        )
        undelivered = GaugeMetricFamily(
            "ams_subscription_undelivered_messages",
            "Messages of the subscription's backlog never delivered yet.",
            labels=["project", "subscription"],
        )
        deliveries = CounterMetricFamily(
            "ams_subscription_deliveries",
            "Deliveries by a per-message subscription (docs/delivery.md), by attempt: 1 to 4, then 5+.",
            labels=["project", "subscription", "attempt"],
        )
        dead_lettered = CounterMetricFamily(
            "ams_subscription_dead_lettered_messages",
            "Messages a subscription with a dead-letter topic published there after their last attempt.",
            labels=["project", "subscription"],
        )
        now_ns = time.time_ns()
        oldest_per_project: dict[str, float] = {}
        for state in shown_states:
            labels = [state.project.name, state.sub.name]
            backlog.add_metric(labels, state.backlog)
            leased.add_metric(labels, state.counts.leased)
            undelivered.add_metric(labels, state.counts.undelivered)
            if state.sub.per_message:
                for bucket, n in dl.deliveries_by_attempt(state.cursor):
                    deliveries.add_metric([*labels, bucket], n)
            if state.sub.dead_letter:
                dead_lettered.add_metric(labels, state.cursor.dead_lettered)
            seconds = self._age(state, now_ns)
            age.add_metric(labels, seconds)
            oldest_per_project[state.project.name] = max(oldest_per_project.get(state.project.name, 0.0), seconds)
        for family in (
            "ams_subscription_backlog_messages",
            "ams_subscription_oldest_unacked_age_seconds",
            "ams_subscription_undelivered_messages",
        ):
            omitted.add_metric([family], len(states) - len(shown_states))
        project_backlog = GaugeMetricFamily(
            "ams_project_backlog_messages",
            "Messages not yet acknowledged, summed over the project's subscriptions.",
            labels=["project"],
        )
        project_subs = GaugeMetricFamily(
            "ams_project_subscriptions", "Subscriptions of the project.", labels=["project"]
        )
        project_topics = GaugeMetricFamily("ams_project_topics", "Topics of the project.", labels=["project"])
        for name in sorted(per_project_backlog):
            project_backlog.add_metric([name], per_project_backlog[name])
            project_subs.add_metric([name], subs_per_project[name])
            project_topics.add_metric([name], topics_per_project.get(name, 0))
        out += [backlog, leased, age, undelivered, deliveries, dead_lettered]
        out += [project_backlog, project_subs, project_topics, omitted]
        return out

    def _states(self, projects: list[Project]) -> tuple[list[SubState], dict[str, int]]:
        store, message_log = self.store, self.log
        states: list[SubState] = []
        topics: dict[str, int] = {}
        now_ns = time.time_ns()
        for project in projects:
            topics[project.name] = store.list_topics(project.uuid, None, 0, "").total_size
            bounds: dict[str, tuple[int, int]] = {}
            token = ""
            while True:
                page = store.list_subscriptions(project.uuid, None, _PAGE, token)
                for sub in page.items:
                    key = topic_key(project, sub.topic)
                    try:
                        if key not in bounds:
                            bounds[key] = message_log.bounds(key)
                        cursor = self.held(subscription_key(project.uuid, sub.name)) or store.get_cursor(
                            project.uuid, sub.name
                        )
                    except Exception:  # a topic or subscription going away meanwhile
                        log.debug("metrics: skipping %s/%s", project.name, sub.name, exc_info=True)
                        continue
                    if cursor is None:
                        continue
                    low, high = bounds[key]
                    states.append(SubState(project, sub, dl.backlog(cursor, low, high, now_ns), cursor))
                token = page.next_page_token
                if not token:
                    break
        return states, topics

    def _age(self, state: SubState, now_ns: int) -> float:
        counts = state.counts
        if counts.total <= 0:
            return 0.0
        sub = state.sub
        key = (sub.project_uuid, sub.name, sub.created_on, counts.first)
        publish_ns = self._publish_ns.get(key)
        if publish_ns is None:
            try:
                message = self.log.peek(topic_key(state.project, sub.topic), counts.first)
            except Exception:
                log.debug("metrics: reading the oldest message of %s", sub.name, exc_info=True)
                return 0.0
            if message is None:
                return 0.0
            publish_ns = message.publish_ns
        self._read_publish_ns[key] = publish_ns
        return max(0.0, (now_ns - publish_ns) / 1e9)


@dataclass
class Round:
    """One computation of the service-wide figures."""

    families: list[Metric]
    ok: bool
    seconds: float  # how long it took
    ended: float  # time.monotonic() at its end


class FiguresAside(Collector):
    """The service-wide figures on a server's page, computed aside so that a scrape never waits
    on them for long (docs/monitoring.md, "What a scrape costs").

    A scrape wants a round that starts after it: it waits at most ``wait`` seconds for the one
    running to end (starting one when none is) and for the next one after it, if the one running
    began before the scrape. Then it gives the last round that ended, with its age: the figures of
    this scrape when the backends answer in time, else the freshest there are, while the round
    goes on for the next scrape. So slow backends (many subscriptions with backlogs, a loaded
    broker) make the figures older, never the scrape fail: Prometheus's ``up`` of the node stays
    about the node. One round at a time per process, however many scrapes come."""

    def __init__(self, figures: ServiceFigures, wait: float) -> None:
        self.figures, self.wait = figures, wait
        self._last: Round | None = None
        self._running: gevent.Greenlet | None = None
        self._running_since = 0.0

    def collect(self) -> Iterator[Metric]:
        asked = time.monotonic()
        deadline = asked + self.wait
        while True:
            running = self._running
            if running is None:
                self._running_since = time.monotonic()
                running = self._running = gevent.spawn(self._round)
            since = self._running_since
            running.join(timeout=max(0.0, deadline - time.monotonic()))
            if since >= asked or not running.dead or time.monotonic() >= deadline:
                break
        last = self._last
        yield from ServiceFigures.page(last, None if last is None else time.monotonic() - last.ended)

    def _round(self) -> None:
        try:
            self._last = self.figures.compute()
        finally:
            self._running = None

    def close(self) -> None:
        """Stop a round under way (the service is closing its backends)."""
        running = self._running
        if running is not None:
            running.kill(block=True, timeout=2)
