"""Copy the topics' message logs to Parquet, partitioned by project, topic and date, incrementally.

Each run appends the messages after the last archived offset of each topic, so messages outlive
Kafka's retention. The last archived offset per topic lives in the metadata store, collection
``archive_offsets`` (project_uuid, topic, offset), written after the Parquet append commits: a
crash between the two re-archives that run's messages on the next run (at least once; readers
can drop duplicates on (project, topic, offset)).

    spark-submit --master spark://127.0.0.1:17077 --deploy-mode client \\
        --jars "$(ls .cache/spark/jars/*.jar | paste -sd,)" \\
        --py-files .cache/spark/spark.zip spark/jobs/archive.py \\
        --bootstrap-servers 127.0.0.1:9092 --mongo-uri mongodb://127.0.0.1:27018 \\
        --mongo-database argo_msg --output-dir /var/lib/ams/archive
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark import common

OFFSETS = "archive_offsets"
PARTITIONS = ["project", "topic", "date"]

LAST_OFFSETS_SCHEMA = T.StructType(
    [
        T.StructField("project_uuid", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("last_offset", T.LongType(), False),
    ]
)
PROJECTS_SCHEMA = T.StructType(
    [T.StructField("project_uuid", T.StringType(), False), T.StructField("project", T.StringType(), False)]
)


# --- transforms (pure) -------------------------------------------------------------------------
def archive_rows(messages_df: DataFrame, last_offsets_df: DataFrame, projects_df: DataFrame) -> DataFrame:
    """Messages (``common.MESSAGES_SCHEMA``) after the last archived offset of their topic
    (``last_offsets_df``: project_uuid, topic, last_offset; none: every message), with the
    partition columns ``project`` (name, from ``projects_df``: project_uuid, project), ``topic``
    and ``date`` (UTC 'YYYY-MM-DD' of the publish time). Messages of unknown projects are dropped."""
    m = messages_df.alias("m")
    last = last_offsets_df.alias("l")
    projects = projects_df.alias("p")
    kept = m.join(
        last, (F.col("m.project_uuid") == F.col("l.project_uuid")) & (F.col("m.topic") == F.col("l.topic")), "left"
    ).where(F.col("m.offset") > F.coalesce(F.col("l.last_offset"), F.lit(-1)))
    return kept.join(projects, F.col("m.project_uuid") == F.col("p.project_uuid"), "inner").select(
        F.col("p.project").alias("project"),
        F.col("m.topic").alias("topic"),
        common.utc_day(F.col("m.publish_time")).alias("date"),
        F.col("m.project_uuid").alias("project_uuid"),
        F.col("m.offset").alias("offset"),
        F.col("m.offset").cast("string").alias("message_id"),
        F.col("m.publish_time").alias("publish_time"),
        F.col("m.publish_time_text").alias("publish_time_text"),
        F.col("m.data").alias("data"),
        F.col("m.attributes").alias("attributes"),
    )


def last_offsets(archived_df: DataFrame) -> DataFrame:
    """The highest offset per (project_uuid, topic) of what a run archived."""
    return archived_df.groupBy("project_uuid", "topic").agg(F.max("offset").cast("long").alias("last_offset"))


# --- I/O ---------------------------------------------------------------------------------------
def starting_offsets(keys: list[str], last: dict[str, int], low: dict[str, int]) -> str:
    """The Kafka source's ``startingOffsets`` JSON: after the last archived offset, or from the
    earliest (-2) for topics never archived; never below the log's first offset (retention)."""
    spec: dict[str, dict[str, int]] = {}
    for key in keys:
        spec[key] = {"0": max(last[key] + 1, low.get(key, 0)) if key in last else -2}
    return json.dumps(spec, sort_keys=True)


def read_state(db: Any) -> dict[str, int]:
    return {
        common.topic_key(d["project_uuid"], d["topic"]): int(d["offset"])
        for d in db[OFFSETS].find({}, {"project_uuid": 1, "topic": 1, "offset": 1})
    }


def write_state(db: Any, rows: list[tuple[str, str, int]]) -> None:
    from pymongo import ASCENDING

    coll = db[OFFSETS]
    coll.create_index([("project_uuid", ASCENDING), ("topic", ASCENDING)], unique=True)
    for project_uuid, topic, offset in rows:
        coll.update_one({"project_uuid": project_uuid, "topic": topic}, {"$max": {"offset": int(offset)}}, upsert=True)


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    """Archive what is new; the number of messages archived."""
    with common.mongo_database(args.mongo_uri, args.mongo_database) as db:
        return _run(spark, args, db)


def _run(spark: SparkSession, args: argparse.Namespace, db: Any) -> int:
    projects = common.read_projects(db)
    topics = common.read_topics(db)
    bounds = common.kafka_end_offsets(args.bootstrap_servers, [common.topic_key(p, t) for p, t in topics])
    state = read_state(db)
    # only topics with something new: the source wants offsets for exactly the topics it reads
    keys = sorted(k for k, (_, high) in bounds.items() if high > state.get(k, -1) + 1)
    if not keys:
        return 0
    kafka = common.read_kafka(
        spark,
        args.bootstrap_servers,
        {
            "subscribe": ",".join(keys),
            "startingOffsets": starting_offsets(keys, state, {k: bounds[k][0] for k in keys}),
            "endingOffsets": json.dumps({k: {"0": bounds[k][1]} for k in keys}, sort_keys=True),
            "failOnDataLoss": "false",  # what retention removed meanwhile cannot be archived anyway
        },
    )
    last_df = spark.createDataFrame(
        [(*k.split(".", 1), v) for k, v in state.items()],
        LAST_OFFSETS_SCHEMA,
    )
    projects_df = spark.createDataFrame(list(projects.items()), PROJECTS_SCHEMA)
    rows = archive_rows(common.parse_kafka_rows(kafka), last_df, projects_df).cache()
    rows.write.mode("append").partitionBy(*PARTITIONS).parquet(args.output_dir)
    write_state(db, [(r["project_uuid"], r["topic"], r["last_offset"]) for r in last_offsets(rows).collect()])
    return rows.count()  # cached: no second read of Kafka


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="archive", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka bootstrap servers host:port,...")
    common.add_store_arguments(parser)
    parser.add_argument("--output-dir", required=True, help="Parquet root: project=…/topic=…/date=…")
    parser.add_argument("--master", default=None, help="only outside spark-submit, e.g. local[2]")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return common.run_job("archive", args, run)


if __name__ == "__main__":
    raise SystemExit(main())
