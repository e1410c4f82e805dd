"""Testinfra checks for the spark role: a master and a worker in one container (run by `molecule verify`).

The container shares the host's network, so the master's web UI is queried from this machine.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

VERSION = "3.5.9"
USER = "spark"
ADDRESS = "127.0.0.1"
MASTER_PORT = 27077
MASTER_WEBUI_PORT = 28090
WORKER_PORT = 27078
WORKER_WEBUI_PORT = 28091
MASTER_URL = f"spark://{ADDRESS}:{MASTER_PORT}"
VENV = f"/opt/spark/pyspark-{VERSION}"
SPARK_HOME = "/opt/spark/current/lib/python3.11/site-packages/pyspark"
SERVICES = ("spark-master", "spark-worker")
JOB = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("molecule-sum").getOrCreate()
total = spark.sparkContext.parallelize(range(1, 1001), 2).sum()
print(f"SUM={total}")
spark.stop()
"""


def _journal(host, service: str) -> str:
    return host.run(f"journalctl -u {service} --no-pager -n 60").stdout


def _is_listening(host, port: int) -> bool:
    # the JVM listens on an IPv6 socket: ss shows 127.0.0.1 as [::ffff:127.0.0.1]
    return any(host.socket(f"tcp://{address}:{port}").is_listening for address in (ADDRESS, f"::ffff:{ADDRESS}"))


def _master_state(timeout: float = 60.0) -> dict:
    """The master's /json/ document, once it lists an ALIVE worker (or whatever it says at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"http://{ADDRESS}:{MASTER_WEBUI_PORT}/json/", timeout=10) as response:
            state = json.load(response)
        if any(w["state"] == "ALIVE" for w in state.get("workers", [])) or time.monotonic() > deadline:
            return state
        time.sleep(2)


@pytest.mark.parametrize("service", SERVICES)
def test_service_is_running_and_enabled(host, service):
    unit = host.service(service)
    assert unit.is_running, _journal(host, service)
    assert unit.is_enabled


@pytest.mark.parametrize(
    ("service", "port"),
    [
        ("spark-master", MASTER_PORT),
        ("spark-master", MASTER_WEBUI_PORT),
        ("spark-worker", WORKER_PORT),
        ("spark-worker", WORKER_WEBUI_PORT),
    ],
)
def test_port_is_listening(host, service, port):
    assert _is_listening(host, port), _journal(host, service)


@pytest.mark.parametrize("service", SERVICES)
def test_daemon_runs_as_the_spark_user_in_the_foreground(host, service):
    main_pid = int(host.check_output(f"systemctl show -p MainPID --value {service}"))
    process = host.process.get(pid=main_pid)
    assert process.user == USER
    assert process.comm == "java"


def test_master_lists_one_alive_worker():
    state = _master_state()
    assert state["status"] == "ALIVE"
    workers = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 1, state["workers"]
    assert (workers[0]["host"], workers[0]["port"], workers[0]["cores"]) == (ADDRESS, WORKER_PORT, 1)


def test_pyspark_is_installed_in_a_versioned_virtualenv(host):
    assert host.file(VENV).is_directory
    current = host.file("/opt/spark/current")
    assert current.is_symlink
    assert current.linked_to == VENV
    spark_class = host.file(f"{SPARK_HOME}/bin/spark-class")
    assert spark_class.is_file
    assert spark_class.mode & 0o111
    assert host.file(f"{SPARK_HOME}/jars").is_directory


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        ("/etc/spark", "root", "root", 0o755),
        ("/etc/spark/spark-defaults.conf", "root", "root", 0o644),
        ("/etc/spark/spark-env.sh", "root", "root", 0o644),
        ("/etc/systemd/system/spark-master.service", "root", "root", 0o644),
        ("/etc/systemd/system/spark-worker.service", "root", "root", 0o644),
        ("/var/lib/spark", USER, USER, 0o750),
        ("/var/lib/spark/work", USER, USER, 0o750),
        ("/var/lib/spark/logs", USER, USER, 0o750),
        ("/opt/spark", "root", "root", 0o755),
    ],
)
def test_paths_have_owner_and_mode(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_rendered_files_are_managed(host):
    for path in (
        "/etc/spark/spark-defaults.conf",
        "/etc/spark/spark-env.sh",
        "/etc/systemd/system/spark-master.service",
        "/etc/systemd/system/spark-worker.service",
    ):
        assert "Ansible managed" in host.file(path).content_string, path
    defaults = host.file("/etc/spark/spark-defaults.conf").content_string
    assert MASTER_URL in defaults
    worker_unit = host.file("/etc/systemd/system/spark-worker.service").content_string
    for line in (f"User={USER}", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict"):
        assert line in worker_unit.splitlines()
    assert f"--cores 1 --memory 1g {MASTER_URL}" in worker_unit


def test_a_job_runs_on_the_cluster(host):
    host.run("install -d -m 0755 /tmp/molecule-spark")
    write = host.run(f"cat > /tmp/molecule-spark/sum_job.py <<'EOF'\n{JOB}EOF\n")
    assert write.rc == 0, write.stderr
    result = host.run(
        f"SPARK_HOME={SPARK_HOME} SPARK_CONF_DIR=/etc/spark {SPARK_HOME}/bin/spark-submit"
        f" --master {MASTER_URL} --conf spark.ui.enabled=false"
        f" --conf spark.driver.host={ADDRESS} --conf spark.driver.bindAddress={ADDRESS}"
        " --conf spark.driver.port=28096 --conf spark.blockManager.port=28097"
        " --conf spark.executor.memory=512m --conf spark.cores.max=1"
        " /tmp/molecule-spark/sum_job.py"
    )
    assert result.rc == 0, result.stdout + result.stderr[-4000:]
    assert "SUM=500500" in result.stdout.splitlines(), result.stdout + result.stderr[-4000:]


@pytest.mark.parametrize("path", ["/etc", "/usr", "/usr/lib/jvm", "/opt"])
def test_no_collateral_damage(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert directory.user == "root"
    assert directory.group == "root"
