"""usage_report: the pure transforms on a local session."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.testing.utils import assertDataFrameEqual

from spark import common
from spark.jobs import usage_report as job

pytestmark = [
    pytest.mark.spark,
    # PySpark's collect() leaves its local result sockets to the garbage collector
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]

P1 = "11111111-aaaa-bbbb-cccc-000000000001"
P2 = "22222222-aaaa-bbbb-cccc-000000000002"


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def messages(spark: SparkSession, rows: list[tuple[str, str, int, str, str]]) -> Any:
    """(project_uuid, topic, offset, publish time 'YYYY-MM-DD HH:MM:SS.ffffff' UTC, data)."""
    full = [(p, t, o, ts(when), when, data, {}) for p, t, o, when, data in rows]
    return spark.createDataFrame(full, common.MESSAGES_SCHEMA)


def kafka_row(topic: str, offset: int, value: Any) -> tuple[str, int, int, datetime, bytes]:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return (topic, 0, offset, ts("2026-11-21 10:00:00"), raw)


def test_daily_topic_usage_counts_messages_and_base64_bytes(spark: SparkSession) -> None:
    df = messages(
        spark,
        [
            (P1, "alerts", 0, "2026-11-21 00:00:00.000000", "aGVsbG8="),  # 8
            (P1, "alerts", 1, "2026-11-21 12:30:00.000000", "YQ=="),  # 4
            (P1, "metrics", 0, "2026-11-21 23:59:59.999999", ""),  # 0
            (P2, "alerts", 0, "2026-11-21 08:00:00.000000", "YWJj"),  # 4
        ],
    )
    expected = spark.createDataFrame(
        [
            ("2026-11-21", P1, "alerts", 2, 12),
            ("2026-11-21", P1, "metrics", 1, 0),
            ("2026-11-21", P2, "alerts", 1, 4),
        ],
        "day string, project_uuid string, topic string, messages long, bytes long",
    )
    assertDataFrameEqual(job.daily_topic_usage(df), expected)


def test_daily_topic_usage_splits_at_utc_midnight(spark: SparkSession) -> None:
    df = messages(
        spark,
        [
            (P1, "alerts", 0, "2026-11-20 23:59:59.999999", "YQ=="),
            (P1, "alerts", 1, "2026-11-21 00:00:00.000000", "YWJj"),
            (P1, "alerts", 2, "2026-11-21 00:00:00.000001", "YWJjZA=="),
        ],
    )
    expected = spark.createDataFrame(
        [("2026-11-20", P1, "alerts", 1, 4), ("2026-11-21", P1, "alerts", 2, 12)],
        "day string, project_uuid string, topic string, messages long, bytes long",
    )
    assertDataFrameEqual(job.daily_topic_usage(df), expected)


def test_daily_topic_usage_of_nothing_is_empty(spark: SparkSession) -> None:
    out = job.daily_topic_usage(messages(spark, []))
    assert out.columns == ["day", "project_uuid", "topic", "messages", "bytes"]
    assert out.count() == 0


def test_parse_kafka_rows_splits_the_topic_at_the_first_dot_and_reads_the_value(spark: SparkSession) -> None:
    value = {"attributes": {"k": "v"}, "data": "aGVsbG8=", "publishTime": "2026-11-21T10:00:00.123456789Z"}
    rows = [
        kafka_row(f"{P1}.alerts", 7, value),
        kafka_row(f"{P2}.metrics", 0, {"data": "YQ==", "publishTime": "2026-11-20T23:59:59.000000001Z"}),
        kafka_row("no-dot-topic", 0, value),  # not the service's: dropped
        kafka_row(f"{P1}.broken", 0, b"not json"),  # not the service's JSON: dropped
        kafka_row(f".{P1}", 0, value),  # empty project: dropped
    ]
    kafka = spark.createDataFrame(rows, common.KAFKA_SCHEMA)
    expected = spark.createDataFrame(
        [
            (P1, "alerts", 7, ts("2026-11-21 10:00:00.123456"), value["publishTime"], "aGVsbG8=", {"k": "v"}),
            (P2, "metrics", 0, ts("2026-11-20 23:59:59"), "2026-11-20T23:59:59.000000001Z", "YQ==", {}),
        ],
        common.MESSAGES_SCHEMA,
    )
    assertDataFrameEqual(common.parse_kafka_rows(kafka), expected)


def test_parse_kafka_rows_keeps_later_dots_in_the_topic_part(spark: SparkSession) -> None:
    """AMS names have no dots; should one appear, the project is what precedes the first dot."""
    value = {"attributes": {}, "data": "", "publishTime": "2026-11-21T10:00:00.000000000Z"}
    kafka = spark.createDataFrame([kafka_row(f"{P1}.a.b", 0, value)], common.KAFKA_SCHEMA)
    row = common.parse_kafka_rows(kafka).select("project_uuid", "topic").collect()
    assert [tuple(r) for r in row] == [(P1, "a.b")]


def test_parsed_rows_feed_the_daily_usage(spark: SparkSession) -> None:
    rows = [
        kafka_row(f"{P1}.alerts", i, {"attributes": {}, "data": "YQ==", "publishTime": when})
        for i, when in enumerate(["2026-11-20T23:59:59.999999999Z", "2026-11-21T00:00:00.000000000Z"])
    ]
    out = job.daily_topic_usage(common.parse_kafka_rows(spark.createDataFrame(rows, common.KAFKA_SCHEMA)))
    expected = spark.createDataFrame(
        [("2026-11-20", P1, "alerts", 1, 4), ("2026-11-21", P1, "alerts", 1, 4)],
        "day string, project_uuid string, topic string, messages long, bytes long",
    )
    assertDataFrameEqual(out, expected)


SUB_OUT = (
    "project_uuid string, subscription string, topic string, committed long, end_offset long, "
    "consumed long, backlog long"
)


def test_subscription_usage_backlog_and_consumed(spark: SparkSession) -> None:
    subs = spark.createDataFrame(
        [
            (P1, "s1", "alerts", 7, 0),  # previous report at 3
            (P1, "s2", "alerts", 10, 5),  # first report: since its start offset
            (P1, "s3", "metrics", 4, None),  # no topic log: end 0, no backlog
            (P2, "s1", "alerts", 2, None),  # no start offset known: since 0
        ],
        job.SUBSCRIPTIONS_SCHEMA,
    )
    ends = spark.createDataFrame([(P1, "alerts", 10), (P2, "alerts", 2)], job.TOPIC_ENDS_SCHEMA)
    previous = spark.createDataFrame([(P1, "s1", 3)], job.PREVIOUS_SCHEMA)
    expected = spark.createDataFrame(
        [
            (P1, "s1", "alerts", 7, 10, 4, 3),
            (P1, "s2", "alerts", 10, 10, 5, 0),
            (P1, "s3", "metrics", 4, 0, 4, 0),
            (P2, "s1", "alerts", 2, 2, 2, 0),
        ],
        SUB_OUT,
    )
    assertDataFrameEqual(job.subscription_usage(subs, ends, previous), expected)


def test_subscription_usage_never_negative(spark: SparkSession) -> None:
    """A committed offset past the end (a recreated topic) or behind the previous report."""
    subs = spark.createDataFrame([(P1, "s1", "alerts", 9, 0)], job.SUBSCRIPTIONS_SCHEMA)
    ends = spark.createDataFrame([(P1, "alerts", 5)], job.TOPIC_ENDS_SCHEMA)
    previous = spark.createDataFrame([(P1, "s1", 12)], job.PREVIOUS_SCHEMA)
    expected = spark.createDataFrame([(P1, "s1", "alerts", 9, 5, 0, 0)], SUB_OUT)
    assertDataFrameEqual(job.subscription_usage(subs, ends, previous), expected)


def test_subscription_usage_without_previous_report(spark: SparkSession) -> None:
    subs = spark.createDataFrame([(P1, "s1", "alerts", 3, 1)], job.SUBSCRIPTIONS_SCHEMA)
    ends = spark.createDataFrame([(P1, "alerts", 8)], job.TOPIC_ENDS_SCHEMA)
    expected = spark.createDataFrame([(P1, "s1", "alerts", 3, 8, 2, 5)], SUB_OUT)
    assertDataFrameEqual(job.subscription_usage(subs, ends), expected)


def test_subscription_usage_of_no_subscriptions_is_empty(spark: SparkSession) -> None:
    subs = spark.createDataFrame([], job.SUBSCRIPTIONS_SCHEMA)
    ends = spark.createDataFrame([(P1, "alerts", 8)], job.TOPIC_ENDS_SCHEMA)
    assert job.subscription_usage(subs, ends).count() == 0


def test_day_bounds_and_arguments() -> None:
    assert job.day_bounds_ms("2026-11-21") == (1795219200000, 1795305600000)
    args = job.parse_args(["--bootstrap-servers", "k:9092", "--output-dir", "/tmp/x", "--day", "2026-11-21"])
    assert (args.day, args.mongo_database) == ("2026-11-21", "argo_msg")
    with pytest.raises(SystemExit):
        job.parse_args(["--bootstrap-servers", "k:9092", "--output-dir", "/tmp/x", "--day", "21/11/2026"])
