"""Daily usage: messages and bytes published per project and topic, consumed and backlog per subscription.

Reads one UTC day of the message logs from Kafka through Spark's Kafka source, and the
subscriptions' committed offsets from the metadata store (MongoDB) on the driver; writes the
figures to Parquet (one directory per day) and to the metadata store, replacing the day, so a
rerun never double counts. "Bytes" are the length of the base64 ``data``, as in the service.

    spark-submit --master spark://127.0.0.1:17077 --deploy-mode client \\
        --jars "$(ls .cache/spark/jars/*.jar | paste -sd,)" \\
        --py-files .cache/spark/spark.zip spark/jobs/usage_report.py \\
        --bootstrap-servers 127.0.0.1:9092 --mongo-uri mongodb://127.0.0.1:27018 \\
        --mongo-database argo_msg --output-dir /var/lib/ams/usage --day 2026-11-21
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark import common

TOPIC_DAILY = "usage_daily"
SUBSCRIPTION_DAILY = "usage_daily_subscriptions"
TOPIC_KEY = ["day", "project_uuid", "topic"]
SUBSCRIPTION_KEY = ["day", "project_uuid", "subscription"]

SUBSCRIPTIONS_SCHEMA = T.StructType(
    [
        T.StructField("project_uuid", T.StringType(), False),
        T.StructField("subscription", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("committed", T.LongType(), False),
        T.StructField("start_offset", T.LongType(), True),
    ]
)
TOPIC_ENDS_SCHEMA = T.StructType(
    [
        T.StructField("project_uuid", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("end_offset", T.LongType(), False),
    ]
)
PREVIOUS_SCHEMA = T.StructType(
    [
        T.StructField("project_uuid", T.StringType(), False),
        T.StructField("subscription", T.StringType(), False),
        T.StructField("committed", T.LongType(), False),
    ]
)


# --- transforms (pure) -------------------------------------------------------------------------
def daily_topic_usage(messages_df: DataFrame) -> DataFrame:
    """(project_uuid, topic, offset, publish_time, data) → per UTC day, project and topic:
    ``day`` 'YYYY-MM-DD', ``messages`` and ``bytes`` (sum of the lengths of ``data``)."""
    return (
        messages_df.groupBy(common.utc_day(F.col("publish_time")).alias("day"), F.col("project_uuid"), F.col("topic"))
        .agg(
            F.count(F.lit(1)).cast("long").alias("messages"),
            F.coalesce(F.sum(F.length("data")), F.lit(0)).cast("long").alias("bytes"),
        )
        .select("day", "project_uuid", "topic", "messages", "bytes")
    )


def subscription_usage(subs_df: DataFrame, topic_ends_df: DataFrame, previous_df: DataFrame | None = None) -> DataFrame:
    """Per subscription: its committed offset, the end offset of its topic (the next offset to
    be written; 0 when the topic has no log yet), ``backlog`` = end - committed (never negative)
    and ``consumed``: how far the committed offset moved since the previous report
    (``previous_df``), or else since the subscription's start offset, or else since offset 0."""
    subs = subs_df.alias("s")
    ends = topic_ends_df.alias("e")
    joined = subs.join(
        ends, (F.col("s.project_uuid") == F.col("e.project_uuid")) & (F.col("s.topic") == F.col("e.topic")), "left"
    )
    baseline: Any = F.col("s.start_offset")
    if previous_df is not None:
        prev = previous_df.select(
            F.col("project_uuid").alias("p_project_uuid"),
            F.col("subscription").alias("p_subscription"),
            F.col("committed").alias("p_committed"),
        )
        joined = joined.join(
            prev,
            (F.col("s.project_uuid") == F.col("p_project_uuid")) & (F.col("s.subscription") == F.col("p_subscription")),
            "left",
        )
        baseline = F.coalesce(F.col("p_committed"), baseline)
    end = F.coalesce(F.col("e.end_offset"), F.lit(0)).cast("long")
    committed = F.col("s.committed").cast("long")
    return joined.select(
        F.col("s.project_uuid").alias("project_uuid"),
        F.col("s.subscription").alias("subscription"),
        F.col("s.topic").alias("topic"),
        committed.alias("committed"),
        end.alias("end_offset"),
        F.greatest(committed - F.coalesce(baseline, F.lit(0)).cast("long"), F.lit(0)).cast("long").alias("consumed"),
        F.greatest(end - committed, F.lit(0)).cast("long").alias("backlog"),
    )


# --- I/O ---------------------------------------------------------------------------------------
def day_bounds_ms(day: str) -> tuple[int, int]:
    """[start, end) of a UTC day in milliseconds since the epoch."""
    start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
    return int(start.timestamp() * 1000), int((start + timedelta(days=1)).timestamp() * 1000)


def read_day(spark: SparkSession, bootstrap: str, keys: list[str], day: str) -> DataFrame:
    """One UTC day of the logs of ``keys``: offsets chosen by Kafka timestamp (the publish time,
    in ms), then filtered on the exact publish time."""
    if not keys:
        return spark.createDataFrame([], common.MESSAGES_SCHEMA)
    start_ms, end_ms = day_bounds_ms(day)
    kafka = common.read_kafka(
        spark,
        bootstrap,
        {
            "subscribe": ",".join(sorted(keys)),
            "startingTimestamp": str(start_ms),
            "startingOffsetsByTimestampStrategy": "latest",  # no message since: nothing to read
            "endingTimestamp": str(end_ms),
            "failOnDataLoss": "false",
        },
    )
    return common.parse_kafka_rows(kafka).where(common.utc_day(F.col("publish_time")) == day)


def _previous_snapshot(db: Any, day: str) -> list[dict[str, Any]]:
    """Each subscription's committed offset in its latest report before ``day``."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in db[SUBSCRIPTION_DAILY].find({"day": {"$lt": day}}).sort("day", 1):
        latest[(doc["project_uuid"], doc["subscription"])] = doc
    return [{"project_uuid": p, "subscription": s, "committed": int(d["committed"])} for (p, s), d in latest.items()]


def _docs(df: DataFrame, day: str) -> list[dict[str, Any]]:
    return [row.asDict() | {"day": day} for row in df.collect()]


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Compute and store the figures of ``args.day``; the number of that day's messages."""
    with common.mongo_database(args.mongo_uri, args.mongo_database) as db:
        return _run(spark, args, db)


def _run(spark: SparkSession, args: argparse.Namespace, db: Any) -> int:
    day: str = args.day
    topics = common.read_topics(db)
    subs = common.read_subscriptions(db)
    bounds = common.kafka_end_offsets(args.bootstrap_servers, [common.topic_key(p, t) for p, t in topics])

    topic_daily = daily_topic_usage(read_day(spark, args.bootstrap_servers, list(bounds), day)).cache()
    subs_df = spark.createDataFrame(
        [(s.project_uuid, s.name, s.topic, s.committed, s.start_offset) for s in subs], SUBSCRIPTIONS_SCHEMA
    )
    ends_df = spark.createDataFrame(
        [(p, t, bounds[common.topic_key(p, t)][1]) for p, t in topics if common.topic_key(p, t) in bounds],
        TOPIC_ENDS_SCHEMA,
    )
    previous_df = spark.createDataFrame(
        [(d["project_uuid"], d["subscription"], d["committed"]) for d in _previous_snapshot(db, day)], PREVIOUS_SCHEMA
    )
    sub_daily = subscription_usage(subs_df, ends_df, previous_df).cache()

    out = args.output_dir.rstrip("/")
    topic_daily.drop("day").write.mode("overwrite").parquet(f"{out}/topics/day={day}")
    sub_daily.write.mode("overwrite").parquet(f"{out}/subscriptions/day={day}")
    topic_docs = _docs(topic_daily.drop("day"), day)
    common.replace_day(db, TOPIC_DAILY, day, TOPIC_KEY, topic_docs)
    common.replace_day(db, SUBSCRIPTION_DAILY, day, SUBSCRIPTION_KEY, _docs(sub_daily, day))
    return sum(int(d["messages"]) for d in topic_docs)


def yesterday() -> str:
    return (datetime.now(UTC).date() - timedelta(days=1)).isoformat()


def _day(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a day YYYY-MM-DD: {text!r}") from exc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="usage_report", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--day", type=_day, default=yesterday(), help="UTC day YYYY-MM-DD (default: yesterday)")
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers host:port,...")
    common.add_store_arguments(parser)
    parser.add_argument("--output-dir", required=True, help="Parquet root: topics/day=…, subscriptions/day=…")
    parser.add_argument("--master", default=None, help="only outside spark-submit, e.g. local[2]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return common.run_job("usage_report", args, run)


if __name__ == "__main__":
    raise SystemExit(main())
