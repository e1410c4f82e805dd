"""One smoke test per job's ``run``: the wiring from reads to writes, on a local session, with the
driver's Kafka and MongoDB calls replaced (their real counterparts run in the cluster test)."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark import common
from spark.jobs import archive, usage_report

pytestmark = [
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]

P1 = "11111111-aaaa-bbbb-cccc-000000000001"
KEY = f"{P1}.alerts"


def records(spark: SparkSession, times: list[str]) -> DataFrame:
    rows = [
        (
            KEY,
            0,
            offset,
            datetime.now(UTC),
            json.dumps({"attributes": {}, "data": "YWJj", "publishTime": when}).encode(),
        )
        for offset, when in enumerate(times)
    ]
    return spark.createDataFrame(rows, common.KAFKA_SCHEMA)


@pytest.fixture
def io(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    calls: dict[str, Any] = {"kafka_options": [], "replaced": {}, "state": {}}
    monkeypatch.setattr(common, "mongo_database", lambda uri, name: contextlib.nullcontext(object()))
    monkeypatch.setattr(common, "read_projects", lambda db: {P1: "ARGO"})
    monkeypatch.setattr(common, "read_topics", lambda db: [(P1, "alerts"), (P1, "empty")])
    monkeypatch.setattr(common, "read_subscriptions", lambda db: [common.SubscriptionState(P1, "sub", "alerts", 2, 0)])
    monkeypatch.setattr(common, "kafka_end_offsets", lambda bootstrap, keys: {KEY: (0, 3)})

    def replace_day(db: Any, collection: str, day: str, key: list[str], docs: list[dict[str, Any]]) -> None:
        calls["replaced"][collection] = (day, key, sorted(docs, key=str))

    monkeypatch.setattr(common, "replace_day", replace_day)
    monkeypatch.setattr(usage_report, "_previous_snapshot", lambda db, day: [])
    monkeypatch.setattr(archive, "read_state", lambda db: dict(calls["state"]))

    def write_state(db: Any, rows: list[tuple[str, str, int]]) -> None:
        for p, t, offset in rows:
            calls["state"][common.topic_key(p, t)] = offset

    monkeypatch.setattr(archive, "write_state", write_state)
    return calls


def test_usage_report_run(
    spark: SparkSession, io: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    times = ["2026-11-20T23:59:59.999999999Z", "2026-11-21T00:00:00.000000000Z", "2026-11-21T12:00:00.000000000Z"]

    def read_kafka(spark_: SparkSession, bootstrap: str, options: dict[str, str]) -> DataFrame:
        io["kafka_options"].append(options)
        return records(spark, times)

    monkeypatch.setattr(common, "read_kafka", read_kafka)
    args = usage_report.parse_args(
        ["--bootstrap-servers", "k:9092", "--output-dir", str(tmp_path), "--day", "2026-11-21"]
    )
    usage_report.run(spark, args)
    usage_report.run(spark, args)  # a rerun replaces the day
    assert io["kafka_options"][0]["subscribe"] == KEY
    assert io["kafka_options"][0]["startingTimestamp"] == "1795219200000"
    day, key, docs = io["replaced"][usage_report.TOPIC_DAILY]
    assert (day, key) == ("2026-11-21", usage_report.TOPIC_KEY)
    assert docs == [{"day": "2026-11-21", "project_uuid": P1, "topic": "alerts", "messages": 2, "bytes": 8}]
    _, _, subs = io["replaced"][usage_report.SUBSCRIPTION_DAILY]
    assert subs == [
        {
            "day": "2026-11-21",
            "project_uuid": P1,
            "subscription": "sub",
            "topic": "alerts",
            "committed": 2,
            "end_offset": 3,
            "consumed": 2,
            "backlog": 1,
        }
    ]
    assert spark.read.parquet(str(tmp_path / "topics" / "day=2026-11-21")).count() == 1
    assert spark.read.parquet(str(tmp_path / "subscriptions" / "day=2026-11-21")).count() == 1


def test_archive_run_twice(
    spark: SparkSession, io: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    times = ["2026-11-20T23:59:59.999999999Z", "2026-11-21T00:00:00.000000000Z", "2026-11-21T12:00:00.000000000Z"]

    def read_kafka(spark_: SparkSession, bootstrap: str, options: dict[str, str]) -> DataFrame:
        io["kafka_options"].append(options)
        return records(spark, times)  # the source would start at startingOffsets: the transform filters anyway

    monkeypatch.setattr(common, "read_kafka", read_kafka)
    args = archive.parse_args(["--bootstrap-servers", "k:9092", "--output-dir", str(tmp_path)])
    archive.run(spark, args)
    assert io["state"] == {KEY: 2}
    assert json.loads(io["kafka_options"][0]["startingOffsets"]) == {KEY: {"0": -2}}
    assert json.loads(io["kafka_options"][0]["endingOffsets"]) == {KEY: {"0": 3}}
    archive.run(spark, args)  # nothing new: Kafka is not even read
    assert len(io["kafka_options"]) == 1
    back = spark.read.option("basePath", str(tmp_path)).parquet(str(tmp_path / "project=ARGO"))
    assert sorted((str(r["date"]), r["offset"]) for r in back.select("date", "offset").collect()) == [
        ("2026-11-20", 0),
        ("2026-11-21", 1),
        ("2026-11-21", 2),
    ]
