"""The Spark jobs for real: an AMS server on the Kafka backend, messages published and consumed
through the API, then ``usage_report`` and ``archive`` submitted to the standalone cluster of
tools/spark_cluster.py; their outputs read back with pymongo and a local Spark session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pyspark.sql import SparkSession

from spark.session import get_spark
from tests.api.test_metrics_history import series as metric_series
from tests.helpers import ROOT, AmsServer, Api, b64, load_tool, unique

spark_cluster = load_tool("spark_cluster")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SUBMIT_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def cluster() -> None:
    # In a child process, so that the daemons are not children of pytest (no Popen left to warn
    # at exit). Skipped when already up; left running for `make spark-down`.
    up = subprocess.run(
        [sys.executable, "-m", "tools.spark_cluster", "up"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert up.returncode == 0, up.stderr[-4000:]


@pytest.fixture(scope="module")
def reader() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = get_spark(
        "ams-pipeline-test-reader",
        master="local[1]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "1",
            "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
            **spark_cluster.java_options_conf(),  # the suite's quick JVMs (tests/conftest.py)
        },
    )
    yield session
    session.stop()


def submit(job: str, *args: str) -> None:
    assert spark_cluster.submit(job, list(args), timeout=SUBMIT_TIMEOUT) == 0, f"{job} failed"


def archived(reader: SparkSession, root: Path) -> list[tuple[str, str, str, str, str, dict[str, str]]]:
    df = reader.read.parquet(str(root))
    rows = df.select("project", "topic", "date", "message_id", "data", "attributes").collect()
    return sorted(
        (r["project"], r["topic"], r["date"], r["message_id"], r["data"], dict(r["attributes"] or {})) for r in rows
    )


def series(api: Api, path: str, name: str) -> list[tuple[str, int]]:
    """A daily series of a ``:metrics`` answer: (day, messages), newest first."""
    return metric_series(api.ok("GET", path)["metrics"], name)


@pytest.mark.timeout(1200)
# pyspark's collect() leaves its local result socket to the garbage collector
@pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning")
def test_usage_report_and_archive_on_kafka_and_mongodb(
    make_server: Callable[..., AmsServer],
    cluster: None,
    reader: SparkSession,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """Yesterday's traffic goes through AMS nodes whose clock (tests/shifted_clock.py) says yesterday; one of
    them is killed before it flushes its usage counters, so the live count of that day is short.
    The Spark job counts the log itself: after it ran, the metrics API of a node on today's clock
    serves exactly its figures for that day."""
    database = unique("ams_spark").replace("-", "_")
    yesterday_clock: dict[str, Any] = {"clock_shift": -86400.0, "ams_mongo_database": database}
    day = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()

    past = make_server(tmp_path / "past", backend="kafka", **yesterday_clock)
    api = past.api()
    project = api.new_project("spark")
    api.ok("PUT", f"/projects/{project}/topics/alpha")
    api.ok("PUT", f"/projects/{project}/topics/beta")
    api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/alpha"})

    alpha = [f"alpha message {i}" * (i + 1) for i in range(7)]
    beta = [f"b{i}" for i in range(3)]
    alpha_ids: list[str] = []
    for i, text in enumerate(alpha):
        alpha_ids += api.publish(project, "alpha", text, attributes={"n": str(i)})
    beta_ids = api.publish(project, "beta", *beta)
    assert alpha_ids == [str(i) for i in range(7)]
    assert beta_ids == ["0", "1", "2"]

    pulled = api.pull(project, "s", n=4)
    assert len(pulled) == 4
    assert {m["message"]["publishTime"][:10] for m in pulled} == {day}, "the node's clock is not yesterday's"
    assert api.ack(project, "s", [m["ackId"] for m in pulled]).status_code == 200
    assert past.stop() == 0  # graceful: its counters are flushed

    # a node that dies before its counters reach the store: two messages in Kafka, not in the live count
    crashed = make_server(tmp_path / "crashed", backend="kafka", ams_metrics_flush_seconds="3600", **yesterday_clock)
    unflushed = ["b3 unflushed", "b4 unflushed"]
    assert crashed.api().publish(project, "beta", *unflushed) == ["3", "4"]
    crashed.kill()
    beta += unflushed

    now = make_server(tmp_path / "now", backend="kafka", ams_mongo_database=database)
    api = now.api()
    alpha_series = f"/projects/{project}/topics/alpha:metrics", "topic.number_of_daily_messages"
    beta_series = f"/projects/{project}/topics/beta:metrics", "topic.number_of_daily_messages"
    project_series = f"/projects/{project}:metrics", "project.number_of_daily_messages"
    window = {"projects": project, "start_date": day, "end_date": day}
    admin = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])

    def va_count() -> int:
        rows = api.ok("GET", "/metrics/va_metrics", params=window)["projects_metrics"]
        assert [r["project"] for r in rows["projects"]] == [project]
        return int(rows["total_message_count"])

    def report_count() -> int:
        report = api.as_(admin["token"]).ok("GET", "/users/usageReport", params=window)
        return int(report["va_metrics"]["projects_metrics"]["projects"][0]["message_count"])

    # before the job: the live counters, short of the two the crashed node never flushed
    assert series(api, *alpha_series) == [(day, 7)]
    assert series(api, *beta_series) == [(day, 3)]
    assert series(api, *project_series) == [(day, 10)]
    assert (va_count(), report_count()) == (10, 10)

    settings = now.env
    mongo_uri = settings["AMS_MONGO_URI"]
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    request.addfinalizer(client.close)
    db = client[database]
    project_doc = db["projects"].find_one({"name": project})
    assert project_doc is not None
    project_uuid = project_doc["uuid"]
    common = ["--bootstrap-servers", settings["AMS_KAFKA_BOOTSTRAP_SERVERS"], "--mongo-uri", mongo_uri]
    common += ["--mongo-database", database]
    usage_out, archive_out = tmp_path / "usage", tmp_path / "archive"

    def topic_figures() -> dict[str, tuple[int, int]]:
        docs = db["usage_daily"].find({"day": day, "project_uuid": project_uuid})
        return {d["topic"]: (d["messages"], d["bytes"]) for d in docs}

    def sub_figures() -> list[dict[str, Any]]:
        fields = {"_id": 0, "day": 1, "subscription": 1, "topic": 1, "committed": 1}
        fields |= {"end_offset": 1, "consumed": 1, "backlog": 1}
        return list(db["usage_daily_subscriptions"].find({"day": day, "project_uuid": project_uuid}, fields))

    def api_figures() -> tuple[Any, ...]:
        return (
            series(api, *alpha_series),
            series(api, *beta_series),
            series(api, *project_series),
            va_count(),
            report_count(),
        )

    expected_topics = {
        "alpha": (7, sum(len(b64(t)) for t in alpha)),
        "beta": (5, sum(len(b64(t)) for t in beta)),
    }
    expected_api = ([(day, 7)], [(day, 5)], [(day, 12)], 12, 12)
    expected_subs = [
        {
            "day": day,
            "subscription": "s",
            "topic": "alpha",
            "committed": 4,
            "end_offset": 7,
            "consumed": 4,
            "backlog": 3,
        }
    ]
    expected_archive = sorted(
        [(project, "alpha", day, str(i), b64(t), {"n": str(i)}) for i, t in enumerate(alpha)]
        + [(project, "beta", day, str(i), b64(t), {}) for i, t in enumerate(beta)]
    )

    submit("usage_report", *common, "--output-dir", str(usage_out), "--day", day)
    submit("archive", *common, "--output-dir", str(archive_out))
    assert topic_figures() == expected_topics
    assert sub_figures() == expected_subs
    assert api_figures() == expected_api  # the job's counts, the unflushed two included
    assert archived(reader, archive_out) == expected_archive
    topics_parquet = reader.read.parquet(str(usage_out / "topics" / f"day={day}"))
    assert sorted((r["topic"], r["messages"], r["bytes"]) for r in topics_parquet.collect()) == sorted(
        (t, m, b) for t, (m, b) in expected_topics.items()
    )
    offsets = {d["topic"]: d["offset"] for d in db["archive_offsets"].find({"project_uuid": project_uuid})}
    assert offsets == {"alpha": 6, "beta": 4}

    # usage_report again: the day replaced, not added to
    submit("usage_report", *common, "--output-dir", str(usage_out), "--day", day)
    assert topic_figures() == expected_topics
    assert sub_figures() == expected_subs
    assert db["usage_daily"].count_documents({"day": day, "project_uuid": project_uuid}) == 2
    assert api_figures() == expected_api

    # archive again after two more, today: exactly two more rows, under today's date (nothing
    # archived twice); today's count stays live
    late = ["late one", "late two"]
    api.ok("PUT", f"/projects/{project}/subscriptions/late", {"topic": f"projects/{project}/topics/beta"})
    assert api.publish(project, "beta", *late) == ["5", "6"]
    # today is the day they were published (a run may cross midnight: the clock of the start says less)
    (today,) = {m["message"]["publishTime"][:10] for m in api.pull(project, "late", n=2, immediately=False)}
    submit("archive", *common, "--output-dir", str(archive_out))
    expected_archive = sorted(
        [*expected_archive, *[(project, "beta", today, m, b64(t), {}) for m, t in zip(["5", "6"], late, strict=True)]]
    )
    assert archived(reader, archive_out) == expected_archive
    offsets = {d["topic"]: d["offset"] for d in db["archive_offsets"].find({"project_uuid": project_uuid})}
    assert offsets == {"alpha": 6, "beta": 6}
    assert series(api, *beta_series) == [(today, 2), (day, 5)]
