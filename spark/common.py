"""What the jobs share: the shape of the service's Kafka records, and driver-side metadata reads.

A topic's log is the Kafka topic ``{project_uuid}.{topic_name}`` with one partition; the record
value is the JSON ``{"attributes": {...}, "data": "<base64>", "publishTime": "...nnnnnnnnnZ"}``
and the message id is the Kafka offset (``ams_app.backends.kafka.log``). Metadata (projects,
topics, subscriptions and their cursors) is small and read on the driver with pymongo.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark.session import get_spark

VALUE_SCHEMA = T.StructType(
    [
        T.StructField("attributes", T.MapType(T.StringType(), T.StringType())),
        T.StructField("data", T.StringType()),
        T.StructField("publishTime", T.StringType()),
    ]
)

#: What ``parse_kafka_rows`` yields, the input of the jobs' transforms.
MESSAGES_SCHEMA = T.StructType(
    [
        T.StructField("project_uuid", T.StringType(), False),
        T.StructField("topic", T.StringType(), False),
        T.StructField("offset", T.LongType(), False),
        T.StructField("publish_time", T.TimestampType()),
        T.StructField("publish_time_text", T.StringType()),
        T.StructField("data", T.StringType()),
        T.StructField("attributes", T.MapType(T.StringType(), T.StringType())),
    ]
)

#: The columns of Spark's Kafka source that ``parse_kafka_rows`` reads.
KAFKA_SCHEMA = T.StructType(
    [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("offset", T.LongType(), False),
        T.StructField("timestamp", T.TimestampType()),
        T.StructField("value", T.BinaryType()),
    ]
)

# "2026-11-22T07:21:04.123456789Z": Spark keeps microseconds (the text column keeps all nine digits)
_PUBLISH_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSSSSX"


def utc_day(ts: Column) -> Column:
    """'YYYY-MM-DD' of a timestamp in UTC, whatever the session's time zone."""
    days = F.floor(F.unix_micros(ts) / F.lit(86_400_000_000)).cast("int")
    return F.date_format(F.date_from_unix_date(days), "yyyy-MM-dd")


def parse_kafka_rows(kafka_df: DataFrame) -> DataFrame:
    """Rows of Spark's Kafka source → ``MESSAGES_SCHEMA``.

    The Kafka topic name splits at its first dot into project uuid and topic name (neither may
    contain a dot in AMS); topics without a dot are not the service's and are dropped, as are
    records whose value is not the service's JSON.
    """
    dot = F.instr(F.col("topic"), ".")
    value = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    parsed = (
        kafka_df.where(dot > 1)
        .select(
            F.substring_index(F.col("topic"), ".", 1).alias("project_uuid"),
            F.expr("substr(topic, instr(topic, '.') + 1)").alias("topic"),
            F.col("offset").cast("long").alias("offset"),
            value.alias("v"),
        )
        .where(F.col("v.data").isNotNull() & F.col("v.publishTime").isNotNull())
    )
    return parsed.select(
        "project_uuid",
        "topic",
        "offset",
        F.to_timestamp(F.col("v.publishTime"), _PUBLISH_TIME_FORMAT).alias("publish_time"),
        F.col("v.publishTime").alias("publish_time_text"),
        F.col("v.data").alias("data"),
        F.coalesce(F.col("v.attributes"), F.create_map().cast("map<string,string>")).alias("attributes"),
    )


#: The Kafka link's security comes from these environment variables (as the metadata store's URI,
#: out of the process list; the spark role's ams-spark-job reads them from a file only the spark
#: user can read): PROTOCOL (PLAINTEXT, SSL or SASL_SSL), SASL_MECHANISM, SASL_USERNAME,
#: SASL_PASSWORD, CA_FILE (docs/spark.md).
KAFKA_ENV_PREFIX = "AMS_SPARK_KAFKA_"
KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


@dataclass(frozen=True)
class KafkaSecurity:
    """How the jobs talk to Kafka: what AMS's settings ``kafka_security_protocol`` and the
    ``kafka_sasl_*`` and ``kafka_ca_file`` say for the service (a read-only user of its own)."""

    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-512"
    username: str = ""
    password: str = ""
    ca_file: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> KafkaSecurity:
        env = os.environ if environ is None else environ

        def get(name: str, default: str = "") -> str:
            return env.get(KAFKA_ENV_PREFIX + name, "") or default

        found = cls(
            get("PROTOCOL", "PLAINTEXT").upper(),
            get("SASL_MECHANISM", "SCRAM-SHA-512"),
            get("SASL_USERNAME"),
            get("SASL_PASSWORD"),
            get("CA_FILE"),
        )
        if found.protocol not in KAFKA_PROTOCOLS:
            raise ValueError(f"{KAFKA_ENV_PREFIX}PROTOCOL must be one of {', '.join(KAFKA_PROTOCOLS)}")
        if found.protocol == "SASL_SSL" and not (found.username and found.password):
            raise ValueError(f"SASL_SSL needs {KAFKA_ENV_PREFIX}SASL_USERNAME and {KAFKA_ENV_PREFIX}SASL_PASSWORD")
        return found

    def librdkafka(self) -> dict[str, str]:
        """The options of a confluent-kafka client (the driver's reads of the bounds)."""
        if self.protocol == "PLAINTEXT":
            return {}
        options = {"security.protocol": self.protocol.lower()}
        if self.ca_file:
            options["ssl.ca.location"] = self.ca_file
        if self.protocol == "SASL_SSL":
            options |= {
                "sasl.mechanism": self.mechanism,
                "sasl.username": self.username,
                "sasl.password": self.password,
            }
        return options

    def spark_options(self) -> dict[str, str]:
        """The options of Spark's Kafka source (the Java client's, each behind ``kafka.``)."""
        if self.protocol == "PLAINTEXT":
            return {}
        options = {"kafka.security.protocol": self.protocol}
        if self.ca_file:
            options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": self.ca_file}
        if self.protocol == "SASL_SSL":

            def quoted(text: str) -> str:
                return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

            options |= {
                "kafka.sasl.mechanism": self.mechanism,
                "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f"username={quoted(self.username)} password={quoted(self.password)};",
            }
        return options


def read_kafka(
    spark: SparkSession, bootstrap: str, options: dict[str, str], security: KafkaSecurity | None = None
) -> DataFrame:
    """A batch read of Spark's Kafka source (needs the spark-sql-kafka-0-10 connector), with the
    link's security (default: from the environment, ``KafkaSecurity.from_env``)."""
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    for key, value in ((security or KafkaSecurity.from_env()).spark_options() | options).items():
        reader = reader.option(key, value)
    return reader.load().select("topic", "partition", "offset", "timestamp", "value")


# --- driver side: metadata and Kafka bounds --------------------------------------------------
@dataclass(frozen=True)
class SubscriptionState:
    project_uuid: str
    name: str
    topic: str
    committed: int  # the cursor's offset: everything below it is acknowledged
    start_offset: int | None  # the cursor's first version, while the store still keeps it


def topic_key(project_uuid: str, topic: str) -> str:
    """A topic's Kafka topic, named as the service names it (ams_app.service.base.topic_key; the
    cluster does not carry ams_app, and tests/api/test_spark_store_layout.py holds the two together)."""
    return f"{project_uuid}.{topic}"


#: Where the jobs take the metadata store's URI from when ``--mongo-uri`` is not given: an
#: environment variable keeps its credentials out of the process list (the spark role's
#: ams-spark-job reads it from a file only the spark user can read).
MONGO_URI_ENV = "AMS_SPARK_MONGO_URI"
DEFAULT_MONGO_URI = "mongodb://127.0.0.1:27017"


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``--mongo-uri`` (default: $AMS_SPARK_MONGO_URI, else the local server) and ``--mongo-database``."""
    parser.add_argument(
        "--mongo-uri",
        default=os.environ.get(MONGO_URI_ENV) or DEFAULT_MONGO_URI,
        help=f"the metadata store (default: ${MONGO_URI_ENV}, else {DEFAULT_MONGO_URI})",
    )
    parser.add_argument("--mongo-database", default="argo_msg")


@contextlib.contextmanager
def mongo_database(uri: str, database: str) -> Iterator[Any]:
    """The metadata database, its client closed on the way out."""
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(uri, tz_aware=True)
    try:
        yield client[database]
    finally:
        client.close()


def read_projects(db: Any) -> dict[str, str]:
    """Project uuid → name."""
    return {d["uuid"]: d["name"] for d in db["projects"].find({}, {"uuid": 1, "name": 1})}


def read_topics(db: Any) -> list[tuple[str, str]]:
    return [(d["project_uuid"], d["name"]) for d in db["topics"].find({}, {"project_uuid": 1, "name": 1})]


def read_subscriptions(db: Any) -> list[SubscriptionState]:
    """Every subscription with the offset of its cursor's latest version, in the layout of
    ``ams_app.backends.mongo.store`` (pinned by tests/api/test_spark_store_layout.py)."""
    out: list[SubscriptionState] = []
    for sub in db["subscriptions"].find({}, {"project_uuid": 1, "name": 1, "topic": 1, "cursor_id": 1}):
        versions = db["cursors"].find({"cursor_id": sub["cursor_id"]}).sort("version", -1)
        latest = next(iter(versions.limit(1)), None)
        first = db["cursors"].find_one({"cursor_id": sub["cursor_id"], "version": 0})
        out.append(
            SubscriptionState(
                sub["project_uuid"],
                sub["name"],
                sub["topic"],
                int(latest["state"].get("offset", 0)) if latest else 0,
                int(first["state"].get("offset", 0)) if first else None,
            )
        )
    return out


def kafka_end_offsets(
    bootstrap: str, keys: Iterable[str], security: KafkaSecurity | None = None
) -> dict[str, tuple[int, int]]:
    """(low, high) watermarks of partition 0 of each of ``keys`` that exists in Kafka."""
    from confluent_kafka import Consumer, TopicPartition

    link = (security or KafkaSecurity.from_env()).librdkafka()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ams-spark-bounds", "enable.auto.commit": False, **link}
    )
    try:
        present = set(consumer.list_topics(timeout=30).topics)
        out: dict[str, tuple[int, int]] = {}
        for key in keys:
            if key in present:
                low, high = consumer.get_watermark_offsets(TopicPartition(key, 0), timeout=30)
                out[key] = (int(low), int(high))
        return out
    finally:
        consumer.close()


def replace_day(db: Any, collection: str, day: str, key: list[str], docs: list[dict[str, Any]]) -> None:
    """Make ``docs`` the figures of ``day`` in ``collection``: rows of that day not in ``docs``
    go, so a rerun replaces the day and never adds to it."""
    from pymongo import ASCENDING

    coll = db[collection]
    coll.create_index([(k, ASCENDING) for k in key], unique=True)
    coll.delete_many({"day": day})
    if docs:
        coll.insert_many([dict(d) for d in docs], ordered=False)


def run_job(job: str, args: argparse.Namespace, run: Callable[[SparkSession, argparse.Namespace], int]) -> int:
    """A job's ``main``: a session named ``ams-<job>`` (``--master`` outside spark-submit), ``run``
    timed and reported, the session stopped whatever happens."""
    spark = get_spark(f"ams-{job.replace('_', '-')}", master=args.master)
    try:
        started = time.monotonic()
        messages = run(spark, args)
        report(job, messages, time.monotonic() - started)
    finally:
        spark.stop()
    return 0


def report(job: str, messages: int, seconds: float) -> None:
    """The job's own figures on stdout (after the session started; spark-submit's JVM start,
    the connector's class loading and the session's shutdown are not in ``seconds``)."""
    rate = messages / seconds if seconds > 0 else 0.0
    print(f"{job}: {messages} messages in {seconds:.2f} s ({rate:.0f} messages/s)", flush=True)
