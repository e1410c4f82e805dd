"""The service as an operator runs it: status, version, CORS, plain HTTP, settings file, admin verbs."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import requests

from tests.helpers import ROOT, AmsServer, Api, error_of, free_port, prometheus_samples, run_ams, sample

#: The release being built (pyproject.toml), which the installed package reports.
RELEASE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def ams(*args: str) -> subprocess.CompletedProcess[str]:
    return run_ams(*args)


def test_status_needs_no_token(server: AmsServer) -> None:
    r = requests.get(f"{server.url}/status", timeout=10)
    assert r.status_code == 200
    status = r.json()
    assert status["status"] == "ok", status
    assert [s["status"] for s in status["push_servers"]] == ["SERVING"], status
    assert r.headers["Content-Type"] == "application/json; charset=utf-8"


def test_status_when_push_is_disabled(make_server: Any) -> None:
    srv = make_server(ams_push_enabled="false")
    assert srv.api().ok("GET", "/status") == {"status": "ok", "push_functionality": "disabled"}
    project = srv.api().new_project()
    srv.api().ok("PUT", f"/projects/{project}/topics/t")
    body = {
        "topic": f"projects/{project}/topics/t",
        "pushConfig": {"type": "mattermost", "mattermostUrl": "https://m.example"},
    }
    r = srv.api().put(f"/projects/{project}/subscriptions/s", body)
    assert error_of(r) == {"code": 409, "message": "Push functionality is currently disabled", "status": "CONFLICT"}


def test_version_shows_release_only_to_admins(api: Api) -> None:
    anonymous = api.as_("").ok("GET", "/version")
    assert {"build_time", "golang", "compiler", "os", "architecture"} <= set(anonymous)
    assert "release" not in anonymous
    assert api.ok("GET", "/version")["release"] == RELEASE
    viewer = api.new_user(service_roles=["admin_viewer"])
    assert "release" in api.as_(viewer["token"]).ok("GET", "/version")


def test_ams_version_prints_the_release() -> None:
    done = ams("--version")
    assert (done.returncode, done.stdout) == (0, f"ams {RELEASE}\n")


def test_token_in_the_query_string(server: AmsServer, api: Api) -> None:
    project = api.new_project()
    r = requests.get(f"{server.url}/projects/{project}", params={"key": server.token}, timeout=10)
    assert (r.status_code, r.json()["name"]) == (200, project)


def test_cors_headers(server: AmsServer) -> None:
    r = requests.options(f"{server.url}/status", timeout=10)
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "x-api-key" in r.headers["Access-Control-Allow-Headers"]


def test_plain_http_without_tls_files(make_server: Any) -> None:
    srv = make_server(tls=False)
    assert srv.url.startswith("http://")
    assert requests.get(f"{srv.url}/status", timeout=10).json()["status"] == "ok"


def test_settings_file_and_environment(tmp_path: Path, tls_files: tuple[str, str, str]) -> None:
    config = tmp_path / "ams.yml"
    config.write_text(
        f"service_token: from-file\npull_wait_seconds: 0.5\ntls_cert: {tls_files[0]}\ntls_key: {tls_files[1]}\n"
    )
    srv = AmsServer(
        tmp_path / "data",
        tls=tls_files[:2],
        token="from-file",
        env={"AMS_CONFIG": str(config), "AMS_SERVICE_TOKEN": ""},
    )
    # AMS_SERVICE_TOKEN="" from the environment wins over the file: no service token at all
    srv.start()
    try:
        assert srv.api().get("/projects").status_code == 401
    finally:
        srv.stop()
    srv.env = {"AMS_CONFIG": str(config)}
    srv.token = "from-file"
    srv.start()
    try:
        assert srv.api().get("/projects").status_code == 200
    finally:
        srv.stop()


def test_bad_settings_stop_the_command_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "ams.yml"
    config.write_text("port: seventy\n")
    done = ams("serve", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 2
    assert "port" in done.stderr


def test_make_run_prints_an_example_that_reaches_the_server_it_starts(tmp_path: Path) -> None:
    """The README's quick start on other ports (``make run PORT=...``): the curl line that the
    bootstrap prints names the port the server then listens on, and its token works there."""
    port, grpc_port = free_port(), free_port()
    while grpc_port == port:
        grpc_port = free_port()
    data = tmp_path / "data"
    command = ["make", "--no-print-directory", "run", f"PORT={port}", f"GRPC_PORT={grpc_port}", f"DATA={data}"]
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "try: curl" not in line:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.1))
        found = re.fullmatch(r"try: curl -H 'x-api-key: (\S+)' (\S+)\n", line)
        assert found, line
        token, url = found.groups()
        assert url == f"http://127.0.0.1:{port}/v1/projects"
        while True:  # the server starts after the bootstrap
            try:
                answer = requests.get(url, headers={"x-api-key": token}, timeout=5)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "make run: the server did not answer"
                time.sleep(0.2)
        assert answer.status_code == 200, answer.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
        reader.join(30)  # at the end of its output: the whole group is gone
        if proc.stdout is not None:
            proc.stdout.close()


def test_admin_verbs(make_server: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = ams("admin", "bootstrap", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    token = done.stderr.split("token of 'admin': ")[1].split()[0]
    assert ams("admin", "bootstrap", "--data-dir", str(data)).stderr.count(token) == 1  # idempotent
    assert ams("admin", "create-project", "ARGO", "--data-dir", str(data)).returncode == 0
    made = ams("admin", "create-user", "alice", "--project", "ARGO:publisher,consumer", "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    shown = ams("admin", "show-token", "alice", "--data-dir", str(data))
    assert shown.returncode == 0
    again = ams("admin", "create-user", "alice", "--data-dir", str(data))
    assert (again.returncode, again.stderr.strip()) == (1, "ams: User already exists")
    bad_role = ams("admin", "create-user", "bob", "--service-role", "wizard", "--data-dir", str(data))
    assert (bad_role.returncode, bad_role.stderr.strip()) == (1, "ams: invalid role: wizard")

    srv = make_server(data)
    admin = srv.api(token)
    assert admin.ok("GET", "/projects/ARGO")["name"] == "ARGO"
    alice = admin.ok("GET", "/users/alice")
    assert alice["token"] == shown.stdout.strip()
    assert alice["projects"][0]["roles"] == ["publisher", "consumer"]


def test_admin_verbs_on_backend_kafka_reach_a_running_node_at_once(make_server: Any, tmp_path: Path) -> None:
    """``ams admin`` is a plain process (no gevent patching) with the ZooKeeper clients of backend
    kafka: the metadata cache and the subscription owners. It once failed to start at all (kazoo
    refused a gevent handler there), so the appliance's metrics timer wrote nothing. Its changes
    reach a running node's metadata cache for the node's next request, a cached "no such
    project" included."""
    srv = make_server(tmp_path / "data", backend="kafka", ams_consume_owner="true")
    admin = srv.api(srv.token)
    assert admin.get("/projects/FROMCLI").status_code == 404  # now cached as missing on the node
    env = {**os.environ, **srv.env, "AMS_SERVICE_TOKEN": srv.token}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "ams_app", *args]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)

    made = cli("admin", "create-project", "FROMCLI", "--description", "made by ams admin")
    assert made.returncode == 0, made.stderr
    assert admin.ok("GET", "/projects/FROMCLI")["description"] == "made by ams admin"
    out = tmp_path / "ams.prom"
    written = cli("admin", "metrics", "--output", str(out))
    assert written.returncode == 0, written.stderr
    assert "# TYPE ams_topic_messages_total counter" in out.read_text()


def test_tokens_stay_out_of_the_access_log(make_server: Any) -> None:
    srv = make_server()
    secret = srv.api().new_user()["token"]
    requests.get(f"{srv.url}/users/profile", params={"key": secret}, timeout=10)
    srv.api().get(f"/users:byToken/{secret}")
    srv.stop()
    log = srv.log()
    assert "/users/profile?key=REDACTED" in log
    assert "/users:byToken/REDACTED" in log
    assert secret not in log
    assert srv.token not in log


def test_silent_connections_are_closed(make_server: Any) -> None:
    srv = make_server(tls=False, ams_client_timeout="1")
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
        conn.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")  # never finishes the request
        started = time.monotonic()
        answer = b""
        while chunk := conn.recv(1000):  # until the server closes the connection
            answer += chunk
        assert 0.5 < time.monotonic() - started < 5
        assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    assert requests.get(f"{srv.url}/status", timeout=10).status_code == 200


def test_check_config_validates_a_settings_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yml"
    good.write_text("backend: embedded\nport: 8099\nservice_token: s3cr3t-token\n")
    done = ams("check-config", "--config", str(good))
    assert done.returncode == 0, done.stderr
    assert "settings are valid: backend embedded, listening on 127.0.0.1:8099" in done.stdout
    for text, reason in [
        ("port: 8099\nbogus: 1\n", "unknown setting 'bogus'"),
        ("backend: kafka\n", "backend kafka needs kafka_bootstrap_servers or zookeeper_hosts"),
        ("push_worker: elsewhere\n", "push_worker must be in-process or external"),
    ]:
        bad = tmp_path / "bad.yml"
        bad.write_text(text)
        done = ams("check-config", "--config", str(bad))
        assert done.returncode == 2, text
        assert reason in done.stderr, done.stderr


def test_admin_metrics_writes_the_service_wide_figures(make_server: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = make_server(data, ams_metrics_flush_seconds="0.2")
    admin = srv.api(srv.token)
    admin.ok("POST", "/projects/MET", {"description": "metrics"})
    admin.ok("PUT", "/projects/MET/topics/t1")
    admin.publish("MET", "t1", "hello-00", "hello-01", "hello-02")  # 12 base64 characters each
    out = tmp_path / "textfile" / "ams.prom"
    out.parent.mkdir()
    deadline = time.monotonic() + 20
    while True:  # the counters reach the store at the server's next flush
        done = ams("admin", "metrics", "--data-dir", str(data), "--output", str(out))
        assert done.returncode == 0, done.stderr
        text = out.read_text()
        samples = prometheus_samples(text)
        if sample(samples, "ams_topic_messages_total", project="MET", topic="t1") == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sample(samples, "ams_topic_messages_total", project="MET", topic="t1") == 3, text
    assert sample(samples, "ams_topic_bytes_total", project="MET", topic="t1") == 36, text
    assert sample(samples, "ams_project_published_messages_total", project="MET") == 3, text
    assert sample(samples, "ams_service_figures_ok") == 1, text
    assert "ams_node_cpu_percent" not in text  # the one-shot command's own figures mean nothing
    assert "process_cpu_seconds_total" not in text
    assert out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["ams.prom"]  # replaced, no staging file left
    missing = ams("admin", "metrics", "--data-dir", str(data), "--output", str(tmp_path / "nowhere" / "x.prom"))
    assert missing.returncode == 1
    assert "No such file or directory" in missing.stderr
