"""The Spark standalone cluster of tools/spark_cluster.py: `up` starts a master and a worker on loopback from
the pyspark wheel, jobs submitted in client mode run on its executor, the Kafka connector's jars make
Spark's Kafka source resolvable, `down` stops both."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_tool

spark_cluster = load_tool("spark_cluster")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOBS = ROOT / "tests" / "spark_jobs"
#: Nothing listens there (the discard port): a Kafka client retries until its timeout.
NO_KAFKA = "127.0.0.1:9"
SUBMIT_TIMEOUT = 240.0


def tool(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.spark_cluster", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster() -> Iterator[object]:
    up = tool("up")
    assert up.returncode == 0, up.stderr
    yield spark_cluster.Ports.from_env()
    down = tool("down")
    assert down.returncode == 0, down.stderr


def test_up_starts_a_master_with_one_alive_worker(cluster: object) -> None:
    ports = spark_cluster.Ports.from_env()
    state = spark_cluster.master_state(ports)
    assert state is not None
    assert spark_cluster.cluster_alive(state, ports.worker)
    alive = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert [(w["host"], w["port"], w["cores"], w["memory"]) for w in alive] == [("127.0.0.1", ports.worker, 1, 1024)]
    status = tool("status")
    assert status.returncode == 0
    assert "ALIVE" in status.stdout


def test_up_again_changes_nothing(cluster: object) -> None:
    pids = (spark_cluster.MASTER.pid(), spark_cluster.WORKER.pid())
    assert None not in pids
    again = tool("up", timeout=30)
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stderr
    assert (spark_cluster.MASTER.pid(), spark_cluster.WORKER.pid()) == pids


def test_a_job_runs_on_the_cluster(cluster: object, tmp_path: Path) -> None:
    out = tmp_path / "count.json"
    before = set(spark_cluster.WORK_DIR.glob("app-*"))
    assert spark_cluster.submit(str(JOBS / "count_job.py"), [str(out), "1000"], timeout=SUBMIT_TIMEOUT) == 0
    result = json.loads(out.read_text())
    assert result["sum"] == 500500
    assert result["master"] == spark_cluster.Ports.from_env().master_url
    # the work ran in an executor the worker started (its directory is the application's)
    apps = set(spark_cluster.WORK_DIR.glob("app-*")) - before
    assert len(apps) == 1
    assert any(apps.pop().glob("*/stderr"))


def test_kafka_source_resolves_with_the_connector_jars(cluster: object, tmp_path: Path) -> None:
    out = tmp_path / "kafka.txt"
    assert spark_cluster.submit(str(JOBS / "kafka_probe_job.py"), [str(out), NO_KAFKA], timeout=SUBMIT_TIMEOUT) == 0
    result = out.read_text()
    assert result.startswith("error: ")
    assert "Failed to find data source" not in result
    assert "org.apache.kafka" in result
    assert "TimeoutException" in result


def test_without_the_jars_spark_has_no_kafka_source(cluster: object, tmp_path: Path) -> None:
    """The control of the test above: the same job without --jars."""
    out = tmp_path / "kafka.txt"
    home = spark_cluster.spark_home()
    argv = spark_cluster.submit_argv(
        home,
        JOBS / "kafka_probe_job.py",
        [str(out), NO_KAFKA],
        ports=spark_cluster.Ports.from_env(),
        jars=[],
        py_files=None,
    )
    done = subprocess.run(
        argv,
        env=spark_cluster.process_env(home, spark_cluster.python_exe()),
        capture_output=True,
        text=True,
        timeout=SUBMIT_TIMEOUT,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Failed to find data source: kafka" in out.read_text()


def test_down_stops_both(cluster: object) -> None:
    ports = spark_cluster.Ports.from_env()
    down = tool("down", timeout=60)
    assert down.returncode == 0, down.stderr
    assert spark_cluster.MASTER.pid() is None
    assert spark_cluster.WORKER.pid() is None
    assert not spark_cluster.MASTER.pid_file.exists()
    assert not spark_cluster.WORKER.pid_file.exists()
    assert not port_open(ports.master)
    assert not port_open(ports.worker)
    assert spark_cluster.master_state(ports, timeout=1.0) is None
