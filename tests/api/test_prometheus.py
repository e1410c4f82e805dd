"""The Prometheus page (/metrics, docs/monitoring.md) of a real server, on both backends: request
and backend figures of the process, the service-wide consumer figures, the cardinality limit,
and the page against the metric table of docs/monitoring.md."""

from __future__ import annotations

import re
import time
from typing import Any

import requests

from tests.helpers import ROOT, AmsServer, Api, sample, unique

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def count(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in samples.items() if n == name and wanted <= lbls)


def test_requests_are_counted_by_route_and_status_class(server: AmsServer, api: Api, project: str) -> None:
    before = api.scrape()
    api.ok("GET", f"/projects/{project}")
    assert api.get(f"/projects/{project}/topics/{unique('missing')}").status_code == 404
    assert api.as_("not-a-token").get(f"/projects/{project}").status_code == 401
    for method in ("BREW", "GET"):  # no route: one series whatever the path or method
        requests.request(method, f"{server.url}/{unique('nowhere')}", timeout=10)
    after = api.scrape()
    hist = "ams_http_request_duration_seconds_count"

    def grew(route: str, code: str, method: str = "GET") -> float:
        labels = {"route": route, "method": method, "status_class": code}
        return count(after, hist, **labels) - count(before, hist, **labels)

    assert grew("projects:show", "2xx") >= 1
    assert grew("projects:show", "4xx") >= 1  # the 401
    assert grew("topics:show", "4xx") >= 1
    assert grew("unmatched", "4xx", "other") >= 1
    assert grew("unmatched", "4xx") >= 1
    routes = {dict(lbls)["route"] for n, lbls in after if n == hist}
    assert not any("nowhere" in route for route in routes)
    methods = {dict(lbls)["method"] for n, lbls in after if n == hist}
    assert methods <= {"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "other"}
    # the buckets are cumulative and end in +Inf == count
    labels = {"route": "projects:show", "method": "GET", "status_class": "2xx"}
    inf = count(after, "ams_http_request_duration_seconds_bucket", le="+Inf", **labels)
    assert inf == count(after, hist, **labels)
    assert sample(after, "ams_http_requests_in_flight") == 1  # the scrape itself


def test_backend_calls_are_timed_by_operation(server: AmsServer, api: Api, project: str, topic: str) -> None:
    before = api.scrape()
    api.publish(project, topic, "one", "two")
    after = api.scrape()
    log_backend = "kafka" if server.backend == "kafka" else "embedded_log"
    store_backend = "mongodb" if server.backend == "kafka" else "embedded_store"
    hist = "ams_backend_operation_duration_seconds_count"
    appended = count(after, hist, backend=log_backend, operation="append")
    assert appended - count(before, hist, backend=log_backend, operation="append") >= 1
    assert count(after, hist, backend=store_backend) > count(before, hist, backend=store_backend)
    kinds = {dict(lbls).get("kind") for n, lbls in after if n == "ams_backend_errors_total"}
    assert kinds <= {"unavailable", "refused", "too_large", "rejected", "other"}


def test_backlog_leases_and_oldest_unacked_age(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b", "c", "d", "e")
    time.sleep(1.1)  # the oldest message is over a second old now
    pulled = api.pull(project, sub, 2)
    assert len(pulled) == 2
    page = api.scrape()
    labels = {"project": project, "subscription": sub}
    assert sample(page, "ams_subscription_backlog_messages", **labels) == 5
    assert sample(page, "ams_subscription_leased_messages", **labels) == 2
    age = sample(page, "ams_subscription_oldest_unacked_age_seconds", **labels)
    assert age is not None
    assert 1.0 <= age < 120
    assert sample(page, "ams_project_backlog_messages", project=project) == 5
    assert sample(page, "ams_project_subscriptions", project=project) == 1
    assert sample(page, "ams_project_topics", project=project) == 1
    assert sample(page, "ams_service_figures_ok") == 1

    api.ack(project, sub, [pulled[-1]["ackId"]])
    rest = api.pull(project, sub, 10)
    api.ack(project, sub, [rest[-1]["ackId"]])
    page = api.scrape()
    assert sample(page, "ams_subscription_backlog_messages", **labels) == 0
    assert sample(page, "ams_subscription_leased_messages", **labels) == 0
    assert sample(page, "ams_subscription_oldest_unacked_age_seconds", **labels) == 0


def test_the_series_limit_keeps_the_largest_and_counts_the_rest(make_server: Any) -> None:
    srv = make_server(ams_prometheus_series_limit="2")
    api = srv.api()
    project = api.new_project()
    backlogs = {"s0": 1, "s1": 4, "s2": 2, "s3": 3}
    for name, n in backlogs.items():
        topic = f"t{name}"
        api.ok("PUT", f"/projects/{project}/topics/{topic}")
        body = {"topic": f"projects/{project}/topics/{topic}"}
        api.ok("PUT", f"/projects/{project}/subscriptions/{name}", body)
        api.publish(project, topic, *["x"] * n)
    page = api.scrape()
    shown = {dict(lbls)["subscription"] for n, lbls in page if n == "ams_subscription_backlog_messages"}
    assert shown == {"s1", "s3"}  # the two longest backlogs
    topics = {dict(lbls)["topic"] for n, lbls in page if n == "ams_topic_messages_total"}
    assert topics == {"ts1", "ts3"}  # the two busiest topics
    omitted = "ams_metrics_series_omitted"
    assert sample(page, omitted, family="ams_subscription_backlog_messages") == 2
    assert sample(page, omitted, family="ams_topic_messages_total") == 2
    assert sample(page, "ams_project_backlog_messages", project=project) == sum(backlogs.values())  # whole
    assert sample(page, "ams_project_published_messages_total", project=project) == sum(backlogs.values())

    srv.stop()
    srv = make_server(ams_prometheus_series_limit="0")
    page = srv.api().scrape()
    assert not [n for n, _ in page if n in ("ams_subscription_backlog_messages", "ams_topic_messages_total")]
    assert sample(page, "ams_project_backlog_messages", project=project) == sum(backlogs.values())


def documented_metrics() -> set[str]:
    """The metric names of the tables in docs/monitoring.md (first column, in backticks)."""
    text = (ROOT / "docs" / "monitoring.md").read_text()
    return set(re.findall(r"^\| `((?:ams|process)_[a-z_]+)`", text, flags=re.MULTILINE))


def test_every_metric_on_the_page_is_documented(server: AmsServer, api: Api, project: str, topic: str) -> None:
    api.publish(project, topic, "x")
    page = api.scrape()
    families = set()
    for name, _ in page:
        families.add(re.sub(r"_(bucket|count|sum|total|created|info)$", "", name))
    documented = {re.sub(r"_(total|info)$", "", name) for name in documented_metrics()}
    missing = {f for f in families if f.startswith("ams_") and f not in documented}
    assert not missing, f"on the page but not in docs/monitoring.md: {sorted(missing)}"
    assert len(documented) >= 20
