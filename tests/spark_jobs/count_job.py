"""Sum 1..N on the executors; write the sum and the executors that ran it to the file argv[1].

spark-submit count_job.py OUT [N]
"""

from __future__ import annotations

import json
import socket
import sys

from pyspark.sql import SparkSession


def main(argv: list[str]) -> int:
    out, n = argv[0], int(argv[1]) if len(argv) > 1 else 1000
    spark = SparkSession.builder.appName("ams-test-count").getOrCreate()
    try:
        rdd = spark.sparkContext.parallelize(range(1, n + 1), 4)
        total = rdd.sum()
        hosts = sorted(set(rdd.map(lambda _: socket.gethostname()).collect()))
        master = spark.sparkContext.master
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump({"sum": total, "master": master, "hosts": hosts}, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
