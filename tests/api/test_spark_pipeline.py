"""The Spark jobs for real: an AMS server on the Kafka backend, messages published and consumed
through the API, then ``usage_report`` and ``archive`` submitted to the standalone cluster of
tools/spark_cluster.py; their outputs read back with pymongo and a local Spark session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pyspark.sql import SparkSession

from spark.session import get_spark
from tests.helpers import ROOT, AmsServer, b64, load_tool

spark_cluster = load_tool("spark_cluster")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SUBMIT_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def cluster() -> None:
    # In a child process, so that the daemons are not children of pytest (no Popen left to warn
    # at exit). Skipped when already up; left running for `make spark-down`.
    up = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "spark_cluster.py"), "up"],
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
    srv = make_server(backend="kafka")
    api = srv.api()
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
    assert api.ack(project, "s", [m["ackId"] for m in pulled]).status_code == 200

    settings = srv.env
    mongo_uri, database = settings["AMS_MONGO_URI"], settings["AMS_MONGO_DATABASE"]
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    request.addfinalizer(client.close)
    db = client[database]
    project_doc = db["projects"].find_one({"name": project})
    assert project_doc is not None
    project_uuid = project_doc["uuid"]
    day = datetime.now(UTC).date().isoformat()
    common = ["--bootstrap-servers", settings["AMS_KAFKA_BOOTSTRAP_SERVERS"], "--mongo-uri", mongo_uri]
    common += ["--mongo-database", database]
    usage_out, archive_out = tmp_path / "usage", tmp_path / "archive"

    def run_both() -> None:
        submit("usage_report", *common, "--output-dir", str(usage_out), "--day", day)
        submit("archive", *common, "--output-dir", str(archive_out))

    def topic_figures() -> dict[str, tuple[int, int]]:
        docs = db["usage_daily"].find({"day": day, "project_uuid": project_uuid})
        return {d["topic"]: (d["messages"], d["bytes"]) for d in docs}

    def sub_figures() -> list[dict[str, Any]]:
        fields = {"_id": 0, "day": 1, "subscription": 1, "topic": 1, "committed": 1}
        fields |= {"end_offset": 1, "consumed": 1, "backlog": 1}
        return list(db["usage_daily_subscriptions"].find({"day": day, "project_uuid": project_uuid}, fields))

    expected_topics = {
        "alpha": (7, sum(len(b64(t)) for t in alpha)),
        "beta": (3, sum(len(b64(t)) for t in beta)),
    }
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

    run_both()
    assert topic_figures() == expected_topics
    assert sub_figures() == expected_subs
    assert archived(reader, archive_out) == expected_archive
    topics_parquet = reader.read.parquet(str(usage_out / "topics" / f"day={day}"))
    assert sorted((r["topic"], r["messages"], r["bytes"]) for r in topics_parquet.collect()) == sorted(
        (t, m, b) for t, (m, b) in expected_topics.items()
    )
    offsets = {d["topic"]: d["offset"] for d in db["archive_offsets"].find({"project_uuid": project_uuid})}
    assert offsets == {"alpha": 6, "beta": 2}

    # a second run: the day replaced, not added to; nothing archived twice
    run_both()
    assert topic_figures() == expected_topics
    assert sub_figures() == expected_subs
    assert db["usage_daily"].count_documents({"day": day, "project_uuid": project_uuid}) == 2
    assert archived(reader, archive_out) == expected_archive

    # two more: exactly two more rows
    more = api.publish(project, "beta", "late one", "late two")
    assert more == ["3", "4"]
    submit("archive", *common, "--output-dir", str(archive_out))
    late = [(project, "beta", day, m, b64(t), {}) for m, t in zip(more, ["late one", "late two"], strict=True)]
    expected_archive = sorted([*expected_archive, *late])
    assert archived(reader, archive_out) == expected_archive
    offsets = {d["topic"]: d["offset"] for d in db["archive_offsets"].find({"project_uuid": project_uuid})}
    assert offsets == {"alpha": 6, "beta": 4}
