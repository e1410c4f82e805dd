"""archive: the pure transforms on a local session."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing.utils import assertDataFrameEqual

from spark import common
from spark.jobs import archive as job

pytestmark = [
    pytest.mark.spark,
    # PySpark's collect() leaves its local result sockets to the garbage collector
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]

P1 = "11111111-aaaa-bbbb-cccc-000000000001"
P2 = "22222222-aaaa-bbbb-cccc-000000000002"
OUT = (
    "project string, topic string, date string, project_uuid string, offset long, message_id string, "
    "publish_time timestamp, publish_time_text string, data string, attributes map<string,string>"
)


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def message(project: str, topic: str, offset: int, when: str) -> tuple[Any, ...]:
    text = when.replace(" ", "T") + "000Z"
    return (project, topic, offset, ts(when), text, f"data-{offset}", {"n": str(offset)})


def archived(project_name: str, m: tuple[Any, ...], date: str) -> tuple[Any, ...]:
    p, t, offset, when, text, data, attrs = m
    return (project_name, t, date, p, offset, str(offset), when, text, data, attrs)


@pytest.fixture
def projects(spark: SparkSession) -> Any:
    return spark.createDataFrame([(P1, "ARGO"), (P2, "EGI")], job.PROJECTS_SCHEMA)


def test_keeps_only_offsets_after_the_last_archived(spark: SparkSession, projects: Any) -> None:
    ms = [
        message(P1, "alerts", 4, "2026-11-21 10:00:00.000000"),
        message(P1, "alerts", 5, "2026-11-21 10:00:01.000000"),  # the last archived one: not again
        message(P1, "alerts", 6, "2026-11-21 23:59:59.999999"),
        message(P1, "alerts", 7, "2026-11-22 00:00:00.000000"),  # next day: its own date partition
        message(P1, "metrics", 0, "2026-11-21 10:00:00.000000"),  # never archived: everything
        message(P2, "alerts", 0, "2026-11-21 10:00:00.000000"),  # same topic name, other project
    ]
    last = spark.createDataFrame([(P1, "alerts", 5), (P2, "other", 100)], job.LAST_OFFSETS_SCHEMA)
    out = job.archive_rows(spark.createDataFrame(ms, common.MESSAGES_SCHEMA), last, projects)
    expected = spark.createDataFrame(
        [
            archived("ARGO", ms[2], "2026-11-21"),
            archived("ARGO", ms[3], "2026-11-22"),
            archived("ARGO", ms[4], "2026-11-21"),
            archived("EGI", ms[5], "2026-11-21"),
        ],
        OUT,
    )
    assertDataFrameEqual(out, expected)


def test_nothing_new_and_nothing_at_all(spark: SparkSession, projects: Any) -> None:
    ms = [message(P1, "alerts", 5, "2026-11-21 10:00:00.000000")]
    last = spark.createDataFrame([(P1, "alerts", 5)], job.LAST_OFFSETS_SCHEMA)
    assert job.archive_rows(spark.createDataFrame(ms, common.MESSAGES_SCHEMA), last, projects).count() == 0
    empty = spark.createDataFrame([], common.MESSAGES_SCHEMA)
    out = job.archive_rows(empty, spark.createDataFrame([], job.LAST_OFFSETS_SCHEMA), projects)
    assert out.count() == 0
    assert out.columns[:3] == job.PARTITIONS


def test_messages_of_unknown_projects_are_dropped(spark: SparkSession, projects: Any) -> None:
    ms = [message("33333333-aaaa-bbbb-cccc-000000000003", "alerts", 0, "2026-11-21 10:00:00.000000")]
    last = spark.createDataFrame([], job.LAST_OFFSETS_SCHEMA)
    assert job.archive_rows(spark.createDataFrame(ms, common.MESSAGES_SCHEMA), last, projects).count() == 0


def test_last_offsets_of_a_run(spark: SparkSession, projects: Any) -> None:
    ms = [
        message(P1, "alerts", 6, "2026-11-21 10:00:00.000000"),
        message(P1, "alerts", 9, "2026-11-22 10:00:00.000000"),
        message(P2, "alerts", 0, "2026-11-21 10:00:00.000000"),
    ]
    rows = job.archive_rows(
        spark.createDataFrame(ms, common.MESSAGES_SCHEMA), spark.createDataFrame([], job.LAST_OFFSETS_SCHEMA), projects
    )
    expected = spark.createDataFrame([(P1, "alerts", 9), (P2, "alerts", 0)], job.LAST_OFFSETS_SCHEMA)
    assertDataFrameEqual(job.last_offsets(rows), expected)


def test_parquet_round_trip_partitions(spark: SparkSession, projects: Any, tmp_path: Any) -> None:
    """Appending twice with the offsets of the first run archives each message once."""
    ms = [message(P1, "alerts", i, f"2026-11-21 10:00:0{i}.000000") for i in range(3)]
    none = spark.createDataFrame([], job.LAST_OFFSETS_SCHEMA)
    first = job.archive_rows(spark.createDataFrame(ms[:2], common.MESSAGES_SCHEMA), none, projects)
    first.write.mode("append").partitionBy(*job.PARTITIONS).parquet(str(tmp_path))
    state = job.last_offsets(first)
    second = job.archive_rows(spark.createDataFrame(ms, common.MESSAGES_SCHEMA), state, projects)
    second.write.mode("append").partitionBy(*job.PARTITIONS).parquet(str(tmp_path))
    spark.conf.set("spark.sql.sources.partitionColumnTypeInference.enabled", "false")  # names stay strings
    try:
        back = spark.read.parquet(str(tmp_path)).select("project", "topic", "date", "offset")
        back = back.localCheckpoint()
    finally:
        spark.conf.unset("spark.sql.sources.partitionColumnTypeInference.enabled")
    assertDataFrameEqual(
        back,
        spark.createDataFrame(
            [("ARGO", "alerts", "2026-11-21", i) for i in range(3)],
            "project string, topic string, date string, offset long",
        ),
    )
    assert (tmp_path / "project=ARGO" / "topic=alerts" / "date=2026-11-21").is_dir()


def test_starting_offsets() -> None:
    keys = [f"{P1}.alerts", f"{P1}.metrics", f"{P2}.alerts"]
    spec = json.loads(job.starting_offsets(keys, {keys[0]: 5, keys[2]: 1}, {keys[0]: 0, keys[2]: 10}))
    assert spec == {keys[0]: {"0": 6}, keys[1]: {"0": -2}, keys[2]: {"0": 10}}
