#!/usr/bin/env python3
"""A Spark standalone cluster (one master, one worker) on loopback, from the pyspark wheel's own scripts.

    python tools/spark_cluster.py jars            # the Kafka connector and what it needs (Maven) -> .cache/spark/jars
    python tools/spark_cluster.py up              # master spark://127.0.0.1:17077 and one worker, in the background
    python tools/spark_cluster.py status
    python tools/spark_cluster.py down
    python tools/spark_cluster.py submit JOB ...  # spark-submit spark/jobs/JOB.py (or a .py path) in client mode

Everything lives under ``.cache/spark/`` of the checkout: pid files and logs of the master and the
worker, the worker's directory (``work/``, the executors' logs), the jars, and ``spark.zip`` (the
repository's ``spark/`` package, shipped to the executors with ``--py-files``). SPARK_HOME is the
installed pyspark package (it has ``bin/spark-class``, ``bin/spark-submit`` and ``jars/``). The module
is importable from tests: ``start_cluster()``, ``stop_cluster()``, ``submit()``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import toolkit

# --- versions -------------------------------------------------------------------------------
SPARK_VERSION = "3.5.9"  # the pyspark wheel of requirements-dev.txt
SCALA_BINARY = "2.12"
#: Maven Central has the Kafka connector of Spark 3.5 up to 3.5.7 (no 3.5.8/3.5.9 there): the
#: connector of the same 3.5 maintenance line, whose internal Spark API is the same.
KAFKA_CONNECTOR_VERSION = "3.5.7"
KAFKA_CONNECTOR = ("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", KAFKA_CONNECTOR_VERSION)

# --- ports ----------------------------------------------------------------------------------
HOST = "127.0.0.1"
DEFAULT_MASTER_PORT = 17077
DEFAULT_MASTER_WEBUI_PORT = 17080
DEFAULT_WORKER_PORT = 17078
DEFAULT_WORKER_WEBUI_PORT = 17081
#: The ports of the driver (spark-submit) and of the executors' block managers; Spark tries the
#: next ones (spark.port.maxRetries) when taken, so that two drivers can run at once.
DRIVER_PORT = 17090
DRIVER_BLOCK_MANAGER_PORT = 17100
BLOCK_MANAGER_PORT = 17110
PORT_RETRIES = 8
#: Ports other tooling of this repository uses (tools/services.py, the test servers, `make run`).
RESERVED_PORTS = frozenset({8080, 8085, 8443, 8444, 12181, 19092, 27018, *range(18081, 18090), *range(18181, 18190)})
WORKER_CORES = 1
WORKER_MEMORY = "1g"
#: JVM options for the cluster's daemons, its drivers and their executors, when this variable
#: names some: the test suite's (tests/conftest.py), whose jobs last seconds, ask for JVMs that
#: start cheaply. Unset (`make spark-up`, benchmarks/spark_jobs.py), Spark's JVMs are as Java makes them.
JAVA_OPTIONS_ENV = "AMS_SPARK_JAVA_OPTIONS"


def java_options() -> str:
    return os.environ.get(JAVA_OPTIONS_ENV, "").strip()


def java_options_conf() -> dict[str, str]:
    """The driver's and the executors' ``extraJavaOptions`` from ``JAVA_OPTIONS_ENV`` (none when unset)."""
    options = java_options()
    if not options:
        return {}
    return {"spark.driver.extraJavaOptions": options, "spark.executor.extraJavaOptions": options}


# --- places ---------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
SPARK_DIR = ROOT / ".cache" / "spark"
JARS_DIR = SPARK_DIR / "jars"
MAVEN_DIR = SPARK_DIR / "maven"
WORK_DIR = SPARK_DIR / "work"
CONF_DIR = SPARK_DIR / "conf"
PY_FILES = SPARK_DIR / "spark.zip"
PACKAGE_DIR = ROOT / "spark"
JOBS_DIR = PACKAGE_DIR / "jobs"
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"

# --- bounds ---------------------------------------------------------------------------------
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
MAVEN_TIMEOUT = 900.0


class SparkError(RuntimeError):
    """The cluster could not be set up, started or stopped; the message says why."""


def say(message: str) -> None:
    print(f"spark: {message}", file=sys.stderr, flush=True)


# ============================================================================================
# configuration (pure: tested in tests/unit/test_spark_tool.py)
# ============================================================================================
@dataclass(frozen=True)
class Ports:
    master: int = DEFAULT_MASTER_PORT
    master_webui: int = DEFAULT_MASTER_WEBUI_PORT
    worker: int = DEFAULT_WORKER_PORT
    worker_webui: int = DEFAULT_WORKER_WEBUI_PORT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Ports:
        env = os.environ if env is None else env

        def port(name: str, default: int) -> int:
            value = toolkit.env_port(env, name, default, SparkError)  # the defaults are none of these
            if value in RESERVED_PORTS or 20000 <= value < 50000:
                raise SparkError(f"{name}={value} is a port other tooling of the repository uses")
            return value

        ports = cls(
            master=port("AMS_SPARK_MASTER_PORT", DEFAULT_MASTER_PORT),
            master_webui=port("AMS_SPARK_MASTER_WEBUI_PORT", DEFAULT_MASTER_WEBUI_PORT),
            worker=port("AMS_SPARK_WORKER_PORT", DEFAULT_WORKER_PORT),
            worker_webui=port("AMS_SPARK_WORKER_WEBUI_PORT", DEFAULT_WORKER_WEBUI_PORT),
        )
        if len({ports.master, ports.master_webui, ports.worker, ports.worker_webui}) != 4:
            raise SparkError(f"the Spark ports must differ: {ports}")
        return ports

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master}"

    @property
    def master_json_url(self) -> str:
        return f"http://{HOST}:{self.master_webui}/json/"


def render_pom() -> str:
    """The pom whose runtime dependencies are the Kafka connector and what it needs."""
    return toolkit.render_pom(
        "spark-kafka-jars",
        SPARK_VERSION,
        f"Written by tools/spark_cluster.py: the Kafka source of Spark {KAFKA_CONNECTOR[2]} and its dependencies.",
        [KAFKA_CONNECTOR],
    )


_JAR_NAME = re.compile(r"^(?P<name>.+?)-(?P<version>\d+(?:\.\d+)+[^/]*)\.jar$")


def jar_artifact(file_name: str) -> str:
    """``kafka-clients-3.4.1.jar`` -> ``kafka-clients``; ``spark-sql-kafka-0-10_2.12-3.5.7.jar`` ->
    ``spark-sql-kafka-0-10_2.12`` (the version is the first ``-`` part of the form digits.digits...)."""
    match = _JAR_NAME.match(file_name)
    if match is None:
        return file_name.removesuffix(".jar")
    return match["name"]


def jars_to_add(resolved: Iterable[str], shipped: Iterable[str]) -> list[str]:
    """The resolved jar files whose artifact pyspark does not ship already (in any version: the
    one in pyspark's jars/ wins, two versions of a class on one classpath are trouble)."""
    have = {jar_artifact(name) for name in shipped}
    return sorted(name for name in resolved if name.endswith(".jar") and jar_artifact(name) not in have)


def process_env(spark_home: Path, python: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of spark-class and spark-submit: everything on loopback, state under .cache/spark."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "SPARK_HOME": str(spark_home),
            "SPARK_CONF_DIR": str(CONF_DIR),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_WORKER_DIR": str(WORK_DIR),
            # the applications' directories (executor logs, shipped files) go after a day
            "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=86400",
            "SPARK_LOCAL_DIRS": str(SPARK_DIR / "tmp"),
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
        }
    )
    options = java_options()
    if options:  # the master's and the worker's own JVMs
        env["SPARK_DAEMON_JAVA_OPTS"] = options
    return env


def master_argv(spark_home: Path, ports: Ports) -> list[str]:
    return [
        str(spark_home / "bin" / "spark-class"),
        "org.apache.spark.deploy.master.Master",
        "--host",
        HOST,
        "--port",
        str(ports.master),
        "--webui-port",
        str(ports.master_webui),
    ]


def worker_argv(spark_home: Path, ports: Ports) -> list[str]:
    return [
        str(spark_home / "bin" / "spark-class"),
        "org.apache.spark.deploy.worker.Worker",
        "--host",
        HOST,
        "--port",
        str(ports.worker),
        "--webui-port",
        str(ports.worker_webui),
        "--cores",
        str(WORKER_CORES),
        "--memory",
        WORKER_MEMORY,
        "--work-dir",
        str(WORK_DIR),
        ports.master_url,
    ]


def submit_argv(
    spark_home: Path,
    script: Path,
    args: Sequence[str],
    *,
    ports: Ports,
    jars: Sequence[Path],
    py_files: Path | None,
    conf: Mapping[str, str] | None = None,
) -> list[str]:
    """spark-submit of ``script`` in client mode to the standalone master."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(DRIVER_BLOCK_MANAGER_PORT),
        "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.port.maxRetries": str(PORT_RETRIES),
        **java_options_conf(),
        **(conf or {}),
    }
    argv = [
        str(spark_home / "bin" / "spark-submit"),
        "--master",
        ports.master_url,
        "--deploy-mode",
        "client",
    ]
    if py_files is not None:
        argv += ["--py-files", str(py_files)]
    if jars:
        argv += ["--jars", ",".join(str(jar) for jar in jars)]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, str(script), *args]


def job_script(job: str, jobs_dir: Path = JOBS_DIR) -> Path:
    """``usage_report`` -> spark/jobs/usage_report.py; a path to a ``.py`` file stays itself."""
    if job.endswith(".py"):
        path = Path(job)
    elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", job):
        path = jobs_dir / f"{job}.py"
    else:
        raise SparkError(f"{job!r} is neither a job name (spark/jobs/NAME.py) nor a .py file")
    if not path.is_file():
        raise SparkError(f"no job file {path}")
    return path.resolve()


def cluster_alive(state: Mapping[str, object], worker_port: int) -> bool:
    """Whether the master's ``/json/`` answer lists it ALIVE with our worker ALIVE."""
    if state.get("status") != "ALIVE":
        return False
    workers = state.get("workers")
    if not isinstance(workers, list):
        return False
    return any(
        isinstance(w, dict) and w.get("state") == "ALIVE" and w.get("port") == worker_port and w.get("host") == HOST
        for w in workers
    )


# ============================================================================================
# places of the installation
# ============================================================================================
def spark_home() -> Path:
    """The pyspark package directory: AMS_SPARK_HOME, else the pyspark this Python imports, else
    the one in the checkout's .venv."""
    override = os.environ.get("AMS_SPARK_HOME", "").strip()
    candidates: list[Path] = [Path(override)] if override else []
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent)
    candidates += sorted((ROOT / ".venv" / "lib").glob("python3*/site-packages/pyspark"))
    for home in candidates:
        if (home / "bin" / "spark-class").is_file() and (home / "jars").is_dir():
            return home
    raise SparkError("pyspark not found (make venv; or point AMS_SPARK_HOME at a Spark installation)")


def python_exe() -> str:
    """The Python of drivers and executors: the one with pyspark (the checkout's .venv)."""
    return str(VENV_PYTHON) if VENV_PYTHON.exists() else sys.executable


def _which(command: str) -> str | None:
    return shutil.which(command)


def _locked() -> contextlib.AbstractContextManager[None]:
    """One tools/spark_cluster.py up/down/jars at a time."""
    return toolkit.locked(SPARK_DIR, SparkError)


# ============================================================================================
# jars
# ============================================================================================
def _jars_marker() -> Path:
    return JARS_DIR / ".installed"


def _jars_stamp(home: Path) -> str:
    shipped = sorted(p.name for p in (home / "jars").glob("*.jar"))
    return render_pom() + "\n<!-- pyspark jars: " + " ".join(shipped) + " -->\n"


def jar_files() -> list[Path]:
    return sorted(JARS_DIR.glob("*.jar"))


def install_jars(home: Path | None = None) -> list[Path]:
    """The Kafka connector's jars (minus what pyspark ships) into .cache/spark/jars; skipped when
    up to date. Returns the jar files."""
    home = home or spark_home()
    stamp = _jars_stamp(home)
    marker = _jars_marker()
    if marker.exists() and marker.read_text() == stamp and jar_files():
        return jar_files()
    mvn = _which("mvn")
    if mvn is None:
        raise SparkError("mvn not found (apt-get install maven)")
    say(f"resolving {':'.join(KAFKA_CONNECTOR)} with Maven into {JARS_DIR}")
    MAVEN_DIR.mkdir(parents=True, exist_ok=True)
    pom = MAVEN_DIR / "pom.xml"
    pom.write_text(render_pom())
    staging = MAVEN_DIR / "resolved"
    toolkit.copy_dependencies(mvn, pom, staging, timeout=MAVEN_TIMEOUT, error=SparkError)
    resolved = sorted(p.name for p in staging.glob("*.jar"))
    wanted = jars_to_add(resolved, (p.name for p in (home / "jars").glob("*.jar")))
    if not any(name.startswith(f"{KAFKA_CONNECTOR[1]}-") for name in wanted):
        raise SparkError(f"Maven finished but {staging} lacks the {KAFKA_CONNECTOR[1]} jar")
    fresh = JARS_DIR.with_name("jars.tmp")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    for name in wanted:
        shutil.copy2(staging / name, fresh / name)
    shutil.rmtree(JARS_DIR, ignore_errors=True)
    fresh.rename(JARS_DIR)
    shutil.rmtree(staging, ignore_errors=True)
    _jars_marker().write_text(stamp)
    skipped = sorted(set(resolved) - set(wanted))
    say(f"{len(wanted)} jars ({', '.join(wanted)}); already in pyspark: {', '.join(skipped) or 'none'}")
    return jar_files()


# ============================================================================================
# code shipped to the executors
# ============================================================================================
def build_py_files(package: Path = PACKAGE_DIR, target: Path = PY_FILES) -> Path | None:
    """``spark/`` as a zip (entries ``spark/...``) for --py-files; None when there is no package.
    Rewritten only when its content changes."""
    if not (package / "__init__.py").is_file():
        return None
    files = sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(".zip.tmp")
    with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            info = zipfile.ZipInfo(str(path.relative_to(package.parent)), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, path.read_bytes())
    if target.exists() and target.read_bytes() == staging.read_bytes():
        staging.unlink()
    else:
        staging.replace(target)
    return target


# ============================================================================================
# processes
# ============================================================================================
@dataclass(frozen=True)
class Daemon:
    name: str
    main_class: str

    @property
    def pid_file(self) -> Path:
        return SPARK_DIR / f"{self.name}.pid"

    @property
    def log(self) -> Path:
        return SPARK_DIR / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        return toolkit.running(self.pid_file, self.main_class)


MASTER = Daemon("master", "org.apache.spark.deploy.master.Master")
WORKER = Daemon("worker", "org.apache.spark.deploy.worker.Worker")
DAEMONS = (MASTER, WORKER)


def _spawn(daemon: Daemon, argv: Sequence[str], env: Mapping[str, str]) -> int:
    return toolkit.spawn(
        argv, log=daemon.log, pid_file=daemon.pid_file, started_by="tools/spark_cluster.py", env=env, cwd=SPARK_DIR
    )


def _terminate(daemon: Daemon, timeout: float = STOP_TIMEOUT) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns whether it was running."""
    return toolkit.terminate(daemon.name, daemon.pid_file, daemon.main_class, timeout, say)


def master_state(ports: Ports, timeout: float = 2.0) -> dict[str, object] | None:
    """The master's ``/json/`` answer, None when it does not answer."""
    try:
        with urllib.request.urlopen(ports.master_json_url, timeout=timeout) as response:
            state = json.loads(response.read())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def cluster_ready(ports: Ports) -> bool:
    state = master_state(ports)
    return state is not None and cluster_alive(state, ports.worker)


def _wait(what: str, probe: Callable[[], bool], daemon: Daemon, pid: int) -> None:
    toolkit.wait_until(
        what, probe, timeout=READY_TIMEOUT, pid=pid, marker=daemon.main_class, log=daemon.log, error=SparkError
    )


def start_cluster(ports: Ports | None = None) -> Ports:
    """Start the master and the worker unless they run; wait until the master lists the worker ALIVE."""
    ports = ports or Ports.from_env()
    home = spark_home()
    with _locked():
        for directory in (WORK_DIR, CONF_DIR, SPARK_DIR / "tmp", SPARK_DIR / "logs"):
            directory.mkdir(parents=True, exist_ok=True)
        env = process_env(home, python_exe())
        started = time.monotonic()
        if MASTER.pid() is not None and WORKER.pid() is not None and cluster_ready(ports):
            say(f"already up: {ports.master_url}")
            return ports
        master = MASTER.pid()
        if master is None:
            master = _spawn(MASTER, master_argv(home, ports), env)
            say(f"master started (pid {master}), log {MASTER.log}")
        _wait("master", lambda: master_state(ports) is not None, MASTER, master)
        worker = WORKER.pid()
        if worker is None:
            worker = _spawn(WORKER, worker_argv(home, ports), env)
            say(f"worker started (pid {worker}), log {WORKER.log}")
        _wait("worker", lambda: cluster_ready(ports), WORKER, worker)
        say(f"up: {ports.master_url} (web UI http://{HOST}:{ports.master_webui}) in {time.monotonic() - started:.1f}s")
    return ports


def stop_cluster() -> None:
    with _locked():
        for daemon in (WORKER, MASTER):
            if _terminate(daemon):
                say(f"{daemon.name} stopped")


def status_lines(ports: Ports | None = None) -> list[str]:
    ports = ports or Ports.from_env()
    state = master_state(ports)
    lines = []
    for daemon, port, webui in ((MASTER, ports.master, ports.master_webui), (WORKER, ports.worker, ports.worker_webui)):
        pid = daemon.pid()
        text = "stopped" if pid is None else f"running (pid {pid})"
        if daemon is WORKER and pid is not None:
            text += ", ALIVE" if state is not None and cluster_alive(state, ports.worker) else ", NOT REGISTERED"
        lines.append(f"{daemon.name:<7} {HOST}:{port:<6} ui http://{HOST}:{webui:<6} {text}  log {daemon.log}")
    return lines


# ============================================================================================
# submit
# ============================================================================================
def submit(
    job: str,
    args: Sequence[str] = (),
    *,
    ports: Ports | None = None,
    conf: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> int:
    """spark-submit the job (a name under spark/jobs or a .py path) to the cluster; its exit status.
    Its output goes to this process's stdout and stderr."""
    ports = ports or Ports.from_env()
    home = spark_home()
    script = job_script(job)
    with _locked():
        jars = install_jars(home)
        py_files = build_py_files()
    if py_files is None:
        say(f"no {PACKAGE_DIR}/__init__.py: submitting without --py-files")
    argv = submit_argv(home, script, args, ports=ports, jars=jars, py_files=py_files, conf=conf)
    (SPARK_DIR / "tmp").mkdir(parents=True, exist_ok=True)
    say(" ".join(argv))
    try:
        return subprocess.run(
            argv, env=process_env(home, python_exe()), cwd=ROOT, check=False, timeout=timeout
        ).returncode
    except FileNotFoundError as exc:
        raise SparkError(f"{argv[0]} not found") from exc


# ============================================================================================
# command line
# ============================================================================================
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="spark_cluster.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("jars", help="the Kafka connector's jars from Maven Central into .cache/spark/jars")
    sub.add_parser("up", help="a master and a worker on loopback (skipped when running)")
    sub.add_parser("down", help="stop them")
    sub.add_parser("status", help="one line per daemon")
    sp = sub.add_parser("submit", help="spark-submit spark/jobs/JOB.py (or a .py file) in client mode")
    sp.add_argument("job", help="a job name under spark/jobs, or a path to a .py file")
    sp.add_argument("args", nargs=argparse.REMAINDER, help="the job's arguments")
    args = parser.parse_args(argv)

    try:
        if args.command == "jars":
            with _locked():
                for jar in install_jars():
                    print(jar)
        elif args.command == "up":
            start_cluster()
        elif args.command == "down":
            stop_cluster()
        elif args.command == "status":
            print("\n".join(status_lines()))
        elif args.command == "submit":
            return submit(args.job, args.args)
    except SparkError as exc:
        print(f"spark: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
