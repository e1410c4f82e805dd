"""The service-wide figures for Prometheus, computed from the backends when scraped
(docs/monitoring.md, "Service-wide figures").

Every node computes the same figures from the shared backends, so queries aggregate them with
``max by (project, subscription)`` (the alert rules do). ``ams admin metrics`` writes them alone
to a file for node_exporter's textfile collector.

**Bounded cardinality.** Per project, every figure is given in full. Per topic and per
subscription, each family holds at most ``prometheus_series_limit`` series (settings): the
largest (traffic families: the most messages; backlog families: the longest backlogs), so the
worst offenders are always on the page. ``ams_metrics_series_omitted{family}`` says how many
each family left out; a limit of 0 gives the per-project figures only.

What a scrape costs: one metadata listing per project, one cursor read per subscription, one
offsets query per topic, and one message read per subscription that is shown with a backlog (for
the age of its oldest unacknowledged message). The message reads are aside: they move nothing
the consume path keeps in place (``MessageLog.peek``).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ams_app.models import subscription_key
from ams_app.service import delivery as dl
from ams_app.service.base import oldest_unacked_age, topic_key

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

    def collect(self) -> Iterator[Metric]:
        start = time.perf_counter()
        ok = 1.0
        families: list[Metric] = []
        try:
            families = self._families()
        except Exception:  # a backend down: say so on the page rather than failing the scrape
            log.warning("metrics: the service-wide figures could not be computed", exc_info=True)
            ok = 0.0
        yield from families
        status = GaugeMetricFamily(
            "ams_service_figures_ok", "1 when the service-wide figures below could be read from the backends."
        )
        status.add_metric([], ok)
        yield status
        took = GaugeMetricFamily(
            "ams_service_figures_duration_seconds", "How long computing the service-wide figures took."
        )
        took.add_metric([], time.perf_counter() - start)
        yield took

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
        try:
            return oldest_unacked_age(self.log, topic_key(state.project, state.sub.topic), state.counts, now_ns)
        except Exception:
            log.debug("metrics: reading the oldest message of %s", state.sub.name, exc_info=True)
            return 0.0
