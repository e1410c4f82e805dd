"""What the multi-host scenario's tests share: the topology (read from inventories/multinode, the one
owner of names and addresses), the API through haproxy and on each node, a client that publishes and
pulls the whole time and counts what failed, and the containers' life (podman kill / start).

The tests talk to the hosts from this machine, which has an address on the scenario's bridge
(molecule/multinode/create.yml); inside the containers, names resolve through /etc/hosts.
"""

from __future__ import annotations

import base64
import collections
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

import requests
import testinfra
import yaml

ROOT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
INVENTORY = ROOT / "inventories" / "multinode"
SCENARIO = ROOT / "molecule" / "multinode"


def _groups() -> tuple[dict[str, list[str]], dict[str, str]]:
    data = yaml.safe_load((INVENTORY / "hosts.yml").read_text())["all"]["children"]
    groups: dict[str, list[str]] = {}
    addresses: dict[str, str] = {}
    for group, body in data.items():
        groups[group] = list(body["hosts"])
        for name, hostvars in body["hosts"].items():
            if hostvars and "multinode_address" in hostvars:
                addresses[name] = hostvars["multinode_address"]
    return groups, addresses


GROUPS, ADDRESS = _groups()
#: every host of the inventory, sorted (each one has an address)
EVERY_HOST = sorted(ADDRESS)
SCENARIO_VARS = yaml.safe_load((SCENARIO / "vars" / "network.yml").read_text())
TOKEN = yaml.safe_load((INVENTORY / "group_vars" / "all" / "20-vault.yml").read_text())["vault_ams_service_token"]
CA = ROOT / ".cache" / "artifacts" / "tls" / "ca.pem"
LB = GROUPS["haproxy"][0]
API = f"https://{ADDRESS[LB]}/v1"
AMS_PORT = 8080
#: Google's Pub/Sub gRPC API (docs/pubsub.md): haproxy's frontend (TLS with the test CA's certificate)
#: and each node's own listener (TLS with its internal certificate), the production inventory's ports.
GRPC_LB = f"{ADDRESS[LB]}:8444"
GRPC_PORT = 8085
#: Each node's worker processes (the inventory's ams_workers) and the ports of their own, where the
#: other nodes forward a subscription's requests to its owner (roles/ams: ams_worker_port_base and
#: ams_worker_grpc_port_base; docs/production.md "A process per core").
AMS_WORKERS = 2
WORKER_PORTS = [8100 + i for i in range(AMS_WORKERS)]
WORKER_GRPC_PORTS = [8200 + i for i in range(AMS_WORKERS)]
# Google's clients trust a server through gRPC's default roots, which gRPC reads once, at the first
# channel that needs them: haproxy's certificate is the test CA's
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ROOT / ".cache" / "artifacts" / "tls" / "ca.pem")
HAPROXY_SOCKET = "/run/haproxy/admin.sock"
PROJECT = "MULTINODE"
WAIT = 120.0


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_url(name: str) -> str:
    """One node's own API: HTTPS with its internal certificate (verify it with INTERNAL_CA)."""
    return f"https://{ADDRESS[name]}:{AMS_PORT}/v1"


def wait_until(check: Callable[[], Any], what: str, timeout: float = WAIT, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (requests.RequestException, OSError, subprocess.SubprocessError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(every)


# ---------------------------------------------------------------------- containers -------------
@cache
def host(name: str) -> Any:
    """testinfra's podman backend straight at the container."""
    return testinfra.get_host(f"podman://{name}")


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=True)


def kill(name: str) -> float:
    """SIGKILL the container (every process in it at once, as a power loss); returns when."""
    podman("kill", "--signal", "KILL", name)
    return time.monotonic()


def start(name: str) -> None:
    """Start a killed container again (same address) and wait until its systemd is up; its enabled
    services start by themselves."""
    podman("start", name)
    wait_until(
        lambda: (
            podman("exec", name, "systemctl", "is-system-running").stdout.strip() in ("running", "degraded") or None
        ),
        f"systemd running in {name} again",
    )


def running(name: str) -> bool:
    return podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true"


def _playbooks(
    inventory: Path, playbooks: list[Path], extra_vars: tuple[str, ...], timeout: float
) -> tuple[float, str]:
    command = shutil.which("ansible-playbook") or str(ROOT / ".venv" / "bin" / "ansible-playbook")
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORKS": str(len(ADDRESS))}
    argv = [command, "-i", str(inventory), *map(str, playbooks)]
    for value in extra_vars:
        argv += ["-e", value]
    started = time.monotonic()
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    return time.monotonic() - started, run.stdout


def run_playbook(inventory: Path, playbook: Path, *extra_vars: str, timeout: float = 1500) -> float:
    """Run a playbook of the project as an operator would (the project's ansible.cfg, a fork per
    host), each of ``extra_vars`` given with -e; its duration. Fails with the end of its output."""
    return _playbooks(inventory, [playbook], extra_vars, timeout)[0]


def changes_of(inventory: Path, *playbooks: Path, timeout: float = 1500) -> tuple[float, dict[str, int], str]:
    """Run ``playbooks`` in one ansible-playbook, as run_playbook does: its duration, the tasks each
    host reported changed (the PLAY RECAP) and the output."""
    took, output = _playbooks(inventory, list(playbooks), (), timeout)
    changed = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", output, re.MULTILINE)
    }
    return took, changed, output


# ---------------------------------------------------------------------- ZooKeeper, Kafka ------
# Every internal link is secured (docs/production.md, "Security"): ZooKeeper's clients on its secure
# port with a certificate of the internal CA (the plain port is on each member's loopback), Kafka's
# brokers on BROKER (mutual TLS; their own certificate is the super user) and its clients on CLIENT
# (SASL_SSL). The tests take the certificates roles/internal_pki made on this machine for the
# scenario (inventories/multinode: internal_pki_dir), as an operator's tools would.
ZOOKEEPER_PORT = 2182
ZOOKEEPER_PLAIN_PORT = 2181
KAFKA_BROKER_PORT = 9091
KAFKA_PORT = 9093
KAFKA_PLAIN_PORT = 9092
PKI = ROOT / ".cache" / "artifacts" / "pki-multinode"
INTERNAL_CA = PKI / "ca.pem"
VAULT = yaml.safe_load((INVENTORY / "group_vars" / "all" / "20-vault.yml").read_text())


def identity(name: str, host: str | None = None) -> tuple[str, str]:
    """(certificate, key) of the identity ``name`` (zookeeper, kafka, ams, mongodb) as ``host`` holds
    it (default: the first member of the group of that name)."""
    holder = host or GROUPS[name][0]
    return str(PKI / "hosts" / holder / f"{name}.pem"), str(PKI / "hosts" / holder / f"{name}.key")


def tls_context(name: str | None) -> ssl.SSLContext:
    """TLS that checks a server against the internal CA (and its name or address), presenting the
    certificate of the identity ``name`` (none: no client certificate)."""
    context = ssl.create_default_context(cafile=str(INTERNAL_CA))
    if name:
        context.load_cert_chain(*identity(name))
    return context


def srvr_mode(member: str) -> str:
    """The member's ``Mode:`` from the srvr four-letter word (over TLS, on its secure port), or why
    there is none."""
    try:
        with (
            socket.create_connection((ADDRESS[member], ZOOKEEPER_PORT), timeout=3) as raw,
            tls_context("ams").wrap_socket(raw, server_hostname=ADDRESS[member]) as conn,
        ):
            conn.sendall(b"srvr")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
    except OSError as exc:
        return f"unreachable ({exc.__class__.__name__})"
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return "not serving"


def zookeeper_client(members: list[str], who: str = "ams", timeout: float = 10) -> Any:
    """A kazoo client of ``members``' secure ports with the certificate of ``who`` (not started)."""
    from kazoo.client import KazooClient

    cert, key = identity(who)
    return KazooClient(
        hosts=",".join(f"{ADDRESS[m]}:{ZOOKEEPER_PORT}" for m in members),
        timeout=timeout,
        use_ssl=True,
        ca=str(INTERNAL_CA),
        certfile=cert,
        keyfile=key,
        check_hostname=True,
    )


def _kafka_health() -> ModuleType:
    """The kafka role's own health check (roles/kafka/files/kafka-health), used from here."""
    loader = SourceFileLoader("kafka_health", str(ROOT / "roles" / "kafka" / "files" / "kafka-health"))
    module = ModuleType(loader.name)
    sys.modules[loader.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


KAFKA_HEALTH = _kafka_health()


def broker_metadata(broker: str, timeout: float = 5.0) -> Any:
    """The cluster's metadata as ``broker`` answers it on BROKER, as the brokers' own identity."""
    return KAFKA_HEALTH.fetch_metadata(ADDRESS[broker], KAFKA_BROKER_PORT, timeout, tls_context("kafka"))


def kafka_metadata(brokers: list[str] | None = None) -> Any:
    """The cluster's metadata (kafka-health's Metadata) from the first broker that answers."""
    for broker in brokers or GROUPS["kafka"]:
        try:
            return broker_metadata(broker)
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no broker of {brokers or GROUPS['kafka']} answered")


def kafka_client(user: str = "ams", password: str | None = None, **options: Any) -> dict[str, Any]:
    """librdkafka's options for the CLIENT listeners as the SCRAM ``user`` (its vault password
    unless ``password``)."""
    secret = VAULT[f"vault_kafka_{user}_password"] if password is None else password
    return {
        "bootstrap.servers": ",".join(f"{ADDRESS[b]}:{KAFKA_PORT}" for b in GROUPS["kafka"]),
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": secret,
        "ssl.ca.location": str(INTERNAL_CA),
        "socket.timeout.ms": 5000,
        **options,
    }


# ---------------------------------------------------------------------- the metadata store -----
MONGO = GROUPS["mongodb"][0]
MONGO_PORT = 27017
DATABASE = "argo_msg"


def mongo_client(user: str = "ams", password: str | None = None, tls: bool = True) -> Any:
    """A pymongo client of the store (FerretDB) as ``user`` (empty: no login; its vault password
    unless ``password``), over TLS checked against the internal CA unless not ``tls``."""
    from pymongo import MongoClient

    login = f"{user}:{VAULT['vault_mongodb_app_password'] if password is None else password}@" if user else ""
    options = f"tls=true&tlsCAFile={INTERNAL_CA}" if tls else "tls=false"
    if user:
        options += f"&authSource={DATABASE}&authMechanism=SCRAM-SHA-256"
    return MongoClient(f"mongodb://{login}{ADDRESS[MONGO]}:{MONGO_PORT}/?{options}", serverSelectionTimeoutMS=10000)


# ---------------------------------------------------------------------- haproxy ----------------
def haproxy_stat_of_nodes() -> list[dict[str, str]]:
    """haproxy's ``show stat`` rows of the AMS nodes, in every backend, each by its column names."""
    out = host(LB).run(f"echo 'show stat' | socat stdio {HAPROXY_SOCKET}")
    assert out.rc == 0, out.stderr
    header: list[str] = []
    rows: list[dict[str, str]] = []
    for line in out.stdout.splitlines():
        if line.startswith("# "):
            header = line[2:].split(",")
            continue
        row = dict(zip(header, line.split(","), strict=False))
        if row.get("svname") in GROUPS["ams"]:
            rows.append(row)
    return rows


def haproxy_servers(authn: bool = False) -> dict[str, str]:
    """Each AMS node's operational state in haproxy: UP, DOWN, DRAIN, MAINT (``show stat``), in
    its API backends, or with ``authn`` in the backend of its ``ams authn``."""
    states: dict[str, str] = {}
    for row in haproxy_stat_of_nodes():
        if row.get("pxname", "").endswith("_authn") != authn or row.get("pxname", "").endswith("_grpc"):
            continue
        states[row["svname"]] = row["status"]
    return states


def haproxy_ready_again() -> list[str]:
    """Every AMS node that haproxy holds drained or in maintenance (a rolling playbook that failed
    half-way leaves its node so) is taken back (``set server ... state ready``); which were."""
    taken: list[str] = []
    for row in haproxy_stat_of_nodes():
        if row.get("status", "").startswith(("DRAIN", "MAINT")):
            server = f"{row['pxname']}/{row['svname']}"
            done = host(LB).run(f"echo 'set server {server} state ready' | socat stdio {HAPROXY_SOCKET}")
            assert done.rc == 0, done.stderr
            taken.append(server)
    return taken


def grpc_connections() -> dict[str, int]:
    """Each AMS node's current connections in haproxy's gRPC backend (``show stat``: scur), where each
    client connection goes whole to one node."""
    return {
        row["svname"]: int(row["scur"] or 0)
        for row in haproxy_stat_of_nodes()
        if row.get("pxname", "").endswith("_grpc")
    }


def ams_pid(node: str) -> str:
    """The main process of the node's ams unit ("0": none)."""
    return str(host(node).run("systemctl show --property MainPID --value ams").stdout.strip() or "0")


def kill_ams(node: str) -> tuple[float, str]:
    """``kill -9`` of the node's ``ams serve`` processes (its unit's: the parent and its workers,
    docs/production.md "A process per core"), which systemd starts again (Restart=on-failure); when,
    and the main pid killed."""
    pid = ams_pid(node)
    assert pid != "0", f"no ams process on {node}"
    killed = host(node).run("systemctl kill --signal=SIGKILL ams")
    assert killed.rc == 0, killed.stderr
    return time.monotonic(), pid


def ams_back(node: str, killed_pid: str) -> bool:
    """The node's ams runs again (another process than ``killed_pid``), answers /v1/status on its
    own address and haproxy has it UP."""
    pid = ams_pid(node)
    if pid in ("0", killed_pid):
        return False
    if requests.get(node_url(node) + "/status", timeout=5, verify=str(INTERNAL_CA)).status_code != 200:
        return False
    return haproxy_servers().get(node) == "UP"


# ---------------------------------------------------------------------- the API ----------------
class Api:
    """The AMS API as a client sees it: through haproxy (TLS, the test CA), or one node's own address
    (TLS, the internal CA)."""

    def __init__(self, base: str = API, timeout: float = 90) -> None:
        self.base = base
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["x-api-key"] = TOKEN
        self.empty_with_backlog = 0
        self.drained_ids: dict[str, list[str]] = {}  # payload: the message ids the last drain got it with

    def request(self, method: str, path: str, body: Any = None) -> requests.Response:
        # verify per request: a session's verify loses to REQUESTS_CA_BUNDLE from the environment;
        # haproxy shows the public name's certificate, a node its internal one
        node = any(self.base.startswith(f"https://{ADDRESS[name]}:") for name in GROUPS["ams"])
        verify = str(INTERNAL_CA) if node else str(CA)
        return self.session.request(method, self.base + path, json=body, timeout=self.timeout, verify=verify)

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        r = self.request(method, path, body)
        assert r.status_code in ok, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def topic(self, name: str) -> None:
        self.call("PUT", f"/projects/{PROJECT}/topics/{name}")

    def subscription(self, name: str, topic: str, ack_deadline: int = 10, push: dict[str, Any] | None = None) -> Any:
        body: dict[str, Any] = {"topic": f"projects/{PROJECT}/topics/{topic}", "ackDeadlineSeconds": ack_deadline}
        if push is not None:
            body["pushConfig"] = push
        return self.call("PUT", f"/projects/{PROJECT}/subscriptions/{name}", body)

    def publish(self, topic: str, payloads: list[str]) -> list[str]:
        body = {"messages": [{"data": b64(p)} for p in payloads]}
        return list(self.call("POST", f"/projects/{PROJECT}/topics/{topic}:publish", body)["messageIds"])

    def offsets(self, sub: str) -> dict[str, int]:
        return dict(self.call("GET", f"/projects/{PROJECT}/subscriptions/{sub}:offsets"))

    def drain(self, sub: str, timeout: float = WAIT) -> collections.Counter[str]:
        """Pull and acknowledge until the subscription's offset reaches the end of its topic
        (``:offsets``); every payload's count. Empty answers while a backlog remains (the node's
        read of the log found nothing in time) are retried, counted in ``empty_with_backlog``. The
        message ids each payload came with are in ``drained_ids``."""
        deadline = time.monotonic() + timeout
        self.empty_with_backlog = 0
        self.drained_ids = collections.defaultdict(list)
        while True:
            assert time.monotonic() < deadline, f"{sub} not drained within {timeout:.0f}s: {self.offsets(sub)}"
            body = {"maxMessages": "500", "returnImmediately": "true"}
            got = self.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:pull", body)["receivedMessages"]
            if got:
                for m in got:
                    self.drained_ids[unb64(m["message"]["data"])].append(m["message"]["messageId"])
                ack = {"ackIds": [got[-1]["ackId"]]}
                self.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:acknowledge", ack)
                continue
            offsets = self.offsets(sub)
            if offsets["current"] >= offsets["max"]:
                return collections.Counter({p: len(ids) for p, ids in self.drained_ids.items()})
            self.empty_with_backlog += 1
            time.sleep(0.5)


@dataclass
class Failure:
    at: float  # time.monotonic()
    what: str  # publish, pull or ack
    detail: str


@dataclass
class Traffic:
    """A client publishing and pulling through haproxy the whole time, from two threads (so a request
    stuck on a dead node holds up only one of them). It records every payload answered 200, every
    payload pulled, and every request that failed (a non-2xx answer or no answer)."""

    api: Api
    topic: str
    sub: str
    batch: int = 5
    pause: float = 0.02
    published: list[str] = field(default_factory=list)
    pulled: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[Failure] = field(default_factory=list)
    requests: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Traffic:
        prefix = unique("m")
        self._threads = [
            threading.Thread(target=self._publisher, args=(prefix,), daemon=True),
            threading.Thread(target=self._consumer, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.api.timeout + 10)

    def _attempt(self, what: str, method: str, path: str, body: Any) -> requests.Response | None:
        with self._lock:
            self.requests += 1
        try:
            r = self.api.request(method, path, body)
        except requests.RequestException as exc:
            self._fail(what, f"{type(exc).__name__}: {exc}")
            return None
        if r.status_code != 200:
            self._fail(what, f"HTTP {r.status_code}: {r.text[:200]}")
            return None
        return r

    def _fail(self, what: str, detail: str) -> None:
        with self._lock:
            self.failures.append(Failure(time.monotonic(), what, detail))

    def _publisher(self, prefix: str) -> None:
        seq = 0
        path = f"/projects/{PROJECT}/topics/{self.topic}:publish"
        while not self._stop.is_set():
            payloads = [f"{prefix}-{seq + i}" for i in range(self.batch)]
            seq += self.batch
            r = self._attempt("publish", "POST", path, {"messages": [{"data": b64(p)} for p in payloads]})
            if r is not None:
                with self._lock:
                    self.published.extend(payloads)
            time.sleep(self.pause)

    def _consumer(self) -> None:
        base = f"/projects/{PROJECT}/subscriptions/{self.sub}"
        while not self._stop.is_set():
            r = self._attempt("pull", "POST", f"{base}:pull", {"maxMessages": "50", "returnImmediately": "true"})
            got = r.json()["receivedMessages"] if r is not None else []
            if got:
                with self._lock:
                    self.pulled.update(unb64(m["message"]["data"]) for m in got)
                self._attempt("ack", "POST", f"{base}:acknowledge", {"ackIds": [got[-1]["ackId"]]})
            else:
                time.sleep(self.pause)

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "published": len(self.published),
            "failed": len(self.failures),
            "failures": [f"{f.what}: {f.detail}" for f in self.failures],
        }


def check_log(api: Api, published: list[str], audit: str) -> int:
    """Read the untouched ``audit`` subscription once: every payload answered 200 is in the log, and
    no message (a message id) is delivered twice. A payload may be in the log under two message ids,
    rarely: librdkafka's idempotent producer can write a batch again when a partition's leader
    changes while it is in flight (docs/ansible.md, "Exactly once in the log?"). Such copies are
    counted, and more than one in a hundred fails, as a systematic fault would. Returns their count."""
    api.drain(audit)
    ids = api.drained_ids
    missing = [p for p in published if not ids.get(p)]
    assert not missing, f"{len(missing)} answered 200 but not in the log: {missing[:5]}"
    twice = {p: ids[p] for p in published if len(set(ids[p])) != len(ids[p])}
    assert not twice, (
        f"{len(twice)} delivered twice under one message id (payload: ids): {dict(list(twice.items())[:5])}"
    )
    copies = {p: ids[p] for p in published if len(ids[p]) > 1}
    if copies:
        print(f"\n[multinode] written twice by the producer (payload: message ids): {dict(list(copies.items())[:5])}")
    assert len(copies) <= len(published) // 100, (
        f"{len(copies)} of {len(published)} written more than once: {dict(list(copies.items())[:5])}"
    )
    return len(copies)


def check_nothing_lost(api: Api, traffic: Traffic, live: str, audit: str) -> dict[str, int]:
    """Every message answered 200 was pulled from ``live`` (at least once), and is in the log
    (``check_log``); the counts lost, redelivered, and written twice."""
    pulled = traffic.pulled + api.drain(live)
    missing = [p for p in traffic.published if pulled[p] == 0]
    assert not missing, f"{len(missing)} answered 200 but never pulled: {missing[:5]}"
    copies = check_log(api, traffic.published, audit)
    return {
        "lost": len(missing),
        "redelivered": sum(n - 1 for p, n in pulled.items() if n > 1),
        "written_twice": copies,
    }


def report(name: str, figures: dict[str, Any]) -> None:
    """Print a measured outcome (pytest -s shows it; docs/ansible.md quotes them) and keep it in
    .cache/molecule/multinode-results.json."""
    print(f"\n[multinode] {name}: {json.dumps(figures)}")
    out = ROOT / ".cache" / "molecule" / "multinode-results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(out.read_text()) if out.exists() else {}
    data[name] = figures
    out.write_text(json.dumps(data, indent=2) + "\n")


# ---------------------------------------------------------------------- push -------------------
class Receiver:
    """An HTTPS push endpoint on this machine's end of the bridge, its certificate from the test CA
    (which the nodes' ams_push_ca_src makes the push workers trust)."""

    def __init__(self) -> None:
        import ssl
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.verification = ""
        self.received: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self, status: int, text: str = "") -> None:
                raw = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                self._answer(200, receiver.verification)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with receiver.lock:
                    receiver.received.append(unb64(body["message"]["data"]))
                self._answer(200)

        address = SCENARIO_VARS["multinode_bridge_address"]
        self.server = ThreadingHTTPServer((address, 0), Handler)
        tls = ROOT / ".cache" / "artifacts" / "tls"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls / "multinode.pem", tls / "multinode.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://{address}:{self.server.server_address[1]}/push"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def counts(self) -> collections.Counter[str]:
        with self.lock:
            return collections.Counter(self.received)


def push_subscription(api: Api, name: str, topic: str, receiver: Receiver) -> None:
    """A verified push subscription to ``receiver``."""
    config = {"type": "http_endpoint", "pushEndpoint": receiver.url, "retryPolicy": {"type": "linear", "period": 100}}
    created = api.subscription(name, topic, push=config)
    receiver.verification = created["pushConfig"]["verificationHash"]
    api.call("POST", f"/projects/{PROJECT}/subscriptions/{name}:verifyPushEndpoint")


def push_owner(api: Api, name: str) -> str | None:
    """The node whose push worker delivers the subscription now (its pushStatus), if one does."""
    status = api.call("GET", f"/projects/{PROJECT}/subscriptions/{name}").get("pushStatus", "")
    marker = "(push worker "
    if "currently active" not in status or marker not in status:
        return None
    worker = status.split(marker, 1)[1]
    return next((node for node in GROUPS["ams"] if worker.startswith(f"{node}-")), None)
