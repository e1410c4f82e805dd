"""Test helpers: a real AMS server in a subprocess, and a small HTTP client for it."""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.util
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

import requests
from requests.adapters import HTTPAdapter

if TYPE_CHECKING:
    from ams_app.backends.mongo.store import MongoMetadataStore
    from ams_app.backends.store import MetadataStore

ROOT = Path(__file__).resolve().parent.parent


def load_services_tool() -> ModuleType:
    """tools/services.py: the tests drive it as operators do."""
    return load_tool("services")


def load_tool(tool: str) -> ModuleType:
    """tools/<tool>.py, the module ``tools.<tool>``."""
    return importlib.import_module(f"tools.{tool}")


def load_script(path: Path, name: str) -> ModuleType:
    """A file outside any package (a role's files/ script without the .py suffix) as a
    module named ``name``, loaded once; registered in sys.modules before it runs, as dataclasses look
    their module up while the class is made."""
    if name in sys.modules:
        return sys.modules[name]
    loader = SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def run_probe(script: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """A role's health script against 127.0.0.1:``port``, as its handlers run it."""
    return subprocess.run(
        [sys.executable, str(script), "127.0.0.1", str(port), "--timeout", "5", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


S = TypeVar("S", bound=socketserver.BaseServer)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    """``server`` answering in a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def server_port(server: socketserver.BaseServer) -> int:
    return int(server.server_address[1])  # type: ignore[index]


def service_settings() -> dict[str, str]:
    """Where the Kafka backend's servers are: ``AMS_TEST_*`` variables, else what
    ``make services-up`` wrote to .cache/services/env, else its default ports."""
    found = {
        "AMS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
        "AMS_MONGO_URI": "mongodb://127.0.0.1:27018",
        "AMS_ZOOKEEPER_HOSTS": "127.0.0.1:12181",
        "AMS_KAFKA_ZNODE": "/ams-kafka",
    }
    env_file = ROOT / ".cache" / "services" / "env"
    if env_file.exists():
        for line in env_file.read_text().split():
            key, _, value = line.partition("=")
            if key in found and value:
                found[key] = value
    for key in found:
        override = os.environ.get(key.replace("AMS_", "AMS_TEST_", 1))
        if override:
            found[key] = override
    return found


@contextlib.contextmanager
def scratch_mongo_store(prefix: str) -> Iterator[MongoMetadataStore]:
    """A MongoDB store (ams_app/backends/mongo/store.py) on the tests' MongoDB-wire server, in a
    database of its own named after ``prefix``, dropped and closed on the way out."""
    from ams_app.backends.mongo.store import MongoMetadataStore

    database = unique(prefix).replace("-", "_")
    store = MongoMetadataStore(service_settings()["AMS_MONGO_URI"], database, 10)
    try:
        yield store
    finally:
        store.client.drop_database(database)
        store.close()


@contextlib.contextmanager
def either_store(kind: str, data_dir: Path, prefix: str) -> Iterator[MetadataStore]:
    """A metadata store of ``kind``: "sqlite" (a file under ``data_dir``) or "mongo" (a database of
    its own on the tests' MongoDB-wire server, see ``scratch_mongo_store``), closed on the way out.
    The caller checks first that the servers are there (tests/conftest.py ``require_backend``)."""
    if kind == "mongo":
        with scratch_mongo_store(prefix) as mongo:
            yield mongo
        return
    from ams_app.backends.sqlite.store import SqliteMetadataStore

    embedded = SqliteMetadataStore(str(data_dir / "metadata.db"))
    try:
        yield embedded
    finally:
        embedded.close()


def services_reachable(settings: dict[str, str], timeout: float = 2.0) -> str | None:
    """None when Kafka and the MongoDB-wire server answer on their ports; else what is missing."""
    kafka = settings["AMS_KAFKA_BOOTSTRAP_SERVERS"].split(",")[0]
    mongo = settings["AMS_MONGO_URI"].split("//", 1)[-1].split("/")[0].split(",")[0]
    for name, address in (("Kafka", kafka), ("MongoDB", mongo)):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
        except OSError as exc:
            return f"{name} at {address}: {exc} (start the servers with: make services-up)"
    return None


def backend_env(backend: str) -> dict[str, str]:
    """Settings (environment) that make a server use ``backend``, in a database of its own."""
    if backend == "embedded":
        return {"AMS_BACKEND": "embedded"}
    return {
        **service_settings(),
        "AMS_BACKEND": "kafka",
        "AMS_MONGO_DATABASE": unique("ams_test").replace("-", "_"),
        "AMS_KAFKA_TIMEOUT_SECONDS": "20",
    }


def run_ams(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m ams_app ARGS`` from the tree, its output captured; ``env``: the whole environment
    (default: this process's)."""
    return subprocess.run(
        [sys.executable, "-m", "ams_app", *args],
        cwd=ROOT,
        env=os.environ.copy() if env is None else env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def database_state(db: Any) -> dict[str, Any]:
    """Every collection of a MongoDB database with its documents and the names of its indexes: to
    compare before and after what must not write to it."""
    return {
        name: (sorted(map(str, db[name].find())), sorted(db[name].index_information()))
        for name in sorted(db.list_collection_names())
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text page, by (name, labels), parsed by prometheus-client's
    own parser (so a page it cannot parse fails the test)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class AmsServer:
    """``ams serve`` on loopback, started and stopped like an operator would."""

    def __init__(
        self,
        data_dir: Path,
        *,
        tls: tuple[str, str] | None = None,
        token: str = "test-service-token",
        env: dict[str, str] | None = None,
        backend: str = "embedded",
        clock_shift: float = 0.0,
        listen: tuple[str, int] | None = None,
        args: Sequence[str] = (),
        source: Path | None = None,
    ) -> None:
        self.backend = backend
        self.args = list(args)  # more of ams serve's command line, e.g. ["--workers", "2"]
        self.source = source  # another tree of the code to run (benchmarks/publish.py --against)
        self.clock_shift = clock_shift  # seconds added to its wall clock (tests/shifted_clock.py)
        self.data_dir = data_dir
        self.tls = tls
        self.token = token
        self.address, self.port = listen or ("127.0.0.1", free_port())
        #: The Pub/Sub gRPC API's port (docs/pubsub.md): every test server has one, never its API's
        #: (two free_port() calls in a row may give the same port back).
        self.grpc_port = free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        # no proxy reuses connections here: idle keep-alive connections need no grace at a stop
        self.env = {
            "AMS_GRPC_PORT": str(self.grpc_port),
            "AMS_PULL_WAIT_SECONDS": "2",
            "AMS_SHUTDOWN_IDLE_SECONDS": "0.5",
            # the figures of a page are those of its scrape, however loaded the machine: the tests
            # read them right after what they change (the wait itself: tests/unit/ams_app/test_figures_aside.py)
            "AMS_PROMETHEUS_FIGURES_WAIT": "20",
            **backend_env(backend),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-server.log"

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def grpc_host(self) -> str:
        return f"{self.address}:{self.grpc_port}"

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}/v1"

    def start(self) -> AmsServer:
        cmd = [sys.executable, "-m", "ams_app", "serve", "--data-dir", str(self.data_dir)]
        if self.clock_shift:
            cmd[1:3] = ["-m", "tests.shifted_clock", str(self.clock_shift), "ams_app"]
        cmd += ["--host", self.address, "--port", str(self.port)]
        if self.tls:
            cmd += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        cmd += self.args
        env = {**os.environ, "AMS_SERVICE_TOKEN": self.token, **self.env}
        if self.source is not None:
            env["PYTHONPATH"] = str(self.source)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=self.source or ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()}")
            try:
                if requests.get(f"{self.url}/status", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"server did not answer in time: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the graceful path."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the crash path."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def api(self, token: str | None = None) -> Api:
        return Api(self.url, self.token if token is None else token)


class Api:
    """requests with the base URL and a token (in ``x-api-key``); ``transport`` (an adapter for the
    base URL) reaches a service in-process (tests/inprocess.py) instead of over a socket."""

    def __init__(self, base: str, token: str, transport: HTTPAdapter | None = None) -> None:
        self.base = base
        self.token = token
        self.transport = transport
        self.session = requests.Session()
        if transport is not None:
            self.session.mount(base.rsplit("/v1", 1)[0] + "/", transport)

    def as_(self, token: str) -> Api:
        return Api(self.base, token, self.transport)

    def close(self) -> None:
        """Close the session's pooled connections (a thread's own client, before the thread ends)."""
        self.session.close()

    def scrape(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        """The service's Prometheus page (``/metrics``, outside ``/v1``), parsed."""
        r = self.session.get(self.base.rsplit("/v1", 1)[0] + "/metrics", headers={"x-api-key": self.token}, timeout=30)
        assert r.status_code == 200, r.text
        return prometheus_samples(r.text)

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | str | None = None, **kw: Any) -> Any:
        headers = kw.pop("headers", {})
        if self.token:
            headers.setdefault("x-api-key", self.token)
        kw.setdefault("timeout", 30)
        if raw is not None:
            kw["data"] = raw
        elif body is not None:
            kw["json"] = body
        return self.session.request(method, self.base + path, headers=headers, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("PUT", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    # --- shortcuts for arranging a test -------------------------------------------------
    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.request(method, path, body, **kw)
        assert r.status_code == 200, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def new_project(self, prefix: str = "proj") -> str:
        name = unique(prefix)
        self.ok("POST", f"/projects/{name}", {"description": "test"})
        return name

    def new_user(self, name: str | None = None, **body: Any) -> dict[str, Any]:
        name = name or unique("user")
        return dict(self.ok("POST", f"/users/{name}", body))

    def publish(self, project: str, topic: str, *payloads: str, attributes: dict[str, str] | None = None) -> list[str]:
        messages = [{"data": b64(p), **({"attributes": attributes} if attributes else {})} for p in payloads]
        response = self.ok("POST", f"/projects/{project}/topics/{topic}:publish", {"messages": messages})
        return list(response["messageIds"])

    def pull(self, project: str, sub: str, n: int = 10, immediately: bool = True) -> list[dict[str, Any]]:
        body = {"maxMessages": str(n), "returnImmediately": "true" if immediately else "false"}
        return list(self.ok("POST", f"/projects/{project}/subscriptions/{sub}:pull", body)["receivedMessages"])

    def ack(self, project: str, sub: str, ack_ids: list[str]) -> Any:
        return self.post(f"/projects/{project}/subscriptions/{sub}:acknowledge", {"ackIds": ack_ids})


def error_of(response: Any) -> dict[str, Any]:
    """The error envelope of a response, asserting its shape."""
    assert response.headers["Content-Type"].startswith("application/json"), response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "status"}, body
    assert body["error"]["code"] == response.status_code
    return dict(body["error"])


def drop_database(database: str) -> None:
    """Drop a MongoDB database a test cluster used (best effort: the server may be gone)."""
    import contextlib

    from pymongo import MongoClient

    with contextlib.suppress(Exception):
        client: MongoClient[dict[str, Any]] = MongoClient(
            service_settings()["AMS_MONGO_URI"], serverSelectionTimeoutMS=5000
        )
        try:
            client.drop_database(database)
        finally:
            client.close()


class ClusterNode:
    """One node of a test cluster (tools/cluster.py), spoken to directly over plain HTTP."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url.rstrip("/") + "/v1"
        self.session = requests.Session()
        self.session.headers["x-api-key"] = token

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> requests.Response:
        headers = {"x-api-key": token} if token else None
        return self.session.request(method, self.url + path, json=body, timeout=60, headers=headers)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = self.request(method, path, body)
        assert r.status_code == 200, (method, path, r.status_code, r.text)
        return r.json() if r.content else None
