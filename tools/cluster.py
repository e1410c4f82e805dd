#!/usr/bin/env python3
"""A local cluster of ``ams serve`` nodes behind haproxy (HTTPS on 127.0.0.1:8443, Google's Pub/Sub
gRPC API over TLS on 127.0.0.1:8444), on the servers of tools/services.py, for tests, benchmarks and
development.

    python -m tools.cluster up [--nodes 3] [--backend kafka|embedded] [--database ams_cluster]
    python -m tools.cluster status
    python -m tools.cluster down
    python -m tools.cluster kill-node N | stop-node N | start-node N

Everything lives under ``.cache/cluster/`` of the checkout (see docs/services.md). The module is
importable from tests: ``start_cluster()``, ``stop_cluster()``, ``cluster_info()``, ``kill_node()``,
``stop_node()``, ``start_node()``. It stands on tools/services.py (``up`` on the kafka backend starts
the services first); tools/services.py knows nothing of it, so whoever stops the services stops the
cluster first (``make services-down`` runs ``make cluster-down``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import services, toolkit
from tools.services import CACHE, HOST, ROOT, Ports, ServiceError, connection_env

# --- ports and names ------------------------------------------------------------------------
CLUSTER_PORT = 8443
#: haproxy's gRPC frontend (HTTP/2 over TLS) in front of the nodes' Pub/Sub gRPC API (docs/pubsub.md)
CLUSTER_GRPC_PORT = 8444
#: haproxy's built-in Prometheus exporter in front of the cluster: http://127.0.0.1:18405/metrics
HAPROXY_PROMETHEUS_PORT = 18405
NODE_BASE_PORT = 18081  # node N listens on NODE_BASE_PORT + N - 1
NODE_GRPC_BASE_PORT = 18181  # and serves gRPC (plaintext, behind haproxy) on NODE_GRPC_BASE_PORT + N - 1
MAX_NODES = 9
DEFAULT_NODES = 3
CLUSTER_DATABASE = "ams_cluster"
BACKENDS = ("kafka", "embedded")

# --- places ---------------------------------------------------------------------------------
CLUSTER_DIR = CACHE / "cluster"
TLS_DIR = CLUSTER_DIR / "tls"
TOKEN_FILE = CLUSTER_DIR / "token"
VENV_BIN = ROOT / ".venv" / "bin"
HAPROXY_CFG = CLUSTER_DIR / "haproxy.cfg"
HAPROXY_PID = CLUSTER_DIR / "haproxy.pid"
HAPROXY_LOG = CLUSTER_DIR / "haproxy.log"
HAPROXY_SOCKET = CLUSTER_DIR / "haproxy.sock"
CLUSTER_STATE = CLUSTER_DIR / "state.json"

# --- bounds ---------------------------------------------------------------------------------
NODE_READY_TIMEOUT = 60.0
NODE_STOP_TIMEOUT = 25.0  # above the node's shutdown_timeout (15 s)
LB_READY_TIMEOUT = 30.0
HAPROXY_STOP_TIMEOUT = 10.0


def say(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


# ============================================================================================
# configuration (pure: rendered text, tested in tests/unit/test_services_tool.py)
# ============================================================================================
def node_port(n: int) -> int:
    return NODE_BASE_PORT + n - 1


def node_grpc_port(n: int) -> int:
    return NODE_GRPC_BASE_PORT + n - 1


def node_settings(
    n: int,
    *,
    backend: str,
    token: str,
    database: str,
    data_dir: Path,
    ports: Ports,
) -> dict[str, object]:
    """The settings file of cluster node ``n`` (1-based), as a mapping."""
    conn = connection_env(ports)
    return {
        "backend": backend,
        "host": HOST,
        "port": node_port(n),
        "grpc_port": node_grpc_port(n),
        "node_name": f"node{n}",
        "mongo_uri": conn["AMS_MONGO_URI"],
        "mongo_database": database,
        "kafka_bootstrap_servers": conn["AMS_KAFKA_BOOTSTRAP_SERVERS"],
        "zookeeper_hosts": conn["AMS_ZOOKEEPER_HOSTS"],
        "kafka_znode": conn["AMS_KAFKA_ZNODE"],
        "kafka_replication_factor": 1,
        "data_dir": str(data_dir),
        "service_token": token,
        "pull_wait_seconds": 10,
        # one owner per pull subscription, as in production (the default; backend embedded ignores it)
        "consume_owner": True,
    }


def render_node_settings(settings: Mapping[str, object]) -> str:
    import yaml  # PyYAML is in requirements.txt; imported here so the pure parts need only the stdlib

    header = "# Written by tools/cluster.py (up): one AMS node behind the local haproxy.\n"
    return header + yaml.safe_dump(dict(settings), sort_keys=False, default_flow_style=False)


#: The paths haproxy routes by a hash of the subscription's path, as the haproxy role's template does
#: (tests/unit/test_services_tool.py checks that both say the same).
#: What haproxy checks in ams_nodes_alive: answered by a node's process whatever its backends.
LIVENESS_PATH = "/v1/version"
SUBSCRIPTION_CURSOR_PATH = r"^/v1/projects/[^/]+/subscriptions/[^/:]+:(pull|acknowledge|offsets|modifyOffset)$"
#: How long a gRPC call may stay silent either way (timeout client and server of the gRPC frontend
#: and backend): a StreamingPull of an idle subscription carries next to nothing for minutes.
GRPC_TIMEOUT = "20m"
#: Answers haproxy gives itself, in the AMS error envelope (every error is JSON, the balancer's too).
PROXY_ERRORS = {
    502: ("Bad Gateway", "BAD_GATEWAY"),
    503: ("Service Unavailable", "UNAVAILABLE"),
    504: ("Gateway Timeout", "TIMEOUT"),
}


def _http_errors() -> str:
    lines = []
    for code, (message, status) in PROXY_ERRORS.items():
        body = json.dumps({"error": {"code": code, "message": message, "status": status}}, separators=(",", ":"))
        lines.append(f"    http-error status {code} content-type \"application/json; charset=utf-8\" string '{body}'")
    return "\n".join(lines)


def render_haproxy_cfg(
    nodes: Sequence[tuple[str, int, int]],
    *,
    bind_port: int,
    pem: Path,
    stats_socket: Path,
    pid_file: Path,
    prometheus_port: int = HAPROXY_PROMETHEUS_PORT,
    grpc_bind_port: int = CLUSTER_GRPC_PORT,
) -> str:
    """HTTPS on loopback in front of the nodes (``(name, API port, gRPC port)``), round robin (a
    subscription's pull, acknowledge, offsets and modifyOffset by a hash of its path), with health
    checks and retries; while no node passes its health check, the nodes that are alive answer
    (ams_nodes_alive). The Pub/Sub gRPC API over TLS (HTTP/2 only) on ``grpc_bind_port``, each client
    connection relayed whole to the plaintext gRPC port of the node with the fewest, which follows its
    API's health.
    haproxy's Prometheus exporter answers on http://127.0.0.1:``prometheus_port``/metrics. All as the
    haproxy role's template does (tests/static/test_tool_configs.py compares them)."""
    if not nodes:
        raise ValueError("haproxy needs at least one node")
    servers = "\n".join(f"    server {name} {HOST}:{port} check inter 1s fall 2 rise 1" for name, port, _ in nodes)
    # a subscription's cursor routes by a consistent hash of its path, as the haproxy role does
    tracking = "\n".join(f"    server {name} {HOST}:{port} track ams_nodes/{name}" for name, port, _ in nodes)
    # the same nodes checked for being alive only, for when none passes /v1/status, as the role does
    alive = "\n".join(f"    server {name} {HOST}:{port} check inter 1s fall 2 rise 1" for name, port, _ in nodes)
    # gRPC: each client connection whole to one node's gRPC port (HTTP/2 in clear on loopback), the
    # node UP and DOWN with its API in ams_nodes, as the haproxy role does (its template says why)
    grpc = "\n".join(
        f"    server {name} {HOST}:{grpc_port} track ams_nodes/{name} on-marked-down shutdown-sessions"
        for name, _, grpc_port in nodes
    )
    return f"""# Written by tools/cluster.py (up). Validate with: haproxy -c -f THIS_FILE
global
    maxconn 4096
    pidfile {pid_file}
    stats socket {stats_socket} mode 600 level admin
    stats timeout 10s
    ssl-default-bind-options ssl-min-ver TLSv1.2
    tune.ssl.default-dh-param 2048

defaults
    mode http
    option redispatch
    retries 3
    retry-on conn-failure
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 10s
    timeout queue 10s
    timeout check 2s
{_http_errors()}

frontend ams_https
    bind {HOST}:{bind_port} ssl crt {pem}
    option forwardfor
    option http-buffer-request
    http-request set-header X-Forwarded-Proto https
    use_backend ams_nodes_alive if !{{ nbsrv(ams_nodes) gt 0 }}
    acl ams_subscription_cursor path_reg {SUBSCRIPTION_CURSOR_PATH}
    use_backend ams_nodes_by_subscription if ams_subscription_cursor
    default_backend ams_nodes

backend ams_nodes
    balance roundrobin
    option httpchk GET /v1/status
    http-check expect status 200
{servers}

backend ams_nodes_by_subscription
    balance hash path,field(1,:)
    hash-type consistent
{tracking}

backend ams_nodes_alive
    balance roundrobin
    option httpchk GET {LIVENESS_PATH}
    http-check expect status 200
{alive}

frontend ams_https_grpc
    mode tcp
    option tcplog
    bind {HOST}:{grpc_bind_port} ssl crt {pem} alpn h2
    timeout client {GRPC_TIMEOUT}
    default_backend ams_nodes_grpc

backend ams_nodes_grpc
    mode tcp
    balance leastconn
    timeout server {GRPC_TIMEOUT}
{grpc}

frontend ams_https_prometheus
    mode http
    bind {HOST}:{prometheus_port}
    http-request set-log-level silent
    http-request use-service prometheus-exporter if {{ path /metrics }}
"""


def parse_haproxy_stat(csv_text: str, backend: str = "ams_nodes") -> dict[str, str]:
    """``show stat`` CSV of the stats socket -> {server name: status} of one backend."""
    text = csv_text.lstrip("# ")
    states: dict[str, str] = {}
    for row in csv.DictReader(io.StringIO(text)):
        if row.get("pxname") == backend and row.get("svname") not in ("FRONTEND", "BACKEND"):
            states[row["svname"]] = row.get("status", "")
    return states


# ============================================================================================
# processes: the helpers of tools/toolkit.py, with this tool's name, errors and messages
# ============================================================================================
def _spawn(argv: Sequence[str], *, log: Path, pid_file: Path, env: Mapping[str, str], cwd: Path) -> int:
    return toolkit.spawn(argv, log=log, pid_file=pid_file, started_by="tools/cluster.py", env=env, cwd=cwd)


def _terminate(name: str, pid_file: Path, marker: str, timeout: float) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns whether something was running."""
    return toolkit.terminate(name, pid_file, marker, timeout, say)


def _wait_until(what: str, ready: Callable[[], bool], *, timeout: float, pid: int, marker: str, log: Path) -> None:
    toolkit.wait_until(what, ready, timeout=timeout, pid=pid, marker=marker, log=log, error=ServiceError)


def _locked() -> contextlib.AbstractContextManager[None]:
    """One tools/cluster.py up/down at a time (two test sessions starting the cluster at once)."""
    return toolkit.locked(CLUSTER_DIR, ServiceError)


def _program(command: str) -> str:
    """The path of ``command`` (haproxy, openssl), which ``make services-install`` installs."""
    found = toolkit.which(command)
    if found is None:
        raise ServiceError(f"{command} not found (apt-get install {command}, or make services-install)")
    return found


# ============================================================================================
# the cluster: N ams nodes behind haproxy
# ============================================================================================
@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    combined: Path  # certificate chain and key in one file, as haproxy's `crt` wants


@dataclass(frozen=True)
class NodeInfo:
    name: str
    port: int
    url: str
    config: Path
    log: Path
    pid: int | None
    grpc_port: int = 0  # its Pub/Sub gRPC API, plaintext


@dataclass(frozen=True)
class ClusterInfo:
    url: str
    ca_file: Path
    token: str
    database: str
    backend: str
    nodes: tuple[NodeInfo, ...]
    haproxy_cfg: Path
    stats_socket: Path
    #: host:port of the Pub/Sub gRPC API through haproxy (TLS with ``ca_file``; docs/pubsub.md)
    grpc_target: str = f"{HOST}:{CLUSTER_GRPC_PORT}"


def tls_files(directory: Path = TLS_DIR) -> TlsFiles:
    return TlsFiles(
        ca=directory / "ca.pem",
        cert=directory / "server.pem",
        key=directory / "server.key",
        combined=directory / "haproxy.pem",
    )


def make_tls(directory: Path = TLS_DIR, days: int = 3650) -> TlsFiles:
    """A test CA and a server certificate for 127.0.0.1 and localhost, made once with openssl."""
    files = tls_files(directory)
    if all(p.exists() for p in (files.ca, files.cert, files.key, files.combined)):
        return files
    openssl = _program("openssl")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        t = Path(tmp)
        (t / "server.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
        )

        def ssl_cmd(*args: str) -> None:
            toolkit.run([openssl, *args], timeout=60, what=f"openssl {args[0]}", error=ServiceError, cwd=t)

        ssl_cmd(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", str(days),
            "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=AMS local test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-addext", "subjectKeyIdentifier=hash",
        )  # fmt: skip
        ssl_cmd(
            "req", "-new", "-newkey", "rsa:2048", "-nodes", "-sha256",
            "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        )  # fmt: skip
        ssl_cmd(
            "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-set_serial", f"0x{secrets.token_hex(16)}", "-sha256", "-days", str(days),
            "-extfile", "server.ext", "-out", "server.pem",
        )  # fmt: skip
        (t / "haproxy.pem").write_text((t / "server.pem").read_text() + (t / "server.key").read_text())
        for name in ("ca.key", "server.key", "haproxy.pem"):
            (t / name).chmod(0o600)
        for name in ("ca.key", "server.key", "server.pem", "haproxy.pem", "ca.pem"):  # ca.pem last: the "done" mark
            os.replace(t / name, directory / name)
    return files


def service_token() -> str:
    """The cluster's service token, made once (0600)."""
    if TOKEN_FILE.exists():
        token = TOKEN_FILE.read_text().strip()
        if token:
            return token
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(TOKEN_FILE, 0o600)
    return token


def _node_files(n: int) -> tuple[Path, Path, Path]:
    return CLUSTER_DIR / f"node{n}.yml", CLUSTER_DIR / f"node{n}.log", CLUSTER_DIR / f"node{n}.pid"


def _node_marker(n: int) -> str:
    return str(_node_files(n)[0])


def _ams_argv(config: Path) -> list[str]:
    ams = VENV_BIN / "ams"
    base = [str(ams)] if ams.exists() else [sys.executable, "-m", "ams_app"]
    return [*base, "serve", "--config", str(config)]


def _node_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without AMS_* (they would override the settings file), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMS_")}
    env.update(extra)
    return env


def _read_state() -> dict[str, object]:
    try:
        loaded = json.loads(CLUSTER_STATE.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _write_state(state: Mapping[str, object]) -> None:
    CLUSTER_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(CLUSTER_STATE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=2)


def node_ready(port: int) -> bool:
    with urllib.request.urlopen(f"http://{HOST}:{port}/v1/status", timeout=3) as resp:
        return bool(resp.status == 200)


def _spawn_node(n: int, env: Mapping[str, str]) -> int:
    config, log, pid_file = _node_files(n)
    if not config.exists():
        raise ServiceError(f"{config} is missing: run `python -m tools.cluster up` first")
    deadline = time.monotonic() + 5  # a node killed a moment ago may still be closing its sockets
    for port in (node_port(n), node_grpc_port(n)):
        while toolkit.port_open(port):
            if time.monotonic() > deadline:
                raise ServiceError(f"node{n}: port {HOST}:{port} is taken by a process this tool did not start")
            time.sleep(0.1)
    return _spawn(_ams_argv(config), log=log, pid_file=pid_file, env=_node_env(env), cwd=ROOT)


def _wait_node(n: int, pid: int) -> None:
    _, log, _ = _node_files(n)
    port = node_port(n)
    _wait_until(
        f"node{n} on {HOST}:{port}",
        lambda: node_ready(port),
        timeout=NODE_READY_TIMEOUT,
        pid=pid,
        marker=_node_marker(n),
        log=log,
    )


def _cluster_pids() -> dict[str, int | None]:
    pids: dict[str, int | None] = {"haproxy": toolkit.running(HAPROXY_PID, str(HAPROXY_CFG))}
    for n in range(1, MAX_NODES + 1):
        pid_file = _node_files(n)[2]
        if pid_file.exists():
            pids[f"node{n}"] = toolkit.running(pid_file, _node_marker(n))
    return pids


def check_haproxy_cfg(cfg: Path) -> None:
    """``haproxy -c -f cfg``: raises ServiceError with haproxy's complaint."""
    toolkit.run([_program("haproxy"), "-c", "-q", "-f", str(cfg)], timeout=30, what="haproxy -c", error=ServiceError)


def haproxy_server_states(socket_path: Path = HAPROXY_SOCKET) -> dict[str, str]:
    """{server: UP/DOWN/...} from haproxy's stats socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(3)
        s.connect(str(socket_path))
        s.sendall(b"show stat\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return parse_haproxy_stat(b"".join(chunks).decode())


def _https_ok(url: str, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url, timeout=5, context=context) as resp:
        return bool(resp.status == 200)


def start_cluster(
    nodes: int = DEFAULT_NODES,
    database: str = CLUSTER_DATABASE,
    env: Mapping[str, str] | None = None,
    *,
    backend: str = "kafka",
    ports: Ports | None = None,
) -> ClusterInfo:
    """Start ``nodes`` ams processes and haproxy in front of them; reuse those already running with the
    same settings. Backend ``kafka`` needs the services (``start_services()``) running; ``embedded``
    (until the kafka backend exists) shares one SQLite data dir per database among the nodes."""
    if not 1 <= nodes <= MAX_NODES:
        raise ServiceError(f"--nodes must be between 1 and {MAX_NODES}")
    if backend not in BACKENDS:
        raise ServiceError(f"unknown backend {backend!r} (kafka or embedded)")
    ports = ports or Ports.from_env()
    if backend == "kafka" and not services.services_running(ports):
        raise ServiceError("the services are not running: `make services-up` (python -m tools.services up) first")
    extra_env = dict(env or {})
    with _locked():
        started = time.monotonic()
        tls = make_tls()
        token = service_token()
        data_dir = CLUSTER_DIR / "data" / database
        for n in range(nodes + 1, MAX_NODES + 1):  # a smaller cluster than last time
            config, _, pid_file = _node_files(n)
            if _terminate(f"node{n}", pid_file, _node_marker(n), NODE_STOP_TIMEOUT):
                say(f"node{n} stopped")
            config.unlink(missing_ok=True)
        previous_env = _read_state().get("env")
        env_changed = previous_env != extra_env
        _write_state({"nodes": nodes, "database": database, "backend": backend, "env": extra_env})
        pids: dict[int, int] = {}
        for n in range(1, nodes + 1):
            config, _, pid_file = _node_files(n)
            text = render_node_settings(
                node_settings(n, backend=backend, token=token, database=database, data_dir=data_dir, ports=ports)
            )
            changed = env_changed or not config.exists() or config.read_text() != text
            if changed:
                config.write_text(text)
                config.chmod(0o600)  # it holds the service token
                if _terminate(f"node{n}", pid_file, _node_marker(n), NODE_STOP_TIMEOUT):
                    say(f"node{n} restarted (settings changed)")
            pid = toolkit.running(pid_file, _node_marker(n))
            pids[n] = pid if pid is not None else _spawn_node(n, extra_env)
        for n, pid in pids.items():
            _wait_node(n, pid)

        cfg_text = render_haproxy_cfg(
            [(f"node{n}", node_port(n), node_grpc_port(n)) for n in range(1, nodes + 1)],
            bind_port=CLUSTER_PORT,
            pem=tls.combined,
            stats_socket=HAPROXY_SOCKET,
            pid_file=HAPROXY_PID,
        )
        haproxy_pid = toolkit.running(HAPROXY_PID, str(HAPROXY_CFG))
        if haproxy_pid is None or not HAPROXY_CFG.exists() or HAPROXY_CFG.read_text() != cfg_text:
            staged = CLUSTER_DIR / "haproxy.cfg.new"
            staged.write_text(cfg_text)
            check_haproxy_cfg(staged)
            _terminate("haproxy", HAPROXY_PID, str(HAPROXY_CFG), HAPROXY_STOP_TIMEOUT)
            os.replace(staged, HAPROXY_CFG)
            for port in (CLUSTER_PORT, CLUSTER_GRPC_PORT, HAPROXY_PROMETHEUS_PORT):
                if toolkit.port_open(port):
                    raise ServiceError(f"haproxy: port {HOST}:{port} is taken by a process this tool did not start")
            HAPROXY_SOCKET.unlink(missing_ok=True)
            with HAPROXY_LOG.open("ab") as out:
                out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} started by tools/cluster.py\n".encode())
            with HAPROXY_LOG.open("ab") as out:
                done = subprocess.run(
                    [_program("haproxy"), "-D", "-f", str(HAPROXY_CFG), "-p", str(HAPROXY_PID)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=30,
                    check=False,
                    cwd=CLUSTER_DIR,
                )
            if done.returncode != 0:
                raise ServiceError(f"haproxy did not start (exit {done.returncode}):\n{toolkit.tail(HAPROXY_LOG)}")
        url = f"https://{HOST}:{CLUSTER_PORT}"
        deadline = time.monotonic() + LB_READY_TIMEOUT
        while True:
            states = _safe_states()
            if toolkit.answers(lambda: _https_ok(f"{url}/v1/status", tls.ca)) and all(
                states.get(f"node{n}") == "UP" for n in range(1, nodes + 1)
            ):
                break
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"{url}/v1/status not answering 200 with all nodes UP after {LB_READY_TIMEOUT:.0f}s "
                    f"(haproxy sees {states}); last lines of {HAPROXY_LOG}:\n{toolkit.tail(HAPROXY_LOG)}"
                )
            time.sleep(0.25)
        say(f"cluster of {nodes} ({backend}, database {database}) ready in {time.monotonic() - started:.1f}s")
        return cluster_info()


def _safe_states() -> dict[str, str]:
    try:
        return haproxy_server_states()
    except OSError:
        return {}


def cluster_info() -> ClusterInfo:
    state = _read_state()
    count = int(str(state.get("nodes", DEFAULT_NODES)))
    tls = tls_files()
    token = TOKEN_FILE.read_text().strip() if TOKEN_FILE.exists() else ""
    nodes = []
    for n in range(1, count + 1):
        config, log, pid_file = _node_files(n)
        nodes.append(
            NodeInfo(
                name=f"node{n}",
                port=node_port(n),
                url=f"http://{HOST}:{node_port(n)}",
                config=config,
                log=log,
                pid=toolkit.running(pid_file, _node_marker(n)),
                grpc_port=node_grpc_port(n),
            )
        )
    return ClusterInfo(
        url=f"https://{HOST}:{CLUSTER_PORT}",
        ca_file=tls.ca,
        token=token,
        database=str(state.get("database", CLUSTER_DATABASE)),
        backend=str(state.get("backend", "kafka")),
        nodes=tuple(nodes),
        haproxy_cfg=HAPROXY_CFG,
        stats_socket=HAPROXY_SOCKET,
    )


def stop_cluster() -> None:
    """Stop haproxy, then every node (SIGTERM to all at once, then wait)."""
    with _locked():
        if _terminate("haproxy", HAPROXY_PID, str(HAPROXY_CFG), HAPROXY_STOP_TIMEOUT):
            say("haproxy stopped")
        HAPROXY_SOCKET.unlink(missing_ok=True)
        pending: list[tuple[int, Path, int]] = []
        for n in range(1, MAX_NODES + 1):
            pid_file = _node_files(n)[2]
            pid = toolkit.running(pid_file, _node_marker(n))
            if pid is None:
                pid_file.unlink(missing_ok=True)
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            pending.append((n, pid_file, pid))
        for n, pid_file, _pid in pending:
            _terminate(f"node{n}", pid_file, _node_marker(n), NODE_STOP_TIMEOUT)
            say(f"node{n} stopped")


def kill_node(n: int) -> None:
    """SIGKILL node ``n`` (a crash); haproxy notices within about two seconds."""
    if not toolkit.kill(_node_files(n)[2], _node_marker(n)):
        raise ServiceError(f"node{n} is not running")


def stop_node(n: int) -> None:
    """Stop node ``n`` gracefully (SIGTERM: waiting pulls answer, in-flight requests finish)."""
    if not _terminate(f"node{n}", _node_files(n)[2], _node_marker(n), NODE_STOP_TIMEOUT):
        raise ServiceError(f"node{n} is not running")


def start_node(n: int, *, wait_lb: bool = True) -> NodeInfo:
    """Start node ``n`` again with the settings of the last start_cluster(); wait until it (and, with
    ``wait_lb``, haproxy's health check) sees it up."""
    raw_env = _read_state().get("env")
    env = {str(k): str(v) for k, v in raw_env.items()} if isinstance(raw_env, dict) else {}
    pid = toolkit.running(_node_files(n)[2], _node_marker(n))
    if pid is None:
        pid = _spawn_node(n, env)
    _wait_node(n, pid)
    if wait_lb and toolkit.running(HAPROXY_PID, str(HAPROXY_CFG)) is not None:
        deadline = time.monotonic() + LB_READY_TIMEOUT
        while _safe_states().get(f"node{n}") != "UP":
            if time.monotonic() > deadline:
                raise ServiceError(f"haproxy does not see node{n} up after {LB_READY_TIMEOUT:.0f}s")
            time.sleep(0.2)
    return next(node for node in cluster_info().nodes if node.name == f"node{n}")


# ============================================================================================
# command line
# ============================================================================================
def status_lines() -> list[str]:
    """One line per cluster process (haproxy, then each node that has a pid file)."""
    pids = _cluster_pids()
    if not any(pids.values()):
        return [f"{'cluster':<10} {f'https://{HOST}:{CLUSTER_PORT}':<23} stopped"]
    states = _safe_states()
    lines = []
    for name, pid in pids.items():
        where = f"https://{HOST}:{CLUSTER_PORT}" if name == "haproxy" else f"http://{HOST}:{node_port(int(name[4:]))}"
        state = "stopped" if pid is None else f"running (pid {pid})"
        if name in states:
            state += f", haproxy: {states[name]}"
        lines.append(f"{name:<10} {where:<23} {state}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cluster", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help=f"N ams nodes behind haproxy on https://{HOST}:{CLUSTER_PORT}")
    up.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    up.add_argument("--database", default=CLUSTER_DATABASE, help="MongoDB database of the nodes")
    up.add_argument(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get("AMS_SVC_BACKEND", "kafka"),
        help="the nodes' backend (default kafka, starting the services first; embedded: one SQLite dir "
        "shared by the nodes)",
    )
    sub.add_parser("down", help="stop haproxy and the nodes (the services keep running)")
    sub.add_parser("status", help="one line per cluster process")
    for verb in ("kill-node", "stop-node", "start-node"):
        sub.add_parser(verb, help=f"{verb.split('-')[0]} one cluster node").add_argument("n", type=int)
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            if args.backend == "kafka":
                services.start_services()
            else:
                services.install()
            info = start_cluster(nodes=args.nodes, database=args.database, backend=args.backend)
            print(f"URL:   {info.url}")
            print(f"CA:    {info.ca_file}")
            print(f"TOKEN: {info.token}")
            print(f"GRPC:  {info.grpc_target} (TLS: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH={info.ca_file}; docs/pubsub.md)")
            print(f"try:   curl --cacert {info.ca_file} -H 'x-api-key: {info.token}' {info.url}/v1/projects")
        elif args.command == "down":
            stop_cluster()
        elif args.command == "status":
            print("\n".join(status_lines()))
        elif args.command == "kill-node":
            kill_node(args.n)
        elif args.command == "stop-node":
            stop_node(args.n)
        elif args.command == "start-node":
            start_node(args.n)
    except ServiceError as exc:
        print(f"cluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
