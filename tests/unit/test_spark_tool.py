"""tools/spark_cluster.py: the pure parts (the pom, the command lines, the jar filtering, the code zip).
The cluster itself runs in tests/api/test_spark_cluster.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from tests.helpers import ROOT, load_tool

spark_cluster = load_tool("spark_cluster")

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
HOME = Path("/opt/pyspark")


def test_pom_asks_for_the_kafka_connector_and_pins_the_plugin() -> None:
    root = ET.fromstring(spark_cluster.render_pom())
    deps = [
        (
            d.findtext("m:groupId", namespaces=POM_NS),
            d.findtext("m:artifactId", namespaces=POM_NS),
            d.findtext("m:version", namespaces=POM_NS),
        )
        for d in root.findall("m:dependencies/m:dependency", POM_NS)
    ]
    assert deps == [("org.apache.spark", "spark-sql-kafka-0-10_2.12", spark_cluster.KAFKA_CONNECTOR_VERSION)]
    assert root.findtext("m:packaging", namespaces=POM_NS) == "pom"
    plugin = root.find("m:build/m:plugins/m:plugin", POM_NS)
    assert plugin is not None
    assert plugin.findtext("m:artifactId", namespaces=POM_NS) == "maven-dependency-plugin"
    assert plugin.findtext("m:version", namespaces=POM_NS) == spark_cluster.toolkit.DEPENDENCY_PLUGIN_VERSION == "3.6.1"


def test_connector_is_of_the_pyspark_maintenance_line() -> None:
    assert spark_cluster.KAFKA_CONNECTOR_VERSION.split(".")[:2] == spark_cluster.SPARK_VERSION.split(".")[:2]
    pinned = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert f"pyspark=={spark_cluster.SPARK_VERSION}" in pinned


@pytest.mark.parametrize(
    ("file_name", "artifact"),
    [
        ("kafka-clients-3.4.1.jar", "kafka-clients"),
        ("spark-sql-kafka-0-10_2.12-3.5.7.jar", "spark-sql-kafka-0-10_2.12"),
        ("spark-token-provider-kafka-0-10_2.12-3.5.7.jar", "spark-token-provider-kafka-0-10_2.12"),
        ("scala-library-2.12.18.jar", "scala-library"),
        ("commons-pool2-2.11.1.jar", "commons-pool2"),
        ("commons-pool-1.5.4.jar", "commons-pool"),
        ("zstd-jni-1.5.5-4.jar", "zstd-jni"),
        ("hadoop-client-runtime-3.3.4.jar", "hadoop-client-runtime"),
        ("jsr305-3.0.0.jar", "jsr305"),
        ("no-version.jar", "no-version"),
    ],
)
def test_jar_artifact_strips_the_version(file_name: str, artifact: str) -> None:
    assert spark_cluster.jar_artifact(file_name) == artifact


def test_jars_already_in_pyspark_are_left_out_whatever_their_version() -> None:
    resolved = [
        "commons-logging-1.1.3.jar",
        "commons-pool2-2.11.1.jar",
        "hadoop-client-runtime-3.3.4.jar",
        "kafka-clients-3.4.1.jar",
        "scala-library-2.12.18.jar",
        "slf4j-api-1.7.36.jar",
        "snappy-java-1.1.8.4.jar",
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
        "spark-tags_2.12-3.5.7.jar",
        "spark-token-provider-kafka-0-10_2.12-3.5.7.jar",
        "pom.xml",
    ]
    shipped = [
        "commons-logging-1.1.3.jar",
        "commons-pool-1.5.4.jar",
        "hadoop-client-runtime-3.3.4.jar",
        "scala-library-2.12.18.jar",
        "slf4j-api-2.0.7.jar",
        "snappy-java-1.1.10.5.jar",
        "spark-core_2.12-3.5.9.jar",
        "spark-tags_2.12-3.5.9.jar",
    ]
    assert spark_cluster.jars_to_add(resolved, shipped) == [
        "commons-pool2-2.11.1.jar",
        "kafka-clients-3.4.1.jar",
        "spark-sql-kafka-0-10_2.12-3.5.7.jar",
        "spark-token-provider-kafka-0-10_2.12-3.5.7.jar",
    ]


def test_ports_default_and_come_from_the_environment() -> None:
    ports = spark_cluster.Ports.from_env({})
    assert (ports.master, ports.master_webui, ports.worker, ports.worker_webui) == (17077, 17080, 17078, 17081)
    assert ports.master_url == "spark://127.0.0.1:17077"
    assert ports.master_json_url == "http://127.0.0.1:17080/json/"
    other = spark_cluster.Ports.from_env({"AMS_SPARK_MASTER_PORT": "17177", "AMS_SPARK_WORKER_WEBUI_PORT": "17181"})
    assert (other.master, other.worker_webui) == (17177, 17181)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AMS_SPARK_MASTER_PORT": "x"}, "is not a TCP port"),
        ({"AMS_SPARK_MASTER_PORT": "70000"}, "is not a TCP port"),
        ({"AMS_SPARK_MASTER_WEBUI_PORT": "8080"}, "other tooling"),
        ({"AMS_SPARK_WORKER_PORT": "19092"}, "other tooling"),
        ({"AMS_SPARK_WORKER_PORT": "18082"}, "other tooling"),
        ({"AMS_SPARK_WORKER_PORT": "31000"}, "other tooling"),
        ({"AMS_SPARK_WORKER_PORT": "17077"}, "must differ"),
    ],
)
def test_bad_ports_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(spark_cluster.SparkError, match=message):
        spark_cluster.Ports.from_env(env)


def test_default_ports_avoid_the_other_tooling() -> None:
    used = [
        *(getattr(spark_cluster.Ports(), field) for field in ("master", "master_webui", "worker", "worker_webui")),
        spark_cluster.DRIVER_PORT,
        spark_cluster.DRIVER_BLOCK_MANAGER_PORT,
        spark_cluster.BLOCK_MANAGER_PORT,
    ]
    ranges = [range(p, p + spark_cluster.PORT_RETRIES + 1) for p in used[4:]]
    for port in [*used[:4], *(p for r in ranges for p in r)]:
        assert port not in spark_cluster.RESERVED_PORTS
        assert not 20000 <= port < 50000
    assert len({p for r in ranges for p in r}) == sum(len(r) for r in ranges)  # the retry ranges do not overlap
    assert not set(used[:4]) & {p for r in ranges for p in r}


def test_daemon_command_lines() -> None:
    ports = spark_cluster.Ports()
    assert spark_cluster.master_argv(HOME, ports) == [
        "/opt/pyspark/bin/spark-class",
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        "17077",
        "--webui-port",
        "17080",
    ]
    assert spark_cluster.worker_argv(HOME, ports) == [
        "/opt/pyspark/bin/spark-class",
        "org.apache.spark.deploy.worker.Worker",
        "--host",
        "127.0.0.1",
        "--port",
        "17078",
        "--webui-port",
        "17081",
        "--cores",
        "1",
        "--memory",
        "1g",
        "--work-dir",
        str(spark_cluster.WORK_DIR),
        "spark://127.0.0.1:17077",
    ]


def test_submit_command_line() -> None:
    argv = spark_cluster.submit_argv(
        HOME,
        Path("/repo/spark/jobs/usage_report.py"),
        ["--day", "2026-11-21"],
        ports=spark_cluster.Ports(),
        jars=[Path("/j/a.jar"), Path("/j/b.jar")],
        py_files=Path("/c/spark.zip"),
        conf={"spark.executor.memory": "512m"},
    )
    assert argv[:9] == [
        "/opt/pyspark/bin/spark-submit",
        "--master",
        "spark://127.0.0.1:17077",
        "--deploy-mode",
        "client",
        "--py-files",
        "/c/spark.zip",
        "--jars",
        "/j/a.jar,/j/b.jar",
    ]
    assert argv[-3:] == ["/repo/spark/jobs/usage_report.py", "--day", "2026-11-21"]
    confs = dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv[:-3]) if arg == "--conf")
    assert confs["spark.ui.enabled"] == "false"
    assert confs["spark.driver.host"] == confs["spark.driver.bindAddress"] == "127.0.0.1"
    assert confs["spark.executor.memory"] == "512m"
    bare = spark_cluster.submit_argv(HOME, Path("/x.py"), [], ports=spark_cluster.Ports(), jars=[], py_files=None)
    assert "--jars" not in bare
    assert "--py-files" not in bare
    assert bare[-1] == "/x.py"


def test_java_options_reach_the_daemons_drivers_and_executors_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's quick JVMs (tests/conftest.py); unset, Spark's JVMs are left as they are."""

    def confs() -> dict[str, str]:
        argv = spark_cluster.submit_argv(HOME, Path("/x.py"), [], ports=spark_cluster.Ports(), jars=[], py_files=None)
        return dict(argv[i + 1].split("=", 1) for i, arg in enumerate(argv) if arg == "--conf")

    monkeypatch.setenv(spark_cluster.JAVA_OPTIONS_ENV, "-XX:TieredStopAtLevel=1")
    assert spark_cluster.process_env(HOME, "/py", {})["SPARK_DAEMON_JAVA_OPTS"] == "-XX:TieredStopAtLevel=1"
    assert (
        confs()["spark.driver.extraJavaOptions"]
        == confs()["spark.executor.extraJavaOptions"]
        == "-XX:TieredStopAtLevel=1"
    )
    monkeypatch.setenv(spark_cluster.JAVA_OPTIONS_ENV, "")
    assert "SPARK_DAEMON_JAVA_OPTS" not in spark_cluster.process_env(HOME, "/py", {})
    assert not {"spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"} & set(confs())


def test_process_env_keeps_everything_on_loopback_and_under_the_cache() -> None:
    env = spark_cluster.process_env(HOME, "/venv/bin/python", {"PATH": "/usr/bin", "SPARK_HOME": "/elsewhere"})
    assert env["PATH"] == "/usr/bin"
    assert env["SPARK_HOME"] == "/opt/pyspark"
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["SPARK_WORKER_DIR"] == str(spark_cluster.WORK_DIR)
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == "/venv/bin/python"
    for key in ("SPARK_WORKER_DIR", "SPARK_CONF_DIR", "SPARK_LOCAL_DIRS"):
        assert Path(env[key]).is_relative_to(ROOT / ".cache" / "spark")


def test_job_script_names_and_paths(tmp_path: Path) -> None:
    (tmp_path / "usage_report.py").write_text("")
    assert spark_cluster.job_script("usage_report", tmp_path) == (tmp_path / "usage_report.py").resolve()
    own = tmp_path / "mine.py"
    own.write_text("")
    assert spark_cluster.job_script(str(own), tmp_path) == own.resolve()
    with pytest.raises(spark_cluster.SparkError, match="no job file"):
        spark_cluster.job_script("archive", tmp_path)
    with pytest.raises(spark_cluster.SparkError, match="neither"):
        spark_cluster.job_script("../etc/passwd", tmp_path)


def test_cluster_alive_wants_our_worker_alive() -> None:
    worker = {"host": "127.0.0.1", "port": 17078, "state": "ALIVE"}
    assert spark_cluster.cluster_alive({"status": "ALIVE", "workers": [worker]}, 17078)
    assert not spark_cluster.cluster_alive({"status": "ALIVE", "workers": [{**worker, "state": "DEAD"}]}, 17078)
    assert not spark_cluster.cluster_alive({"status": "ALIVE", "workers": [worker]}, 17178)
    assert not spark_cluster.cluster_alive({"status": "STANDBY", "workers": [worker]}, 17078)
    assert not spark_cluster.cluster_alive({"status": "ALIVE", "workers": []}, 17078)


def test_py_files_zip_holds_the_package_and_is_rewritten_only_on_change(tmp_path: Path) -> None:
    package = tmp_path / "spark"
    (package / "jobs" / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "jobs" / "__init__.py").write_text("")
    (package / "jobs" / "usage_report.py").write_text("X = 1\n")
    (package / "jobs" / "__pycache__" / "usage_report.cpython-311.pyc").write_bytes(b"\0")
    target = tmp_path / "out" / "spark.zip"
    assert spark_cluster.build_py_files(package, target) == target
    with zipfile.ZipFile(target) as zf:
        assert sorted(zf.namelist()) == ["spark/__init__.py", "spark/jobs/__init__.py", "spark/jobs/usage_report.py"]
    first = target.stat().st_mtime_ns
    target.touch()
    touched = target.stat().st_mtime_ns
    spark_cluster.build_py_files(package, target)
    assert target.stat().st_mtime_ns == touched  # same content: left alone
    assert touched >= first
    (package / "jobs" / "usage_report.py").write_text("X = 2\n")
    spark_cluster.build_py_files(package, target)
    with zipfile.ZipFile(target) as zf:
        assert zf.read("spark/jobs/usage_report.py") == b"X = 2\n"
    assert spark_cluster.build_py_files(tmp_path / "nothing", tmp_path / "n.zip") is None
