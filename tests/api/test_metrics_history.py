"""Metrics history: the Spark job's daily figures (usage_daily) replace the live counters of
past days in va_metrics, usageReport and the :metrics daily series; today stays live."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ams_app.backends.store import DailyUsage, MetadataStore
from ams_app.models import UsageBatch
from tests.api.test_metrics import by_name, day
from tests.helpers import AmsServer, Api, unique


@pytest.fixture
def store(server: AmsServer) -> Iterator[MetadataStore]:
    """The server's own metadata store, opened beside it (as the Spark job writes to it)."""
    opened: MetadataStore
    if server.backend == "embedded":
        from ams_app.backends.sqlite.store import SqliteMetadataStore

        opened = SqliteMetadataStore(str(server.data_dir / "metadata.db"))
    else:
        from ams_app.backends.mongo.store import MongoMetadataStore

        opened = MongoMetadataStore(server.env["AMS_MONGO_URI"], server.env["AMS_MONGO_DATABASE"], 10)
    yield opened
    opened.close()


def series(metrics: list[dict[str, Any]], name: str) -> list[tuple[str, int]]:
    return [(p["timestamp"], p["value"]) for p in by_name(metrics)[name]["timeseries"]]


def test_spark_figures_replace_past_days_and_today_stays_live(
    api: Api, store: MetadataStore, project: str, topic: str
) -> None:
    other = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{other}")
    today, d1, d2, d3 = day(), day(-1), day(-2), day(-3)
    api.publish(project, topic, "a", "b", "c")  # live, today
    found = store.get_project(name=project)
    assert found is not None
    uuid = found.uuid
    # live counters of past days (as a node that ran then would have left them)
    store.add_usage(UsageBatch(daily={(uuid, topic, d1): 100, (uuid, topic, d2): 50, (uuid, other, d2): 7}))
    store.add_usage(UsageBatch(daily={(uuid, other, d3): 4}))
    # the Spark job's figures: they replace the live count of their (day, topic) ...
    store.replace_daily_usage(d1, [DailyUsage(uuid, topic, 10, 1000)])
    store.replace_daily_usage(d2, [DailyUsage(uuid, topic, 20, 2000)])
    # ... but never today's, which the live counters keep serving
    store.replace_daily_usage(today, [DailyUsage(uuid, topic, 999, 1)])
    assert day() == today, "crossed midnight"

    topic_metrics = api.ok("GET", f"/projects/{project}/topics/{topic}:metrics")["metrics"]
    assert series(topic_metrics, "topic.number_of_daily_messages") == [(today, 3), (d1, 10), (d2, 20)]
    other_metrics = api.ok("GET", f"/projects/{project}/topics/{other}:metrics")["metrics"]
    assert series(other_metrics, "topic.number_of_daily_messages") == [(d2, 7), (d3, 4)]  # no Spark rows: live
    project_metrics = api.ok("GET", f"/projects/{project}:metrics")["metrics"]
    assert series(project_metrics, "project.number_of_daily_messages") == [(today, 3), (d1, 10), (d2, 27), (d3, 4)]

    window = {"projects": project, "start_date": d3, "end_date": today}  # 4 days, 44 messages
    rows = api.ok("GET", "/metrics/va_metrics", params=window)["projects_metrics"]
    assert (rows["total_message_count"], rows["average_daily_messages"]) == (44, 11.0)
    assert [(r["project"], r["message_count"]) for r in rows["projects"]] == [(project, 44)]
    past = api.ok("GET", "/metrics/va_metrics", params={**window, "end_date": d1})["projects_metrics"]  # 3 days
    assert (past["total_message_count"], past["average_daily_messages"]) == (41, 13.67)  # 41 / 3, rounded up

    admin = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    report = api.as_(admin["token"]).ok("GET", "/users/usageReport", params={"start_date": d2, "end_date": d1})
    assert report["va_metrics"]["projects_metrics"]["projects"][0]["message_count"] == 37  # 27 + 10
    assert report["va_metrics"]["projects_metrics"]["average_daily_messages"] == 18.5

    # a rerun of the job replaces its day: fewer rows, and the live count of the dropped topic returns
    store.replace_daily_usage(d1, [])
    topic_metrics = api.ok("GET", f"/projects/{project}/topics/{topic}:metrics")["metrics"]
    assert series(topic_metrics, "topic.number_of_daily_messages") == [(today, 3), (d1, 100), (d2, 20)]
    store.replace_daily_usage(today, [])
