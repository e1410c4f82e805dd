#!/usr/bin/env python3
"""Install and run the servers the kafka backend needs, on loopback, for tests and development.

    python -m tools.services install       # apt packages, Kafka jars, the FerretDB binary (idempotent)
    python -m tools.services up            # ZooKeeper, Kafka and FerretDB (MongoDB wire protocol) in the background
    python -m tools.services status
    python -m tools.services down [--purge]
    python -m tools.services stop|start zookeeper|kafka|ferretdb|postgres

Everything lives under ``.cache/`` of the checkout (see docs/services.md). The module is importable
from tests: ``start_services()``, ``stop_services()``, ``stop_service()``, ``start_service()``. The
local cluster of AMS nodes on these servers is tools/cluster.py, which stands on this module (never
the other way round): stop it (``cluster.stop_cluster()``, ``make cluster-down``) before the services.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import toolkit

# --- versions -------------------------------------------------------------------------------
KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
SLF4J_VERSION = "1.7.36"  # the slf4j-api Kafka 3.9 uses; its reload4j binding gives the broker a log
FERRETDB_MODULE = "github.com/FerretDB/FerretDB"
FERRETDB_VERSION = "v1.24.0"
#: Debian packages, each with the file that shows it is installed.
APT_PACKAGES: dict[str, str] = {
    "zookeeper": "/usr/share/java/zookeeper.jar",
    "haproxy": "haproxy",
    "openssl": "openssl",
    "prometheus": "promtool",
    "prometheus-alertmanager": "amtool",
}

# --- ports and names ------------------------------------------------------------------------
HOST = "127.0.0.1"
DEFAULT_ZK_PORT = 12181
DEFAULT_KAFKA_PORT = 19092
DEFAULT_MONGO_PORT = 27018
KAFKA_ZNODE = "/ams-kafka"
#: FerretDB logs each command it lacks at warn (pymongo's endSessions on every close, among others).
FERRETDB_LOG_LEVEL = os.environ.get("AMS_SVC_FERRETDB_LOG_LEVEL", "warn")
#: FerretDB's storage: "pg" (the default), a PostgreSQL of this tool's own on AMS_SVC_PG_PORT
#: (Debian's postgresql), closer to MongoDB under load; or "sqlite", no other server, but it scans
#: collections on every query (docs/services.md).
FERRETDB_HANDLERS = ("pg", "sqlite")
DEFAULT_PG_PORT = 15432

# --- places ---------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
KAFKA_HOME = CACHE / f"kafka-{KAFKA_VERSION}"
KAFKA_LIB = KAFKA_HOME / "lib"
BIN_DIR = CACHE / "bin"
FERRETDB_BIN = BIN_DIR / "ferretdb"
SERVICES_DIR = CACHE / "services"
ENV_FILE = SERVICES_DIR / "env"
ZOOKEEPER_JAR = Path(APT_PACKAGES["zookeeper"])
#: Where a Go installed from go.dev's archive lives (FerretDB is built with it), off the PATH.
GO_BIN_DIR = "/usr/local/go/bin"
#: The Prometheus JMX exporter javaagent (Maven Central), in the local Kafka and ZooKeeper as in the
#: appliance's (roles/prometheus, docs/monitoring.md), with the role's own configuration files.
JMX_EXPORTER_VERSION = "1.0.1"
JMX_EXPORTER_HOME = CACHE / f"jmx-exporter-{JMX_EXPORTER_VERSION}"
JMX_EXPORTER_JAR = JMX_EXPORTER_HOME / f"jmx_prometheus_javaagent-{JMX_EXPORTER_VERSION}.jar"
JMX_EXPORTER_CONFIGS = ROOT / "roles" / "prometheus" / "files"
KAFKA_METRICS_PORT = 17071
ZOOKEEPER_METRICS_PORT = 17000

# --- bounds ---------------------------------------------------------------------------------
READY_TIMEOUT = {"zookeeper": 45.0, "kafka": 90.0, "ferretdb": 45.0, "postgres": 45.0}
STOP_TIMEOUT = {"zookeeper": 15.0, "kafka": 40.0, "ferretdb": 15.0, "postgres": 30.0}
APT_TIMEOUT = 900.0
BUILD_TIMEOUT = 900.0


class ServiceError(RuntimeError):
    """A server could not be installed, started or stopped; the message says why."""


def say(message: str) -> None:
    print(f"services: {message}", file=sys.stderr, flush=True)


# ============================================================================================
# configuration (pure: rendered text, tested in tests/unit/test_services_tool.py)
# ============================================================================================
@dataclass(frozen=True)
class Ports:
    zookeeper: int = DEFAULT_ZK_PORT
    kafka: int = DEFAULT_KAFKA_PORT
    mongo: int = DEFAULT_MONGO_PORT

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Ports:
        env = os.environ if env is None else env

        def port(name: str, default: int) -> int:
            return toolkit.env_port(env, name, default, ServiceError)

        ports = cls(
            zookeeper=port("AMS_SVC_ZK_PORT", DEFAULT_ZK_PORT),
            kafka=port("AMS_SVC_KAFKA_PORT", DEFAULT_KAFKA_PORT),
            mongo=port("AMS_SVC_MONGO_PORT", DEFAULT_MONGO_PORT),
        )
        if len({ports.zookeeper, ports.kafka, ports.mongo}) != 3:
            raise ServiceError(f"the service ports must differ: {ports}")
        return ports


def connection_env(ports: Ports) -> dict[str, str]:
    """The settings an ``ams`` process (or a test) needs to reach the services."""
    return {
        "AMS_KAFKA_BOOTSTRAP_SERVERS": f"{HOST}:{ports.kafka}",
        "AMS_MONGO_URI": f"mongodb://{HOST}:{ports.mongo}",
        "AMS_ZOOKEEPER_HOSTS": f"{HOST}:{ports.zookeeper}",
        "AMS_KAFKA_ZNODE": KAFKA_ZNODE,
    }


def render_zoo_cfg(data_dir: Path, port: int) -> str:
    return "\n".join(
        [
            "# Written by tools/services.py: a standalone ZooKeeper on loopback for tests.",
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={data_dir}",
            f"clientPort={port}",
            f"clientPortAddress={HOST}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=24",
            "",
        ]
    )


#: What makes a broker a cluster of its own for tests: one partition, one replica of everything,
#: no topic made behind AMS's back, no wait before a group's first rebalance (here and in
#: tools/secure_services.py).
SINGLE_BROKER = (
    "num.partitions=1",
    "default.replication.factor=1",
    "offsets.topic.replication.factor=1",
    "offsets.topic.num.partitions=1",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "auto.create.topics.enable=false",
    "delete.topic.enable=true",
    "group.initial.rebalance.delay.ms=0",
)


def render_server_properties(
    log_dir: Path, kafka_port: int, zk_port: int, znode: str = KAFKA_ZNODE, broker_id: int = 0
) -> str:
    return "\n".join(
        [
            "# Written by tools/services.py: one Kafka broker (ZooKeeper mode) on loopback for tests.",
            f"broker.id={broker_id}",
            f"listeners=PLAINTEXT://{HOST}:{kafka_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{kafka_port}",
            f"log.dirs={log_dir}",
            f"zookeeper.connect={HOST}:{zk_port}{znode}",
            "zookeeper.connection.timeout.ms=30000",
            *SINGLE_BROKER,
            "log.retention.check.interval.ms=60000",
            "",
        ]
    )


def render_log4j(extra: Mapping[str, str] | None = None) -> str:
    """log4j 1 (reload4j) settings: warnings to stdout, which the tool sends to the service's log."""
    lines = [
        "log4j.rootLogger=WARN, stdout",
        "log4j.appender.stdout=org.apache.log4j.ConsoleAppender",
        "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout",
        "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n",
    ]
    lines += [f"log4j.logger.{name}={level}" for name, level in (extra or {}).items()]
    return "\n".join(lines) + "\n"


def render_pom() -> str:
    return toolkit.render_pom(
        "kafka-broker",
        KAFKA_VERSION,
        f"Written by tools/services.py: the jars of a Kafka {KAFKA_VERSION} broker.",
        [("org.apache.kafka", f"kafka_{SCALA_VERSION}", KAFKA_VERSION), ("org.slf4j", "slf4j-reload4j", SLF4J_VERSION)],
    )


# ============================================================================================
# processes
# ============================================================================================
def _spawn(
    argv: Sequence[str], *, log: Path, pid_file: Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> int:
    return toolkit.spawn(argv, log=log, pid_file=pid_file, started_by="tools/services.py", env=env, cwd=cwd)


def _terminate(name: str, pid_file: Path, marker: str, timeout: float) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns whether something was running."""
    return toolkit.terminate(name, pid_file, marker, timeout, say)


def _wait_until(what: str, ready: Callable[[], bool], *, timeout: float, pid: int, marker: str, log: Path) -> None:
    toolkit.wait_until(what, ready, timeout=timeout, pid=pid, marker=marker, log=log, error=ServiceError)


def _locked(directory: Path) -> contextlib.AbstractContextManager[None]:
    """One tools/services.py at a time per directory (two test sessions starting services at once)."""
    return toolkit.locked(directory, ServiceError)


def _run(
    argv: Sequence[str],
    *,
    timeout: float,
    what: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return toolkit.run(argv, timeout=timeout, what=what, error=ServiceError, env=env, cwd=cwd)


# ============================================================================================
# install
# ============================================================================================
def _present(probe: str) -> bool:
    return Path(probe).exists() if probe.startswith("/") else _which(probe) is not None


def _which(command: str) -> str | None:
    return toolkit.which(command, GO_BIN_DIR)


def missing_apt_packages(wanted: Mapping[str, str] | None = None) -> list[str]:
    wanted = APT_PACKAGES if wanted is None else wanted
    missing = [pkg for pkg, probe in wanted.items() if not _present(probe)]
    if _which("java") is None:
        missing.append("default-jre-headless")
    if _which("mvn") is None and not (_kafka_installed() and JMX_EXPORTER_JAR.exists()):
        missing.append("maven")
    return missing


def install_apt(packages: Sequence[str]) -> None:
    """apt-get update once, then install ``packages`` without starting their daemons."""
    if not packages:
        return
    if os.geteuid() != 0:
        raise ServiceError(f"missing packages {' '.join(packages)}: run as root, or apt-get install them yourself")
    say(f"apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Debian starts a packaged daemon (haproxy) on install unless policy-rc.d says no; we run our own.
    policy = Path("/usr/sbin/policy-rc.d")
    added_policy = not policy.exists()
    if added_policy:
        policy.write_text("#!/bin/sh\n# temporary, tools/services.py: do not start daemons on install\nexit 101\n")
        policy.chmod(0o755)
    try:
        _run(["apt-get", "update"], timeout=APT_TIMEOUT, what="apt-get update", env=env)
        _run(
            ["apt-get", "install", "-y", "--no-install-recommends", *packages],
            timeout=APT_TIMEOUT,
            what="apt-get install",
            env=env,
        )
    finally:
        if added_policy:
            policy.unlink(missing_ok=True)


def _kafka_marker() -> Path:
    return KAFKA_HOME / ".installed"


def _kafka_installed() -> bool:
    marker = _kafka_marker()
    return marker.exists() and marker.read_text() == render_pom() and any(KAFKA_LIB.glob("kafka_*.jar"))


def install_kafka() -> None:
    """The broker's jars (and a log4j binding) from Maven Central into .cache/kafka-VERSION/lib."""
    if _kafka_installed():
        return
    mvn = _mvn()
    say(f"downloading Kafka {KAFKA_VERSION} jars with Maven into {KAFKA_LIB}")
    KAFKA_HOME.mkdir(parents=True, exist_ok=True)
    (KAFKA_HOME / "pom.xml").write_text(render_pom())
    staging = KAFKA_HOME / "lib.tmp"
    toolkit.copy_dependencies(mvn, KAFKA_HOME / "pom.xml", staging, timeout=BUILD_TIMEOUT, error=ServiceError)
    if not any(staging.glob("kafka_*.jar")) or not any(staging.glob("reload4j-*.jar")):
        raise ServiceError(f"Maven finished but {staging} lacks the Kafka or reload4j jars")
    shutil.rmtree(KAFKA_LIB, ignore_errors=True)
    staging.rename(KAFKA_LIB)
    _kafka_marker().write_text(render_pom())


def _mvn() -> str:
    mvn = _which("mvn")
    if mvn is None:
        raise ServiceError("mvn not found (apt-get install maven)")
    return mvn


def install_jmx_exporter() -> None:
    """The JMX exporter's javaagent jar from Maven Central into .cache/jmx-exporter-VERSION."""
    if JMX_EXPORTER_JAR.exists():
        return
    mvn = _mvn()
    say(f"downloading the JMX exporter {JMX_EXPORTER_VERSION} with Maven into {JMX_EXPORTER_HOME}")
    JMX_EXPORTER_HOME.mkdir(parents=True, exist_ok=True)
    pom = JMX_EXPORTER_HOME / "pom.xml"
    pom.write_text(
        toolkit.render_pom(
            "jmx-exporter",
            JMX_EXPORTER_VERSION,
            "Written by tools/services.py: the Prometheus JMX exporter javaagent.",
            [("io.prometheus.jmx", "jmx_prometheus_javaagent", JMX_EXPORTER_VERSION)],
        )
    )
    staging = JMX_EXPORTER_HOME / "jars.tmp"
    toolkit.copy_dependencies(mvn, pom, staging, timeout=BUILD_TIMEOUT, error=ServiceError)
    found = staging / JMX_EXPORTER_JAR.name
    if not found.exists():
        raise ServiceError(f"Maven finished but {staging} lacks {JMX_EXPORTER_JAR.name}")
    found.rename(JMX_EXPORTER_JAR)
    shutil.rmtree(staging, ignore_errors=True)


def jmx_agent(port: int, config: str) -> str:
    """The JVM flag that serves the JVM's MBeans, as ``config`` names them, on 127.0.0.1:``port``."""
    return f"-javaagent:{JMX_EXPORTER_JAR}={HOST}:{port}:{JMX_EXPORTER_CONFIGS / config}"


def _ferretdb_marker() -> Path:
    return BIN_DIR / "ferretdb.version"


def _ferretdb_installed() -> bool:
    marker = _ferretdb_marker()
    return FERRETDB_BIN.exists() and marker.exists() and marker.read_text().strip() == FERRETDB_VERSION


def install_ferretdb() -> None:
    """Build FerretDB from its Go module (``go install mod@version`` needs the version list, which the
    proxy here refuses; ``go mod download mod@version`` works)."""
    if _ferretdb_installed():
        return
    go = _which("go")
    if go is None:
        raise ServiceError("go not found: FerretDB is built from source and needs Go >= 1.22")
    say(f"building FerretDB {FERRETDB_VERSION} into {FERRETDB_BIN} (about a minute and a half the first time)")
    env = {**os.environ, "GOFLAGS": "-buildvcs=false", "CGO_ENABLED": "0"}
    done = _run(
        [go, "mod", "download", "-json", f"{FERRETDB_MODULE}@{FERRETDB_VERSION}"],
        timeout=BUILD_TIMEOUT,
        what="go mod download",
        env=env,
        cwd=tempfile.gettempdir(),
    )
    module_dir = Path(json.loads(done.stdout)["Dir"])
    src = CACHE / "src" / f"ferretdb-{FERRETDB_VERSION}"
    shutil.rmtree(src, ignore_errors=True)
    src.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(module_dir, src)
    for path in [src, *src.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    (src / "build" / "version").mkdir(parents=True, exist_ok=True)
    (src / "build" / "version" / "version.txt").write_text(FERRETDB_VERSION)
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    staging = BIN_DIR / "ferretdb.tmp"
    _run(
        [go, "build", "-trimpath", "-o", str(staging), "./cmd/ferretdb"],
        timeout=BUILD_TIMEOUT,
        what="go build ferretdb",
        env=env,
        cwd=src,
    )
    staging.rename(FERRETDB_BIN)
    _ferretdb_marker().write_text(FERRETDB_VERSION + "\n")
    shutil.rmtree(src, ignore_errors=True)
    with contextlib.suppress(OSError):
        src.parent.rmdir()


def install() -> None:
    """Everything ``up`` and tools/cluster.py's ``up`` need; fast when it is all there."""
    install_apt(missing_apt_packages())
    if ferretdb_handler() == "pg" and not list(Path("/usr/lib/postgresql").glob("*/bin/postgres")):
        install_apt(["postgresql"])
    install_kafka()
    install_jmx_exporter()
    install_ferretdb()


# ============================================================================================
# services: ZooKeeper, Kafka, FerretDB
# ============================================================================================
@dataclass(frozen=True)
class Service:
    name: str
    marker: str  # a piece of the command line that identifies the process

    @property
    def dir(self) -> Path:
        return SERVICES_DIR / self.name

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def log(self) -> Path:
        return self.dir / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.name}.pid"

    def pid(self) -> int | None:
        return toolkit.running(self.pid_file, self.marker)


ZOOKEEPER = Service("zookeeper", "org.apache.zookeeper.server.quorum.QuorumPeerMain")
KAFKA = Service("kafka", "kafka.Kafka")
FERRETDB = Service("ferretdb", str(FERRETDB_BIN))
POSTGRES = Service("postgres", str(SERVICES_DIR / "postgres" / "data"))  # the -D argument
SERVICES = (ZOOKEEPER, KAFKA, FERRETDB, POSTGRES)


def ferretdb_handler(env: Mapping[str, str] | None = None) -> str:
    handler = (os.environ if env is None else env).get("AMS_SVC_FERRETDB_HANDLER", "pg")
    if handler not in FERRETDB_HANDLERS:
        raise ServiceError(f"AMS_SVC_FERRETDB_HANDLER={handler!r}: one of {', '.join(FERRETDB_HANDLERS)}")
    return handler


def pg_port(env: Mapping[str, str] | None = None) -> int:
    return toolkit.env_port(os.environ if env is None else env, "AMS_SVC_PG_PORT", DEFAULT_PG_PORT, ServiceError)


def _java() -> str:
    java = _which("java")
    if java is None:
        raise ServiceError("java not found (apt-get install default-jre-headless)")
    return java


def _log4j_jars() -> list[str]:
    return sorted(str(p) for p in KAFKA_LIB.glob("*reload4j*.jar"))


def _zookeeper_argv(ports: Ports) -> list[str]:
    conf = ZOOKEEPER.dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "zoo.cfg").write_text(render_zoo_cfg(ZOOKEEPER.data, ports.zookeeper))
    log4j = {"org.apache.zookeeper.server.ZooKeeperServer": "INFO"}
    (conf / "log4j.properties").write_text(render_log4j(log4j))
    classpath = os.pathsep.join([str(ZOOKEEPER_JAR), *_log4j_jars(), str(conf)])
    return [
        _java(),
        "-Xmx256m",
        "-Djava.awt.headless=true",
        jmx_agent(ZOOKEEPER_METRICS_PORT, "zookeeper-jmx-exporter.yml"),
        f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
        f"-Dzookeeper.log.dir={ZOOKEEPER.dir}",
        "-cp",
        classpath,
        ZOOKEEPER.marker,
        str(conf / "zoo.cfg"),
    ]


def _kafka_argv(ports: Ports) -> list[str]:
    conf = KAFKA.dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "server.properties").write_text(render_server_properties(KAFKA.data, ports.kafka, ports.zookeeper))
    (conf / "log4j.properties").write_text(render_log4j({"kafka.server.KafkaServer": "INFO"}))
    return [
        _java(),
        "-Xmx512m",
        "-Xms128m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        jmx_agent(KAFKA_METRICS_PORT, "kafka-jmx-exporter.yml"),
        f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
        f"-Dkafka.logs.dir={KAFKA.dir}",
        "-cp",
        f"{KAFKA_LIB}/*",
        KAFKA.marker,
        str(conf / "server.properties"),
    ]


def render_ferretdb_storage(handler: str, data_dir: Path, pg_port: int) -> list[str]:
    if handler == "pg":
        return ["--handler=pg", f"--postgresql-url=postgres://postgres@{HOST}:{pg_port}/postgres"]
    return ["--handler=sqlite", f"--sqlite-url=file:{data_dir}/"]


def _ferretdb_argv(ports: Ports) -> list[str]:
    state = FERRETDB.dir / "state"
    state.mkdir(parents=True, exist_ok=True)
    return [
        str(FERRETDB_BIN),
        *render_ferretdb_storage(ferretdb_handler(), FERRETDB.data, pg_port()),
        f"--listen-addr={HOST}:{ports.mongo}",
        f"--state-dir={state}",
        "--telemetry=disable",
        "--debug-addr=-",
        f"--log-level={FERRETDB_LOG_LEVEL}",
    ]


def _pg_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), key=lambda p: int(p.parts[-3]))
    if not found:
        raise ServiceError(f"PostgreSQL's {name} not found (apt-get install postgresql)")
    return str(found[-1])


def _as_postgres(argv: Sequence[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as the postgres user Debian's package makes (setpriv
    execs, so the pid this tool records is the server's)."""
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv]


def _postgres_argv(ports: Ports) -> list[str]:
    """A cluster of its own under .cache/services/postgres (initdb on first use), on loopback only,
    trusting local connections: a test server, as FerretDB's pg handler wants it."""
    data, sockets = POSTGRES.data, POSTGRES.dir / "sockets"
    for directory in (POSTGRES.dir, data, sockets):
        directory.mkdir(parents=True, exist_ok=True)
        shutil.chown(directory, "postgres", "postgres")
    data.chmod(0o700)
    if not (data / "PG_VERSION").exists():
        initdb = [_pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]
        done = subprocess.run(_as_postgres(initdb), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ServiceError(f"postgres: initdb failed: {done.stderr.strip() or done.stdout.strip()}")
    return _as_postgres(
        [
            _pg_bin("postgres"),
            "-D",
            str(data),
            "-p",
            str(pg_port()),
            "-k",
            str(sockets),
            "-c",
            f"listen_addresses={HOST}",
        ]
    )


def postgres_ready(port: int) -> bool:
    if not toolkit.port_open(port):
        return False
    probe = subprocess.run([_pg_bin("pg_isready"), "-h", HOST, "-p", str(port), "-U", "postgres"], capture_output=True)
    return probe.returncode == 0


def zookeeper_ready(port: int) -> bool:
    with socket.create_connection((HOST, port), timeout=2) as s:
        s.settimeout(2)
        s.sendall(b"ruok")
        return s.recv(16) == b"imok"


def kafka_ready(port: int) -> bool:
    """The broker answers metadata and has a controller (topics can be created)."""
    if not toolkit.port_open(port):
        return False
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError:  # run without the venv: the open port has to do
        return True
    admin = AdminClient({"bootstrap.servers": f"{HOST}:{port}", "log_level": 0, "socket.timeout.ms": 3000})
    metadata = admin.list_topics(timeout=3)
    return bool(metadata.brokers) and int(metadata.controller_id) >= 0


def mongo_ready(port: int) -> bool:
    if not toolkit.port_open(port):
        return False
    from pymongo import MongoClient

    client: MongoClient[dict[str, object]] = MongoClient(
        f"mongodb://{HOST}:{port}", serverSelectionTimeoutMS=2000, connectTimeoutMS=2000, directConnection=True
    )
    try:
        return bool(client.admin.command("ping").get("ok"))
    finally:
        client.close()


def _port_of(service: Service, ports: Ports) -> int:
    if service is POSTGRES:
        return pg_port()
    return {"zookeeper": ports.zookeeper, "kafka": ports.kafka, "ferretdb": ports.mongo}[service.name]


def _probe(service: Service, ports: Ports) -> Callable[[], bool]:
    port = _port_of(service, ports)
    probes: dict[str, Callable[[int], bool]] = {
        "zookeeper": zookeeper_ready,
        "kafka": kafka_ready,
        "ferretdb": mongo_ready,
        "postgres": postgres_ready,
    }
    return lambda: probes[service.name](port)


def _argv(service: Service, ports: Ports) -> list[str]:
    builders: dict[str, Callable[[Ports], list[str]]] = {
        "zookeeper": _zookeeper_argv,
        "kafka": _kafka_argv,
        "ferretdb": _ferretdb_argv,
        "postgres": _postgres_argv,
    }
    return builders[service.name](ports)


def _start(service: Service, ports: Ports) -> tuple[int, bool]:
    """Start ``service`` unless it runs; (pid, started now)."""
    pid = service.pid()
    if pid is not None:
        return pid, False
    port = _port_of(service, ports)
    if toolkit.port_open(port):
        raise ServiceError(
            f"{service.name}: port {HOST}:{port} is taken by a process this tool did not start "
            f"(no live pid in {service.pid_file}); stop it or choose another port with AMS_SVC_*_PORT"
        )
    service.data.mkdir(parents=True, exist_ok=True)
    pid = _spawn(_argv(service, ports), log=service.log, pid_file=service.pid_file, cwd=service.dir)
    return pid, True


def _wait_ready(service: Service, ports: Ports, pid: int) -> None:
    _wait_until(
        f"{service.name} on {HOST}:{_port_of(service, ports)}",
        _probe(service, ports),
        timeout=READY_TIMEOUT[service.name],
        pid=pid,
        marker=service.marker,
        log=service.log,
    )


#: Kafka's default zookeeper.session.timeout.ms, plus a margin.
STALE_REGISTRATION_WAIT = 20.0


def _wait_kafka(ports: Ports, pid: int, new: bool) -> int:
    """Wait for the broker. After an unclean stop (a killed machine) ZooKeeper restores the old
    broker's session from its log and keeps its ephemeral /brokers/ids node until that session
    times out; a broker started before then exits with NodeExists. Start it once more after the
    timeout instead of failing."""
    try:
        _wait_ready(KAFKA, ports, pid)
        return pid
    except ServiceError as exc:
        if not new or "NodeExists" not in str(exc):
            raise
    say(f"kafka: a stale broker registration in ZooKeeper; starting again in {STALE_REGISTRATION_WAIT:.0f}s")
    time.sleep(STALE_REGISTRATION_WAIT)
    pid, _ = _start(KAFKA, ports)
    _wait_ready(KAFKA, ports, pid)
    return pid


def write_env_file(ports: Ports) -> Path:
    SERVICES_DIR.mkdir(parents=True, exist_ok=True)
    env = connection_env(ports)
    ENV_FILE.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return ENV_FILE


def start_services(ports: Ports | None = None, *, do_install: bool = True) -> dict[str, str]:
    """Install if needed, start ZooKeeper, Kafka and FerretDB unless they run, wait until each answers.
    Returns the connection settings (also written to .cache/services/env)."""
    ports = ports or Ports.from_env()
    if do_install:
        install()
    with _locked(SERVICES_DIR):
        started = time.monotonic()
        if ZOOKEEPER.pid() is None and not (ZOOKEEPER.data / "version-2").exists() and KAFKA.pid() is None:
            # a new ZooKeeper: Kafka's old log dir holds another cluster id and would refuse to start
            shutil.rmtree(KAFKA.data, ignore_errors=True)
        zk_pid, zk_new = _start(ZOOKEEPER, ports)
        if ferretdb_handler() == "pg":
            pg_pid, pg_new = _start(POSTGRES, ports)
            _wait_ready(POSTGRES, ports, pg_pid)
            say(f"postgres  {'started' if pg_new else 'already running'} (pid {pg_pid}) on {HOST}:{pg_port()}")
        mongo_pid, mongo_new = _start(FERRETDB, ports)
        _wait_ready(ZOOKEEPER, ports, zk_pid)
        kafka_pid, kafka_new = _start(KAFKA, ports)
        _wait_ready(FERRETDB, ports, mongo_pid)
        kafka_pid = _wait_kafka(ports, kafka_pid, kafka_new)
        for service, pid, new in (
            (ZOOKEEPER, zk_pid, zk_new),
            (KAFKA, kafka_pid, kafka_new),
            (FERRETDB, mongo_pid, mongo_new),
        ):
            state = "started" if new else "already running"
            say(f"{service.name:<9} {state} (pid {pid}) on {HOST}:{_port_of(service, ports)}")
        say(f"services ready in {time.monotonic() - started:.1f}s")
        write_env_file(ports)
    return connection_env(ports)


def stop_services(*, purge: bool = False) -> None:
    """Stop FerretDB, PostgreSQL, Kafka (while ZooKeeper still answers), then ZooKeeper. Stop the
    cluster of tools/cluster.py that runs on them first (``cluster.stop_cluster()``)."""
    with _locked(SERVICES_DIR):
        for service in (FERRETDB, POSTGRES, KAFKA, ZOOKEEPER):
            if _terminate(service.name, service.pid_file, service.marker, STOP_TIMEOUT[service.name]):
                say(f"{service.name} stopped")
        if purge:
            for service in SERVICES:
                shutil.rmtree(service.dir, ignore_errors=True)
            ENV_FILE.unlink(missing_ok=True)
            say(f"purged the data under {SERVICES_DIR}")


def _service(name: str) -> Service:
    for service in SERVICES:
        if service.name == name:
            return service
    raise ServiceError(f"unknown service {name!r}: one of {', '.join(s.name for s in SERVICES)}")


def stop_service(name: str) -> None:
    """Stop one of the services (SIGTERM, then SIGKILL after its stop timeout): an outage."""
    service = _service(name)
    with _locked(SERVICES_DIR):
        if not _terminate(service.name, service.pid_file, service.marker, STOP_TIMEOUT[service.name]):
            raise ServiceError(f"{service.name} is not running")
    say(f"{service.name} stopped")


def start_service(name: str, ports: Ports | None = None) -> None:
    """Start one of the services again on its data, and wait until it answers."""
    service = _service(name)
    ports = ports or Ports.from_env()
    with _locked(SERVICES_DIR):
        pid, new = _start(service, ports)
        if service is KAFKA:
            _wait_kafka(ports, pid, new)
        else:
            _wait_ready(service, ports, pid)
    say(f"{service.name} {'started' if new else 'already running'} (pid {pid})")


def services_in_use() -> list[Service]:
    """ZooKeeper, Kafka and FerretDB, and PostgreSQL when FerretDB is on it (or it runs)."""
    pg = ferretdb_handler() == "pg" or POSTGRES.pid() is not None
    return [s for s in SERVICES if s is not POSTGRES or pg]


def services_running(ports: Ports | None = None) -> bool:
    ports = ports or Ports.from_env()
    used = services_in_use()
    return all(s.pid() is not None for s in used) and all(toolkit.answers(_probe(s, ports)) for s in used)


# ============================================================================================
# command line
# ============================================================================================
def status_lines(ports: Ports | None = None) -> list[str]:
    ports = ports or Ports.from_env()
    lines = []
    for service in services_in_use():
        pid = service.pid()
        port = _port_of(service, ports)
        if pid is None:
            state = "stopped"
        else:
            state = f"running (pid {pid}), {'ready' if toolkit.answers(_probe(service, ports)) else 'NOT READY'}"
        lines.append(f"{service.name:<10} {HOST}:{port:<6} {state}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.services", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("install", help="install ZooKeeper, haproxy, openssl (apt), Kafka (Maven), FerretDB (Go)")
    sub.add_parser("up", help="install, then start ZooKeeper, Kafka and FerretDB on loopback")
    down = sub.add_parser("down", help="stop them (stop the cluster first: python -m tools.cluster down)")
    down.add_argument("--purge", action="store_true", help="also delete their data and logs")
    sub.add_parser("status", help="one line per service")
    for verb in ("stop", "start"):
        sub.add_parser(verb, help=f"{verb} one service (an outage, and its end)").add_argument(
            "service", choices=[s.name for s in SERVICES]
        )
    args = parser.parse_args(argv)

    try:
        if args.command == "install":
            install()
            say("installed")
        elif args.command == "up":
            env = start_services()
            print(" ".join(f"{k}={v}" for k, v in env.items()))
            say(f"written to {ENV_FILE} (load it with: set -a; . {ENV_FILE}; set +a)")
        elif args.command == "down":
            stop_services(purge=args.purge)
        elif args.command == "status":
            print("\n".join(status_lines()))
        elif args.command == "stop":
            stop_service(args.service)
        elif args.command == "start":
            start_service(args.service)
    except ServiceError as exc:
        print(f"services: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
