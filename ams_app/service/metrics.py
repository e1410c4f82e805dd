"""Metrics of AmsService: operational, project, topic, subscription, VA report, usage report,
and what it adds to the Prometheus page (docs/compatibility.md, "Metrics"; docs/monitoring.md)."""

from __future__ import annotations

import math
import os
import time
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from ams_app.auth import METRICS_VIEWER, PROJECT_ADMIN, PUBLISHER, Caller
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Subscription
from ams_app.service import delivery as dl
from ams_app.service.base import ServiceBase, oldest_unacked_age, topic_key
from ams_app.service.usage import UsageCounters
from ams_app.telemetry import Telemetry
from ams_app.timeutil import zulu_seconds

if TYPE_CHECKING:
    from ams_app.service.figures import FiguresAside, ServiceFigures

NS = 1_000_000_000
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1  # what the stores can hold
DAILY_DAYS = 30
NEVER = "0001-01-01T00:00:00Z"
_STARTED = (time.monotonic(), sum(os.times()[:2]))


def metric(
    name: str,
    kind: str,
    value_type: str,
    resource_type: str,
    resource: str,
    points: list[tuple[str, Any]],
    text: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metric": name,
        "metric_type": kind,
        "value_type": value_type,
        "resource_type": resource_type,
        "resource_name": resource,
        "timeseries": [{"timestamp": t, "value": v} for t, v in points],
        "description": text,
    }
    if labels:
        out["labels"] = labels
    return out


def node_sample() -> tuple[float, float]:
    """(cpu %, memory %) of this process: CPU time over wall time since start, RSS over RAM."""
    wall = time.monotonic() - _STARTED[0]
    cpu = (sum(os.times()[:2]) - _STARTED[1]) / wall * 100 if wall > 0 else 0.0
    memory = 0.0
    try:
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo") as meminfo:
            total_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
        memory = rss / (total_kb * 1024) * 100
    except (OSError, ValueError, StopIteration):  # pragma: no cover - not Linux
        pass
    return round(cpu, 2), round(memory, 2)


def _date(text: str | None, default: date, what: str) -> date:
    if not text:
        return default
    try:
        return datetime.strptime(text, "%Y-%m-%d").date()
    except ValueError as exc:
        raise AmsError.invalid_data(f"{what} date is not in valid format") from exc


def _ceil2(value: float) -> float:
    return math.ceil(round(value * 100, 6)) / 100


class MetricsOps(ServiceBase):
    usage: UsageCounters
    telemetry: Telemetry
    #: the service-wide figures of the Prometheus page (register_figures)
    figures_aside: FiguresAside

    def sub_offsets(self, project: Project, sub: Subscription) -> tuple[int, int, int]:  # AmsService's
        raise NotImplementedError

    # ------------------------------------------------------------ operational ----------------
    @property
    def node_name(self) -> str:
        return self.settings.node_name or os.uname().nodename

    def operational_metrics(self) -> list[dict[str, Any]]:
        """This node's sample is stored first, then every node's last sample is listed."""
        cpu, memory = node_sample()
        self.store.put_node_metrics(self.node_name, cpu, memory)
        now = zulu_seconds(time.time_ns())
        out = []
        for host, host_cpu, host_memory in self.store.node_metrics():
            out.append(
                metric(
                    "ams_node.cpu_usage",
                    "percentage",
                    "float64",
                    "ams_node",
                    host,
                    [(now, host_cpu)],
                    "Percentage value that displays the CPU usage of ams service in the specific node",
                )
            )
            out.append(
                metric(
                    "ams_node.memory_usage",
                    "percentage",
                    "float64",
                    "ams_node",
                    host,
                    [(now, host_memory)],
                    "Percentage value that displays the Memory usage of ams service in the specific node",
                )
            )
        return out

    # ------------------------------------------------------------ resources ------------------
    def topic_metrics(self, caller: Caller, project: Project, name: str) -> list[dict[str, Any]]:
        topic = self.topic(project, name)
        if self._acl_applies(caller, PUBLISHER) and caller.uuid not in topic.acl:
            raise AmsError.forbidden()
        now = zulu_seconds(time.time_ns())
        used = self.usage.usage("topic", project.uuid, name)
        subs = len(self.store.subscriptions_of_topic(project.uuid, name))
        daily = self.usage.daily_messages(project.uuid, name, DAILY_DAYS)
        latest = zulu_seconds(used.latest_ns) if used.latest_ns else NEVER
        return [
            metric(
                "topic.number_of_subscriptions",
                "counter",
                "int64",
                "topic",
                name,
                [(now, subs)],
                "Counter that displays the number of subscriptions belonging to a specific topic",
            ),
            metric(
                "topic.number_of_messages",
                "counter",
                "int64",
                "topic",
                name,
                [(now, used.messages)],
                "Counter that displays the number of messages published to the specific topic",
            ),
            metric(
                "topic.number_of_bytes",
                "counter",
                "int64",
                "topic",
                name,
                [(now, used.bytes)],
                "Counter that displays the total size of data (in bytes) published to the specific topic",
            ),
            metric(
                "topic.number_of_daily_messages",
                "counter",
                "int64",
                "topic",
                name,
                daily,
                "A collection of counters that represents the total number of messages published each day "
                "to a specific topic",
            ),
            metric(
                "topic.publishing_rate",
                "rate",
                "float64",
                "topic",
                name,
                [(latest, round(used.rate, 3))],
                "A rate that displays how many messages were published per second between the last two publish events",
            ),
        ]

    def subscription_metrics(self, caller: Caller, project: Project, name: str) -> list[dict[str, Any]]:
        sub = self.subscription(project, name)
        self._check_consumer(caller, sub)
        now = zulu_seconds(time.time_ns())
        used = self.usage.usage("sub", project.uuid, name)
        _, high, current = self.sub_offsets(project, sub)
        latest = zulu_seconds(used.latest_ns) if used.latest_ns else NEVER
        return [
            metric(
                "subscription.number_of_messages",
                "counter",
                "int64",
                "subscription",
                name,
                [(now, used.messages)],
                "Counter that displays the number of messages consumed from the specific subscription",
            ),
            metric(
                "subscription.number_of_bytes",
                "counter",
                "int64",
                "subscription",
                name,
                [(now, used.bytes)],
                "Counter that displays the total size of data (in bytes) consumed from the specific subscription",
            ),
            metric(
                "subscription.consumption_rate",
                "rate",
                "float64",
                "subscription",
                name,
                [(latest, round(used.rate, 3))],
                "A rate that displays how many messages were consumed per second between the last two consume events",
            ),
            metric(
                "subscription.backlog",
                "counter",
                "int64",
                "subscription",
                name,
                [(now, max(high - current, 0))],
                "Counter that displays the number of messages not yet acknowledged "
                "(the topic's end minus the subscription's offset)",
            ),
            *self._delivery_metrics(project, sub, now),
        ]

    def _delivery_metrics(self, project: Project, sub: Subscription, now: str) -> list[dict[str, Any]]:
        """The consumer side by state (docs/delivery.md, docs/monitoring.md): never delivered, the
        age of the oldest not acknowledged; on per-message subscriptions deliveries by attempt and
        messages dead-lettered. Read where the cursor is kept: at its owner, in memory."""
        key = topic_key(project, sub.topic)
        low, high = self.log.bounds(key)
        cursor: Cursor = self._cursor_op(project, sub, lambda c: (None, c), durable=False)
        now_ns = time.time_ns()
        counts = dl.backlog(cursor, low, high, now_ns)
        age = oldest_unacked_age(self.log, key, counts, now_ns)
        name = sub.name
        out = [
            metric(
                "subscription.undelivered_messages",
                "gauge",
                "int64",
                "subscription",
                name,
                [(now, counts.undelivered)],
                "Gauge of the messages not yet acknowledged that were never delivered",
            ),
            metric(
                "subscription.oldest_unacked_message_age",
                "gauge",
                "float64",
                "subscription",
                name,
                [(now, round(age, 3))],
                "Gauge of the age in seconds of the oldest message not yet acknowledged (0 with none)",
            ),
        ]
        if sub.per_message:
            for bucket, n in dl.deliveries_by_attempt(cursor):
                out.append(
                    metric(
                        "subscription.deliveries",
                        "counter",
                        "int64",
                        "subscription",
                        name,
                        [(now, n)],
                        "Counter of the deliveries made whose attempt is the label's (5+: five and more)",
                        {"attempt": bucket},
                    )
                )
        if sub.dead_letter:
            out.append(
                metric(
                    "subscription.dead_lettered_messages",
                    "counter",
                    "int64",
                    "subscription",
                    name,
                    [(now, cursor.dead_lettered)],
                    "Counter of the messages published to the dead-letter topic after their last attempt",
                )
            )
        return out

    def project_metrics(self, project: Project) -> list[dict[str, Any]]:
        now = zulu_seconds(time.time_ns())
        topics = self.store.list_topics(project.uuid, None, 0, "").total_size
        subs = self.store.list_subscriptions(project.uuid, None, 0, "").total_size
        out = [
            metric(
                "project.number_of_topics",
                "counter",
                "int64",
                "project",
                project.name,
                [(now, topics)],
                "Counter that displays the number of topics belonging to the specific project",
            ),
            metric(
                "project.number_of_subscriptions",
                "counter",
                "int64",
                "project",
                project.name,
                [(now, subs)],
                "Counter that displays the number of subscriptions belonging to the specific project",
            ),
        ]
        members = self.store.list_users(project.uuid, 0, "").items
        per_user: dict[str, dict[str, int]] = {"topic": {}, "sub": {}}
        for user in sorted(members, key=lambda u: u.name):
            for kind, _, _ in (e for e in self.store.acl_of_user(user.uuid) if e[1] == project.uuid):
                per_user[kind][user.name] = per_user[kind].get(user.name, 0) + 1
        for kind, label in (("topic", "topics"), ("sub", "subscriptions")):
            for user_name, count in per_user[kind].items():
                out.append(
                    metric(
                        f"project.user.number_of_{label}",
                        "counter",
                        "int64",
                        "project.user",
                        f"{project.name}.{user_name}",
                        [(now, count)],
                        f"Counter that displays the number of {label} that a user has access to the specific project",
                    )
                )
        daily = self.usage.daily_messages(project.uuid, None, DAILY_DAYS)
        out.append(
            metric(
                "project.number_of_daily_messages",
                "counter",
                "int64",
                "project",
                project.name,
                daily,
                "A collection of counters that represents the total number of messages published each day "
                "to all of the project's topics",
            )
        )
        return out

    # ------------------------------------------------------------ reports --------------------
    def va_report(self, projects: list[Project], start: date, end: date) -> dict[str, Any]:
        days = (end - start).days + 1
        start_ns = int(datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp()) * NS
        end_ns = (int(datetime(end.year, end.month, end.day, tzinfo=UTC).timestamp()) + 86_399) * NS + NS - 1
        # the stores keep times as signed 64-bit nanoseconds (1677-09-21 to 2262-04-11): a window
        # reaching past them is clamped, as nothing was created out there
        start_ns, end_ns = max(start_ns, _MIN_NS), min(end_ns, _MAX_NS)
        totals = self.usage.daily_totals(start.isoformat(), end.isoformat())
        rows: list[dict[str, Any]] = []
        sums = {"topics": 0, "subs": 0, "users": 0}
        for project in projects:
            topics, subs, users = self.store.created_between(project.uuid, start_ns, end_ns)
            sums["topics"] += topics
            sums["subs"] += subs
            sums["users"] += users
            count = totals.get(project.uuid, 0)
            if count:
                rows.append(
                    {
                        "project": project.name,
                        "message_count": count,
                        "average_daily_messages": _ceil2(count / days),
                        "topics_count": topics,
                        "subscriptions_count": subs,
                        "users_count": users,
                    }
                )
        return {
            "projects_metrics": {
                "projects": rows,
                "total_message_count": sum(r["message_count"] for r in rows),
                "average_daily_messages": round(sum(r["average_daily_messages"] for r in rows), 2),
            },
            "total_users_count": sums["users"],
            "total_topics_count": sums["topics"],
            "total_subscriptions_count": sums["subs"],
        }

    def report_window(self, start_text: str | None, end_text: str | None) -> tuple[date, date]:
        start = _date(start_text, date(1970, 1, 1), "Start")
        end = _date(end_text, datetime.now(UTC).date(), "End")
        if start > end:
            raise AmsError.invalid_data("Start date cannot be after the end date")
        return start, end

    def named_projects(self, names: str | None) -> list[Project] | None:
        """Projects named in a ``projects=A,B`` parameter; None when absent."""
        if not names:
            return None
        out = []
        for name in dict.fromkeys(n.strip() for n in names.split(",") if n.strip()):
            project = self.store.get_project(name=name)
            if project is None:
                raise AmsError.not_found(f"Project {name}")
            out.append(project)
        return out

    def va_metrics(self, args: dict[str, str]) -> dict[str, Any]:
        start, end = self.report_window(args.get("start_date"), args.get("end_date"))
        projects = self.named_projects(args.get("projects"))
        return self.va_report(projects if projects is not None else self.store.list_projects(), start, end)

    def usage_report(self, caller: Caller, args: dict[str, str]) -> dict[str, Any]:
        if caller.user is None:
            raise AmsError.unauthorized()
        start, end = self.report_window(args.get("start_date"), args.get("end_date"))
        named = self.named_projects(args.get("projects"))
        admin_of = {m.project_uuid for m in caller.user.projects if PROJECT_ADMIN in m.roles}
        candidates = named if named is not None else self.store.list_projects()
        projects = [p for p in candidates if p.uuid in admin_of]
        operational = self.operational_metrics() if projects else []
        return {"va_metrics": self.va_report(projects, start, end), "operational_metrics": {"metrics": operational}}

    # ------------------------------------------------------------ Prometheus -----------------
    def register_figures(self) -> None:
        """Add what this service computes when scraped to its telemetry's registry: this
        process's CPU and memory, the subscriptions it owns, and the service-wide figures."""
        from ams_app.telemetry import GaugeCallback

        telemetry = self.telemetry
        telemetry.add(
            GaugeCallback(
                "ams_node_cpu_percent",
                "CPU used by this AMS process since it started (percent of one core).",
                [],
                lambda: [([], node_sample()[0])],
            )
        )
        telemetry.add(
            GaugeCallback(
                "ams_node_memory_percent",
                "Resident memory of this AMS process (percent of RAM).",
                [],
                lambda: [([], node_sample()[1])],
            )
        )
        owners = self.owners
        if owners is not None:
            telemetry.add(
                GaugeCallback(
                    "ams_consume_owned_subscriptions",
                    "Pull subscriptions whose leases this node holds (consume_owner).",
                    [],
                    lambda: [([], float(len(owners.held_keys())))],
                )
            )
            telemetry.add(
                GaugeCallback(
                    "ams_consume_leases_in_flight",
                    "Leases this node holds for its subscriptions: pulls not yet acknowledged or expired.",
                    [],
                    lambda: [([], float(owners.leases_in_flight()))],
                )
            )
        from ams_app.service.figures import FiguresAside

        self.figures_aside = FiguresAside(self._figures(), self.settings.prometheus_figures_wait)
        telemetry.add(self.figures_aside)

    def prometheus_page(self, token: str) -> bytes:
        """This process's Prometheus page, for whom ``prometheus_access`` lets read it: anyone
        (``open``), a service_admin or metrics_viewer token (``token``), nobody (``off``: 404)."""
        access = self.settings.prometheus_access
        if access == "off":
            raise AmsError.not_found("Resource")
        if access == "token":
            caller = self.caller_for_token(token)
            if caller is None:
                raise AmsError.unauthorized()
            if not (caller.is_service_admin or caller.has(METRICS_VIEWER)):
                raise AmsError.forbidden()
        return self.telemetry.exposition()

    def caller_for_token(self, token: str) -> Caller | None:  # AmsService's
        raise NotImplementedError

    def _figures(self) -> ServiceFigures:
        from ams_app.service.figures import ServiceFigures

        held = self.owners.cursor_of if self.owners is not None else (lambda key: None)
        return ServiceFigures(self.store, self.log, self.usage, self.settings.prometheus_series_limit, held)

    def service_figures_text(self) -> bytes:
        """The service-wide figures alone, in the Prometheus text format: what ``ams admin metrics``
        writes for a textfile collector, where the process is a one-shot command."""
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self._figures())
        return generate_latest(registry)
