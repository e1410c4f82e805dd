"""Read a topic through Spark's Kafka source from a bootstrap server where nothing listens; write what
happened (``loaded N rows`` or the error) to the file argv[0].

    spark-submit --jars <the connector's jars> kafka_probe_job.py OUT BOOTSTRAP

Without the connector on the classpath the read fails with "Failed to find data source: kafka";
with it, the Kafka client itself gives up on the bootstrap server (a timeout).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession


def main(argv: list[str]) -> int:
    out, bootstrap = argv[0], argv[1]
    spark = SparkSession.builder.appName("ams-test-kafka-probe").getOrCreate()
    try:
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "ams-no-such-topic")
            .option("kafka.request.timeout.ms", "3000")
            .option("kafka.default.api.timeout.ms", "3000")
            .option("fetchOffset.numRetries", "1")
            .option("fetchOffset.retryIntervalMs", "100")
            .load()
        )
        result = f"loaded {frame.count()} rows"
    except Exception as exc:  # the probe's point: which error
        result = f"error: {type(exc).__name__}: {exc}"
    finally:
        spark.stop()
    with open(out, "w") as f:
        f.write(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
