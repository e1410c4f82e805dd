"""Testinfra checks of the appliance that playbooks/site.yml deployed on one container (molecule/ams).

The container shares the host's network, so the checks also talk to the services straight from here:
the API through haproxy (TLS, the test CA of .cache/artifacts/tls), a push endpoint served by this
test and reached by the container's push worker, and the republisher's routes.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

ROOT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
VARS = yaml.safe_load((ROOT / "inventories" / "test" / "group_vars" / "all.yml").read_text())
# the ams role's defaults, for what the test inventory leaves to them (the backups)
ROLE_DEFAULTS = yaml.safe_load((ROOT / "roles" / "ams" / "defaults" / "main.yml").read_text())
BACKUP_DIR = VARS.get("ams_backup_dir", ROLE_DEFAULTS["ams_backup_dir"])
BACKUP_METRICS = VARS.get("ams_backup_metrics_output", ROLE_DEFAULTS["ams_backup_metrics_output"])
BACKUP_TEXTFILE_DIR = VARS.get(
    "ams_backup_metrics_textfile_directory", ROLE_DEFAULTS["ams_backup_metrics_textfile_directory"]
)
TLS = ROOT / ".cache" / "artifacts" / "tls"
TOKEN = VARS["ams_service_token"]
API = f"https://127.0.0.1:{VARS['haproxy_frontend_port']}/v1"
NODE = f"http://127.0.0.1:{VARS['ams_bind_port']}/v1"
# ams-republish@sites restarts every 10 s until its subscription exists: test_republisher_routes_by_attribute
SERVICES = ["zookeeper", "kafka", "ferretdb", "ams", "ams-push-worker", "haproxy"]
PORTS = [
    VARS["zookeeper_client_port"],
    VARS["kafka_port"],
    VARS["mongodb_port"],
    VARS["ams_bind_port"],
    VARS["haproxy_frontend_port"],
]
PROJECT = "APPLIANCE"  # the project the republisher of the test inventory reads
WAIT = 90.0


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def wait_until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.5)


class Api:
    """The AMS API through haproxy, as a client sees it."""

    def __init__(self) -> None:
        self.session = requests.Session()
        self.session.headers["x-api-key"] = TOKEN

    def call(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = (200,)) -> Any:
        # verify per request: a session's verify loses to REQUESTS_CA_BUNDLE from the environment
        r = self.session.request(method, API + path, json=body, timeout=30, verify=str(TLS / "ca.pem"))
        assert r.status_code in ok, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def pull(self, sub: str, n: int = 100) -> list[dict[str, Any]]:
        body = {"maxMessages": str(n), "returnImmediately": "true"}
        got = self.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:pull", body)["receivedMessages"]
        if got:
            ids = [m["ackId"] for m in got]
            self.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:acknowledge", {"ackIds": ids})
        return [m["message"] for m in got]


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule appliance"}, ok=(200, 409))
    return client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------- the host ---------------
@pytest.mark.parametrize("service", SERVICES)
def test_service_is_running_and_enabled(host, service):
    unit = host.service(service)
    if not unit.is_running:
        print(host.run(f"journalctl -u {service} --no-pager -n 60").stdout)
    assert unit.is_running
    assert unit.is_enabled


def test_metrics_timer_is_active_and_enabled(host):
    timer = host.service("ams-metrics.timer")
    assert timer.is_enabled
    assert host.run("systemctl is-active ams-metrics.timer").stdout.strip() == "active"


def test_backup_timer_is_active_and_enabled(host):
    """The container is the first (the only) host of the ams group: ams_backup_enabled by default."""
    timer = host.service("ams-backup.timer")
    assert timer.is_enabled
    assert host.run("systemctl is-active ams-backup.timer").stdout.strip() == "active"
    assert host.file(BACKUP_DIR).mode == 0o700
    assert (host.file(BACKUP_DIR).user, host.file(BACKUP_DIR).group) == ("ams", "ams")


@pytest.mark.parametrize("port", PORTS)
def test_port_listens_on_loopback(host, port):
    # the JVM (ZooKeeper, Kafka) binds an IPv4-mapped IPv6 socket
    sockets = (f"tcp://127.0.0.1:{port}", f"tcp://::ffff:127.0.0.1:{port}")
    assert any(host.socket(s).is_listening for s in sockets)


def test_settings_file_is_private_and_valid(host):
    settings = host.file("/etc/ams/ams.yml")
    assert (settings.user, settings.group, settings.mode) == ("root", "ams", 0o640)
    assert host.file("/etc/ams").mode == 0o750
    checked = host.run("/usr/local/bin/ams check-config --config /etc/ams/ams.yml")
    assert checked.rc == 0, checked.stderr
    assert "backend kafka" in checked.stdout


def test_version_lives_in_its_own_virtualenv(host):
    current = host.file("/opt/ams/current")
    assert current.is_symlink
    assert current.linked_to.startswith("/opt/ams/ams-")
    assert host.file(f"{current.linked_to}/bin/ams").is_file


def test_processes_run_as_the_ams_user(host):
    for unit in ("ams", "ams-push-worker"):
        pid = host.run(f"systemctl show -p MainPID --value {unit}").stdout.strip()
        assert pid not in ("", "0"), unit
        assert host.file(f"/proc/{pid}").user == "ams", unit


# the system's directories, and those the haproxy, java and mongodb roles write into
@pytest.mark.parametrize("path", ["/etc", "/usr", "/opt", "/etc/haproxy", "/usr/lib/jvm", "/usr/local/bin"])
def test_no_collateral_damage(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert (directory.user, directory.group) == ("root", "root")


# ---------------------------------------------------------------------- through haproxy --------
def test_status_through_haproxy_lists_the_push_worker(api):
    def workers() -> list[str]:
        return list(api.call("GET", "/status").get("push_servers") or [])

    assert wait_until(workers, "a push worker registered in ZooKeeper")


def test_publish_and_pull_through_haproxy(api):
    topic, sub = unique("t"), unique("s")
    api.call("PUT", f"/projects/{PROJECT}/topics/{topic}")
    api.call("PUT", f"/projects/{PROJECT}/subscriptions/{sub}", {"topic": f"projects/{PROJECT}/topics/{topic}"})
    payloads = [f"appliance-{i}" for i in range(20)]
    published = api.call(
        "POST", f"/projects/{PROJECT}/topics/{topic}:publish", {"messages": [{"data": b64(p)} for p in payloads]}
    )
    assert len(published["messageIds"]) == 20
    got: list[dict[str, Any]] = []
    wait_until(lambda: got.extend(api.pull(sub)) or len(got) >= 20, "the 20 messages pulled back")
    assert [base64.b64decode(m["data"]).decode() for m in got] == payloads


# ---------------------------------------------------------------------- the republisher --------
def test_republisher_routes_by_attribute(host, api):
    """ams-republish@sites reads APPLIANCE/all-sites and routes on the attribute ``site``."""
    topic = f"projects/{PROJECT}/topics"
    for name in ("all-sites", "site-GRNET", "site-CERN", "unroutable"):
        api.call("PUT", f"/projects/{PROJECT}/topics/{name}", ok=(200, 409))
    api.call("PUT", f"/projects/{PROJECT}/subscriptions/all-sites", {"topic": f"{topic}/all-sites"}, ok=(200, 409))
    routed = {}
    for name in ("site-GRNET", "site-CERN", "unroutable"):
        routed[name] = unique(f"r-{name}")
        api.call("PUT", f"/projects/{PROJECT}/subscriptions/{routed[name]}", {"topic": f"{topic}/{name}"})
    messages = [
        {"data": b64("g1"), "attributes": {"site": "GRNET"}},
        {"data": b64("c1"), "attributes": {"site": "CERN"}},
        {"data": b64("g2"), "attributes": {"site": "GRNET"}},
        {"data": b64("none")},
    ]
    api.call("POST", f"/projects/{PROJECT}/topics/all-sites:publish", {"messages": messages})
    # the unit retries every 10 s until the subscription exists, so allow for a restart or two
    got: dict[str, list[str]] = {name: [] for name in routed}

    def arrived() -> bool:
        for name, sub in routed.items():
            got[name].extend(base64.b64decode(m["data"]).decode() for m in api.pull(sub))
        return sum(len(v) for v in got.values()) >= 4

    wait_until(arrived, "the republished copies", timeout=120)
    assert got == {"site-GRNET": ["g1", "g2"], "site-CERN": ["c1"], "unroutable": ["none"]}
    unit = host.service("ams-republish@sites")
    assert unit.is_running
    assert unit.is_enabled
    pid = host.run("systemctl show -p MainPID --value ams-republish@sites").stdout.strip()
    assert host.file(f"/proc/{pid}").user == "ams"


# ---------------------------------------------------------------------- push delivery ----------
class Receiver:
    """An HTTPS push endpoint on 127.0.0.1, its certificate from the test CA (which the appliance's
    ams_push_ca_src makes the push worker trust)."""

    def __init__(self) -> None:
        self.verification = ""
        self.received: list[dict[str, Any]] = []
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
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.received.append(json.loads(body))
                self._answer(200)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(TLS / "server.pem", TLS / "server.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/push"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def test_push_worker_delivers_to_an_https_endpoint(api, receiver):
    topic, sub = unique("pt"), unique("ps")
    api.call("PUT", f"/projects/{PROJECT}/topics/{topic}")
    config = {"type": "http_endpoint", "pushEndpoint": receiver.url, "retryPolicy": {"type": "linear", "period": 100}}
    created = api.call(
        "PUT",
        f"/projects/{PROJECT}/subscriptions/{sub}",
        {"topic": f"projects/{PROJECT}/topics/{topic}", "pushConfig": config},
    )
    receiver.verification = created["pushConfig"]["verificationHash"]
    api.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:verifyPushEndpoint")
    payloads = [f"push-{i}" for i in range(5)]
    api.call("POST", f"/projects/{PROJECT}/topics/{topic}:publish", {"messages": [{"data": b64(p)} for p in payloads]})
    wait_until(lambda: len(receiver.received) >= 5, "5 push deliveries")
    delivered = [base64.b64decode(r["message"]["data"]).decode() for r in receiver.received]
    assert delivered == payloads
    # the original push server names the subscription with a leading slash
    assert {r["subscription"] for r in receiver.received} == {f"/projects/{PROJECT}/subscriptions/{sub}"}


# ---------------------------------------------------------------------- the metrics timer ------
def test_metrics_timer_writes_the_published_counts(host, api):
    topic = unique("mt")
    api.call("PUT", f"/projects/{PROJECT}/topics/{topic}")
    api.call("POST", f"/projects/{PROJECT}/topics/{topic}:publish", {"messages": [{"data": b64("m")}] * 3})
    expected = f'ams_topic_messages_total{{project="{PROJECT}",topic="{topic}"}} 3.0'  # prometheus-client's float
    prom = "/var/lib/ams/metrics/ams.prom"
    wait_until(lambda: expected in host.file(prom).content_string, f"{expected} in {prom}")
    assert host.file(prom).user == "ams"


# ---------------------------------------------------------------------- the backups -------------
def backup_figures(text: str) -> dict[str, float]:
    """The samples of a Prometheus text file, by metric name (labels, if any, left out)."""
    figures = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(None, 1)
            figures[name.split("{", 1)[0]] = float(value)
    return figures


def test_a_backup_run_writes_a_checksummed_archive_and_its_figures(host):
    started = int(host.run("date +%s").stdout)
    run = host.run("systemctl start ams-backup.service")  # a oneshot: returns when the backup ended
    if run.rc != 0:
        print(host.run("journalctl -u ams-backup --no-pager -n 60").stdout)
    assert run.rc == 0, run.stderr
    listed = host.run(f"ls -1 {BACKUP_DIR}")
    assert listed.rc == 0, listed.stderr
    archives = sorted(n for n in listed.stdout.split() if n.startswith("ams-backup-") and n.endswith(".tar"))
    assert archives, listed.stdout
    assert len(archives) <= ROLE_DEFAULTS["ams_backup_keep"]
    newest = archives[-1]
    for name in (newest, f"{newest}.sha256"):
        made = host.file(f"{BACKUP_DIR}/{name}")
        assert made.is_file, name
        assert (made.user, made.group, made.mode) == ("ams", "ams", 0o600), name
    checked = host.run(f"cd {BACKUP_DIR} && sha256sum -c {newest}.sha256")
    assert checked.rc == 0, checked.stdout + checked.stderr
    assert newest in checked.stdout
    assert checked.stdout.rstrip().endswith(": OK"), checked.stdout
    figures = backup_figures(host.file(BACKUP_METRICS).content_string)
    assert figures["ams_backup_last_success_timestamp_seconds"] >= started, figures
    assert figures["ams_backup_last_size_bytes"] > 0, figures
    # node exporter's textfile collector reads a copy (the image carries prometheus-node-exporter)
    if host.file(BACKUP_TEXTFILE_DIR).is_directory:
        copy = host.file(f"{BACKUP_TEXTFILE_DIR}/{Path(BACKUP_METRICS).name}")
        assert (copy.user, copy.mode) == ("root", 0o644)
        assert backup_figures(copy.content_string) == figures
