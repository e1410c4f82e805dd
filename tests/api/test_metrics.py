"""Metrics: resource metrics, exact counting under concurrency, reports, Prometheus text."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers import AmsServer, Api, b64, error_of, prometheus_samples, sample

ZULU_S = "%Y-%m-%dT%H:%M:%SZ"


def day(offset: int = 0) -> str:
    return (datetime.now(UTC) + timedelta(days=offset)).strftime("%Y-%m-%d")


def assert_daily(series: list[dict[str, Any]], total: int) -> None:
    """A daily series holding ``total`` messages of today (or of yesterday, across midnight)."""
    assert sum(point["value"] for point in series) == total
    assert {point["timestamp"] for point in series} <= {day(-1), day()}


def by_name(metrics: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        m["metric"] + ("|" + m["resource_name"] if m["metric"].startswith("project.user") else ""): m for m in metrics
    }


def value(metrics: dict[str, dict[str, Any]], name: str) -> Any:
    return metrics[name]["timeseries"][0]["value"]


def test_topic_metrics(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "bb", "ccc")
    api.publish(project, topic, "dddd")
    metrics = api.ok("GET", f"/projects/{project}/topics/{topic}:metrics")["metrics"]
    assert [m["metric"] for m in metrics] == [
        "topic.number_of_subscriptions",
        "topic.number_of_messages",
        "topic.number_of_bytes",
        "topic.number_of_daily_messages",
        "topic.publishing_rate",
    ]
    m = by_name(metrics)
    assert value(m, "topic.number_of_subscriptions") == 1
    assert value(m, "topic.number_of_messages") == 4
    assert value(m, "topic.number_of_bytes") == sum(len(b64(x)) for x in ("a", "bb", "ccc", "dddd"))
    assert_daily(m["topic.number_of_daily_messages"]["timeseries"], 4)
    rate = m["topic.publishing_rate"]
    assert (rate["metric_type"], rate["value_type"]) == ("rate", "float64")
    assert rate["timeseries"][0]["value"] > 0
    datetime.strptime(rate["timeseries"][0]["timestamp"], ZULU_S)
    first = metrics[0]
    assert set(first) == {
        "metric",
        "metric_type",
        "value_type",
        "resource_type",
        "resource_name",
        "timeseries",
        "description",
    }
    assert (first["metric_type"], first["value_type"], first["resource_type"], first["resource_name"]) == (
        "counter",
        "int64",
        "topic",
        topic,
    )


def test_a_topic_never_published_to(api: Api, project: str, topic: str) -> None:
    m = by_name(api.ok("GET", f"/projects/{project}/topics/{topic}:metrics")["metrics"])
    assert value(m, "topic.number_of_messages") == 0
    assert m["topic.number_of_daily_messages"]["timeseries"] == []
    assert m["topic.publishing_rate"]["timeseries"] == [{"timestamp": "0001-01-01T00:00:00Z", "value": 0.0}]


def test_subscription_metrics_count_redeliveries_and_backlog(api: Api, project: str, topic: str) -> None:
    api.ok(
        "PUT",
        f"/projects/{project}/subscriptions/s1",
        {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": 1},
    )
    api.publish(project, topic, "a", "b", "c")
    api.pull(project, "s1", 2)
    time.sleep(2.1)
    got = api.pull(project, "s1", 2)  # the same two again
    assert api.ack(project, "s1", [got[-1]["ackId"]]).status_code == 200
    m = by_name(api.ok("GET", f"/projects/{project}/subscriptions/s1:metrics")["metrics"])
    assert value(m, "subscription.number_of_messages") == 4
    assert value(m, "subscription.number_of_bytes") == 4 * len(b64("a"))
    assert value(m, "subscription.backlog") == 1
    assert m["subscription.consumption_rate"]["timeseries"][0]["value"] > 0


def test_project_metrics(api: Api, project: str, topic: str, sub: str) -> None:
    alice = api.new_user(projects=[{"project": project, "roles": ["publisher", "consumer"]}])
    api.ok("POST", f"/projects/{project}/topics/{topic}:modifyAcl", {"authorized_users": [alice["name"]]})
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyAcl", {"authorized_users": [alice["name"]]})
    api.publish(project, topic, "x", "y")
    metrics = api.ok("GET", f"/projects/{project}:metrics")["metrics"]
    assert [m["metric"] for m in metrics] == [
        "project.number_of_topics",
        "project.number_of_subscriptions",
        "project.user.number_of_topics",
        "project.user.number_of_subscriptions",
        "project.number_of_daily_messages",
    ]
    m = by_name(metrics)
    assert value(m, "project.number_of_topics") == 1
    assert value(m, "project.number_of_subscriptions") == 1
    assert value(m, f"project.user.number_of_topics|{project}.{alice['name']}") == 1
    assert m[f"project.user.number_of_subscriptions|{project}.{alice['name']}"]["resource_type"] == "project.user"
    assert_daily(m["project.number_of_daily_messages"]["timeseries"], 2)


def test_counting_is_exact_under_concurrent_publishers_and_survives_a_restart(make_server: Any, tmp_path: Path) -> None:
    srv = make_server(tmp_path / "data", ams_metrics_flush_seconds="0.2")
    api = srv.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")

    def publisher() -> None:
        client = srv.api()
        for i in range(25):
            client.ok("POST", f"/projects/{project}/topics/t:publish", {"messages": [{"data": b64(f"m{i}")}] * 4})

    threads = [threading.Thread(target=publisher) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    expected = 8 * 25 * 4
    path = f"/projects/{project}/topics/t:metrics"
    assert value(by_name(api.ok("GET", path)["metrics"]), "topic.number_of_messages") == expected
    time.sleep(0.5)  # flushed by now
    assert value(by_name(api.ok("GET", path)["metrics"]), "topic.number_of_messages") == expected
    api.publish(project, "t", "last")  # pending at SIGTERM: the stop flushes it
    assert srv.stop() == 0
    srv.start()
    m = by_name(srv.api().ok("GET", path)["metrics"])
    assert value(m, "topic.number_of_messages") == expected + 1
    assert_daily(m["topic.number_of_daily_messages"]["timeseries"], expected + 1)


def test_metrics_follow_the_acls(api: Api, project: str, topic: str, sub: str) -> None:
    publisher = api.new_user(projects=[{"project": project, "roles": ["publisher"]}])
    consumer = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    assert api.as_(publisher["token"]).get(f"/projects/{project}/topics/{topic}:metrics").status_code == 403
    assert api.as_(consumer["token"]).get(f"/projects/{project}/subscriptions/{sub}:metrics").status_code == 403
    api.ok("POST", f"/projects/{project}/topics/{topic}:modifyAcl", {"authorized_users": [publisher["name"]]})
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyAcl", {"authorized_users": [consumer["name"]]})
    assert api.as_(publisher["token"]).get(f"/projects/{project}/topics/{topic}:metrics").status_code == 200
    assert api.as_(consumer["token"]).get(f"/projects/{project}/subscriptions/{sub}:metrics").status_code == 200
    assert api.as_(consumer["token"]).get(f"/projects/{project}:metrics").status_code == 403
    assert api.get(f"/projects/{project}/topics/nope:metrics").status_code == 404


def test_operational_metrics_list_this_node(make_server: Any) -> None:
    srv = make_server(ams_node_name="node-a")
    metrics = srv.api().ok("GET", "/metrics")["metrics"]
    assert [(m["metric"], m["resource_name"], m["metric_type"]) for m in metrics] == [
        ("ams_node.cpu_usage", "node-a", "percentage"),
        ("ams_node.memory_usage", "node-a", "percentage"),
    ]
    assert all(0 <= m["timeseries"][0]["value"] <= 100 * 64 for m in metrics)
    viewer = srv.api().new_user(service_roles=["metrics_viewer"])
    assert srv.api(viewer["token"]).get("/metrics").status_code == 200
    admin = srv.api().new_user(projects=[{"project": srv.api().new_project(), "roles": ["project_admin"]}])
    assert srv.api(admin["token"]).get("/metrics").status_code == 401


def test_va_metrics(api: Api, project: str, topic: str) -> None:
    api.publish(project, topic, *"abcdef")
    window = {"projects": project, "start_date": day(-1), "end_date": day(1)}  # 3 days, whatever the hour
    report = api.ok("GET", "/metrics/va_metrics", params=window)
    assert report == {
        "projects_metrics": {
            "projects": [
                {
                    "project": project,
                    "message_count": 6,
                    "average_daily_messages": 2.0,
                    "topics_count": 1,
                    "subscriptions_count": 0,
                    "users_count": 0,
                }
            ],
            "total_message_count": 6,
            "average_daily_messages": 2.0,
        },
        "total_users_count": 0,
        "total_topics_count": 1,
        "total_subscriptions_count": 0,
    }
    seven = api.ok("GET", "/metrics/va_metrics", params={**window, "start_date": day(-5)})  # 6 / 7 = 0.857..
    assert seven["projects_metrics"]["projects"][0]["average_daily_messages"] == 0.86  # rounded up
    week = api.ok(
        "GET", "/metrics/va_metrics", params={"projects": project, "start_date": "2026-01-01", "end_date": "2026-01-07"}
    )
    assert week["projects_metrics"]["projects"] == []


@pytest.mark.parametrize(
    "window",
    [
        {"start_date": "1279-06-21"},
        {"end_date": "2262-04-11"},
        {"start_date": "0001-01-01", "end_date": "9999-12-31"},
    ],
)
def test_dates_past_what_the_stores_hold_are_clamped_on_every_report(
    api: Api, project: str, topic: str, window: dict[str, str]
) -> None:
    """The stores keep times as 64-bit nanoseconds (1677-09-21 to 2262-04-11); a report over a wider
    window counts what is inside them, on va_metrics as on usageReport (once a 500)."""
    api.publish(project, topic, "a", "b")
    params = {"projects": project, **window}
    report = api.ok("GET", "/metrics/va_metrics", params=params)
    (row,) = report["projects_metrics"]["projects"]
    assert (row["project"], row["message_count"], row["topics_count"]) == (project, 2, 1)
    admin = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    usage = api.as_(admin["token"]).ok("GET", "/users/usageReport", params=params)
    assert usage["va_metrics"]["projects_metrics"]["projects"] == [{**row, "users_count": 1}]


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({"start_date": "yesterday"}, 400, "Start date is not in valid format"),
        ({"end_date": "2026-13-01"}, 400, "End date is not in valid format"),
        ({"start_date": "2026-02-02", "end_date": "2026-02-01"}, 400, "Start date cannot be after the end date"),
        ({"projects": "no-such-project"}, 404, "Project no-such-project doesn't exist"),
    ],
)
def test_va_metrics_errors(api: Api, params: dict[str, str], code: int, message: str) -> None:
    r = api.get("/metrics/va_metrics", params=params)
    assert (r.status_code, error_of(r)["message"]) == (code, message)


def test_usage_report(server: AmsServer, api: Api, project: str, topic: str) -> None:
    api.publish(project, topic, "a", "b")
    admin = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    report = api.as_(admin["token"]).ok("GET", "/users/usageReport", params={"start_date": day(-1)})
    assert [p["project"] for p in report["va_metrics"]["projects_metrics"]["projects"]] == [project]
    assert report["va_metrics"]["projects_metrics"]["projects"][0]["users_count"] == 1
    assert {m["metric"] for m in report["operational_metrics"]["metrics"]} == {
        "ams_node.cpu_usage",
        "ams_node.memory_usage",
    }
    outsider = api.new_user()
    empty = api.as_(outsider["token"]).ok("GET", "/users/usageReport")
    assert empty["va_metrics"]["projects_metrics"] == {
        "projects": [],
        "total_message_count": 0,
        "average_daily_messages": 0,
    }
    assert empty["operational_metrics"] == {"metrics": []}
    assert requests.get(f"{server.url}/users/usageReport", timeout=10).status_code == 401
    assert api.as_("wrong").get("/users/usageReport").status_code == 401


def test_prometheus_text_with_token_access(server: AmsServer, api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b", "c")
    api.pull(project, sub, 2)
    root = server.url.removesuffix("/v1")
    assert requests.get(f"{root}/metrics", timeout=10).status_code == 401
    consumer = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    assert requests.get(f"{root}/metrics", headers={"x-api-key": consumer["token"]}, timeout=10).status_code == 403
    viewer = api.new_user(service_roles=["metrics_viewer"])
    r = requests.get(f"{root}/metrics", headers={"Authorization": f"Bearer {viewer['token']}"}, timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE ams_topic_messages_total counter" in r.text.splitlines()
    samples = prometheus_samples(r.text)
    assert sample(samples, "ams_topic_messages_total", project=project, topic=topic) == 3
    assert sample(samples, "ams_topic_bytes_total", project=project, topic=topic) == 3 * len(b64("a"))
    assert sample(samples, "ams_subscription_messages_total", project=project, subscription=sub) == 2
    assert any(name == "ams_node_cpu_percent" for name, _ in samples)


@pytest.mark.parametrize(("access", "status"), [("open", 200), ("off", 404)])
def test_prometheus_access_modes(make_server: Any, access: str, status: int) -> None:
    srv = make_server(ams_prometheus_access=access)
    r = requests.get(srv.url.removesuffix("/v1") + "/metrics", timeout=10)
    assert r.status_code == status
