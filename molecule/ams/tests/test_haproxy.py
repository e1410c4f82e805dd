"""Testinfra checks of the haproxy role in the appliance (molecule/ams, inventories/test).

haproxy terminates TLS on 127.0.0.1:38443 in front of the appliance's AMS node (127.0.0.1:38080); the
container uses host networking, so the HTTP checks run from this machine with the test CA of
.cache/artifacts/tls. The drain check runs the role's server_state entry point as
playbooks/ams_upgrade.yml does, on the only node, and readies it again.
"""

from __future__ import annotations

import csv
import io
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid
import warnings
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
VARS = yaml.safe_load((PROJECT / "inventories" / "test" / "group_vars" / "all.yml").read_text())
CA_FILE = PROJECT / ".cache" / "artifacts" / "tls" / "ca.pem"
CONTAINER = "ams-ams"

FRONTEND = f"https://127.0.0.1:{VARS['haproxy_frontend_port']}"
STATS = f"http://127.0.0.1:{VARS['haproxy_stats_port']}/"
METRICS = f"http://127.0.0.1:{VARS['haproxy_prometheus_port']}/metrics"
TOKEN = VARS["ams_service_token"]
BACKEND = "ams_nodes"
BY_SUBSCRIPTION = "ams_nodes_by_subscription"
ALIVE = "ams_nodes_alive"
SERVER = CONTAINER  # haproxy_backend_servers: one server per host of the ams group, named after it
SOCKET = "/run/haproxy/admin.sock"
CONFIG = "/etc/haproxy/haproxy.cfg"
PEM = "/etc/haproxy/certs/ams.pem"


def api(method: str, path: str, json: object | None = None, timeout: float = 30) -> requests.Response:
    return requests.request(
        method,
        FRONTEND + path,
        json=json,
        headers={"x-api-key": TOKEN},
        verify=str(CA_FILE),
        timeout=timeout,
    )


def pull(project: str, sub: str, *, immediately: bool) -> requests.Response:
    body = {"maxMessages": 1, "returnImmediately": immediately}
    return api("POST", f"/v1/projects/{project}/subscriptions/{sub}:pull", body)


def server_stat(host, backend: str = BACKEND) -> dict[str, str]:
    """Our server's row of `show stat` on the admin socket, read inside the container."""
    out = host.check_output(f"echo 'show stat' | socat -t 5 stdio UNIX-CONNECT:{SOCKET}")
    rows = csv.DictReader(io.StringIO(out.lstrip("# ")))
    return next(r for r in rows if r["pxname"] == backend and r["svname"] == SERVER)


def wait_for_status(host, wanted: str, timeout: float = 30) -> dict[str, str]:
    return wait_for_status_in(host, BACKEND, wanted, timeout)


def wait_for_status_in(host, backend: str, wanted: str, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        row = server_stat(host, backend)
        if row["status"] == wanted or time.monotonic() > deadline:
            return row
        time.sleep(0.5)


def set_server_state(state: str) -> subprocess.CompletedProcess[str]:
    """The role's server_state entry point, through molecule/ams/server_state.yml, as a rolling upgrade uses it."""
    env = {
        **os.environ,
        "PATH": f"{PROJECT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_ROLES_PATH": str(PROJECT / "roles"),
        "ANSIBLE_CONFIG": str(PROJECT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = [
        str(PROJECT / ".venv" / "bin" / "ansible-playbook"),
        *("-i", f"{CONTAINER},", "-c", "containers.podman.podman"),
        *("-e", f"haproxy_server_name={SERVER}", "-e", f"haproxy_server_state={state}"),
        str(SCENARIO / "server_state.yml"),
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_haproxy_is_running_and_enabled(host):
    service = host.service("haproxy")
    try:
        assert service.is_running
        assert service.is_enabled
    except AssertionError:
        print(host.run("journalctl -u haproxy --no-pager -n 50").stdout)
        raise


@pytest.mark.parametrize(
    "address",
    [
        f"tcp://127.0.0.1:{VARS['haproxy_frontend_port']}",
        f"tcp://127.0.0.1:{VARS['haproxy_stats_port']}",
        f"tcp://127.0.0.1:{VARS['haproxy_prometheus_port']}",
    ],
)
def test_listening(host, address):
    assert host.socket(address).is_listening


def test_admin_socket_answers(host):
    # haproxy binds "<path>.<pid>.tmp" and renames it, so ss does not list the socket under its path
    assert host.file(SOCKET).is_socket
    assert host.file(SOCKET).mode == 0o660
    info = host.check_output(f"echo 'show info' | socat -t 5 stdio UNIX-CONNECT:{SOCKET}")
    assert "Version: 2.6" in info


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        (CONFIG, "root", "haproxy", 0o640),
        ("/etc/haproxy/certs", "root", "haproxy", 0o750),
        (PEM, "root", "root", 0o600),
        ("/etc/systemd/system/haproxy.service.d/override.conf", "root", "root", 0o644),
    ],
)
def test_file_owner_and_mode(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_deployed_config_is_valid_and_managed(host):
    check = host.run(f"haproxy -c -f {CONFIG}")
    assert check.rc == 0, check.stdout + check.stderr
    config = host.file(CONFIG).content_string
    assert "Ansible managed" in config
    # the statistics page keeps only a crypt hash of its password
    assert VARS["haproxy_stats_password"] not in config
    assert "password '$6$" in config


def test_status_through_haproxy():
    response = requests.get(f"{FRONTEND}/v1/status", verify=str(CA_FILE), timeout=10)
    assert response.status_code == 200, response.text


def test_ams_round_trip_through_haproxy():
    project, topic, sub = f"P{uuid.uuid4().hex[:8]}", "T", "S"
    assert api("POST", f"/v1/projects/{project}", {}).status_code == 200
    assert api("PUT", f"/v1/projects/{project}/topics/{topic}").status_code == 200
    created = api("PUT", f"/v1/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/{topic}"})
    assert created.status_code == 200, created.text
    published = api("POST", f"/v1/projects/{project}/topics/{topic}:publish", {"messages": [{"data": "aGVsbG8="}]})
    assert published.status_code == 200, published.text
    assert len(published.json()["messageIds"]) == 1
    pulled = pull(project, sub, immediately=True)
    assert pulled.status_code == 200, pulled.text
    assert [m["message"]["data"] for m in pulled.json()["receivedMessages"]] == ["aGVsbG8="]


def test_console_through_haproxy():
    # the web console (docs/console.md) reaches the AMS nodes as /v1 does, its headers unchanged;
    # the wheel the role installs carries the built files (tools/artifacts.py)
    response = requests.get(f"{FRONTEND}/console/", verify=str(CA_FILE), timeout=10)
    assert response.status_code == 200, response.text[:500]
    assert response.headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self';")
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"
    assert 'src="/console/assets/' in response.text  # the built page, not a 404 of an unbuilt one


def test_ams_errors_pass_through_unchanged():
    # a wrong token is refused by AMS itself, behind haproxy: its JSON error envelope reaches the client
    response = requests.get(f"{FRONTEND}/v1/projects", headers={"x-api-key": "wrong"}, verify=str(CA_FILE), timeout=10)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == 401


def test_http2_is_offered():
    ctx = ssl.create_default_context(cafile=str(CA_FILE))
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", VARS["haproxy_frontend_port"]), timeout=10) as raw,
        ctx.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("version", ["TLSv1", "TLSv1_1"])
def test_tls_below_1_2_is_refused(version):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(CA_FILE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # setting old versions is deprecated, which is the point
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = getattr(ssl.TLSVersion, version)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer the old protocol at all
    with (
        socket.create_connection(("127.0.0.1", VARS["haproxy_frontend_port"]), timeout=10) as raw,
        pytest.raises(ssl.SSLError) as refused,
    ):
        ctx.wrap_socket(raw, server_hostname="localhost")
    # the server's alert, not a client-side refusal
    assert "PROTOCOL_VERSION" in str(refused.value).upper().replace(" ", "_")


def test_stats_page_needs_the_password():
    assert requests.get(STATS, timeout=10).status_code == 401
    auth = ("admin", VARS["haproxy_stats_password"])
    assert requests.get(STATS, auth=("admin", "wrong"), timeout=10).status_code == 401
    page = requests.get(STATS + ";csv", auth=auth, timeout=10)
    assert page.status_code == 200
    assert f"{BACKEND},{SERVER}," in page.text


def test_backend_server_is_up_on_the_stats_socket(host):
    row = wait_for_status(host, "UP")
    assert row["status"] == "UP", row
    assert row["check_status"] == "L7OK", row
    # the node never gets more than haproxy_server_maxconn connections per backend (default 400)
    assert row["slim"] == str(VARS.get("haproxy_server_maxconn", 400)), row
    assert server_stat(host, BY_SUBSCRIPTION)["slim"] == row["slim"]
    # the live-nodes fallback checks the same node for being alive only (haproxy_liveness_check_path)
    alive = wait_for_status_in(host, ALIVE, "UP")
    assert (alive["status"], alive["check_status"], alive["slim"]) == ("UP", "L7OK", row["slim"]), alive


def test_prometheus_exporter_reports_the_server(host):
    # haproxy's built-in exporter, without a password; haproxy 2.6 names the state in a label
    assert wait_for_status(host, "UP")["status"] == "UP"
    page = requests.get(METRICS, timeout=10)
    assert page.status_code == 200, page.text[:500]
    assert page.headers["Content-Type"].startswith("text/plain")
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page.text)
        for s in family.samples
    }
    assert ("haproxy_process_start_time_seconds", frozenset()) in samples
    up = frozenset({"proxy": BACKEND, "server": SERVER, "state": "UP"}.items())
    assert samples[("haproxy_server_status", up)] == 1


def test_drain_waits_for_sessions_then_ready_brings_the_server_back(host):
    project, topic, sub = f"D{uuid.uuid4().hex[:8]}", "T", "S"
    assert api("POST", f"/v1/projects/{project}", {}).status_code == 200
    assert api("PUT", f"/v1/projects/{project}/topics/{topic}").status_code == 200
    body = {"topic": f"projects/{project}/topics/{topic}"}
    assert api("PUT", f"/v1/projects/{project}/subscriptions/{sub}", body).status_code == 200

    # a long-poll pull on an empty subscription holds a session on the node (10 s by default), in
    # the backend that routes a subscription's pulls by its path (haproxy_route_by_subscription)
    # Under load (CI runs the other scenario beside this one) a stats read through `podman exec`
    # may take longer than the poll lasts: a poll that ended unseen is followed by another.
    pulled: list[requests.Response] = []

    def long_poll() -> threading.Thread:
        thread = threading.Thread(target=lambda: pulled.append(pull(project, sub, immediately=False)))
        thread.start()
        return thread

    poll = long_poll()
    deadline = time.monotonic() + 60
    while int(server_stat(host, BY_SUBSCRIPTION)["scur"]) == 0 and time.monotonic() < deadline:
        if not poll.is_alive():
            poll = long_poll()
        time.sleep(0.1)
    assert int(server_stat(host, BY_SUBSCRIPTION)["scur"]) >= 1, "the long-poll pull holds no session on the node"

    set_server_state("drain")
    # drain returned only once the session had ended: the pull was answered, not cut
    assert not poll.is_alive()
    poll.join()
    assert pulled
    assert all(r.status_code == 200 for r in pulled), [r.text for r in pulled]
    # the tracking server took the drain with it; the live-nodes fallback was set alongside
    for backend in (BACKEND, BY_SUBSCRIPTION, ALIVE):
        row = server_stat(host, backend)
        assert (row["status"], row["scur"]) == ("DRAIN", "0"), row

    # the appliance's only node is drained: haproxy answers new requests itself, in the AMS error envelope
    refused = requests.get(f"{FRONTEND}/v1/status", verify=str(CA_FILE), timeout=10)
    assert refused.status_code == 503
    assert refused.json() == {"error": {"code": 503, "message": "Service Unavailable", "status": "UNAVAILABLE"}}

    # idempotent: a second drain changes nothing
    assert "changed=0" in set_server_state("drain").stdout

    set_server_state("ready")
    assert server_stat(host)["status"] == "UP"
    assert wait_for_status_in(host, ALIVE, "UP")["status"] == "UP"
    assert requests.get(f"{FRONTEND}/v1/status", verify=str(CA_FILE), timeout=10).status_code == 200
