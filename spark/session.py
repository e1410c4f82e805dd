"""The one place a SparkSession is built."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession


def get_spark(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session named ``app_name``; ``master`` only when given (spark-submit sets it otherwise).

    Sessions always work in UTC, so that days are UTC days as in the service. Unless set (``conf``,
    ``spark-submit --conf``), ``spark.sql.shuffle.partitions`` is twice the cluster's cores.
    """
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master is not None:
        builder = builder.master(master)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not session.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        # the default 200 shuffle partitions cost seconds per stage on a small cluster: twice the cores
        session.conf.set("spark.sql.shuffle.partitions", str(2 * max(1, session.sparkContext.defaultParallelism)))
    return session
