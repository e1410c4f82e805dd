"""One local Spark session for all Spark tests (docs/spark.md)."""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark.session import get_spark
from tests.helpers import load_tool


def _bare_pyspark_testing() -> None:
    """``pyspark.testing``'s package ``__init__`` imports pandas-on-Spark (pandas, pyarrow, and
    distutils, which warns) only for ``assertPandasOnSparkEqual``. Register the package bare, so
    that ``pyspark.testing.utils.assertDataFrameEqual``, which needs none of them, imports alone."""
    if "pyspark.testing" in sys.modules or importlib.util.find_spec("pandas") is not None:
        return
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None
    assert spec.origin is not None
    package = types.ModuleType("pyspark.testing")
    package.__path__ = [os.path.join(os.path.dirname(spec.origin), "testing")]
    sys.modules["pyspark.testing"] = package


_bare_pyspark_testing()
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no hostname lookup, loopback only


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark(
        "ams-unit-tests",
        master="local[1]",
        conf={
            "spark.sql.shuffle.partitions": "1",
            "spark.default.parallelism": "1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            **load_tool("spark_cluster").java_options_conf(),  # the suite's quick JVMs (tests/conftest.py)
        },
    )
    yield session
    session.stop()
