"""Testinfra checks of the mongodb role in the appliance (molecule/ams, inventories/test): the ferretdb
flavor, the store of the appliance's metadata and offsets.

The container shares the host's network, so the wire-protocol round trip runs from this machine with
pymongo. It restarts FerretDB under the running AMS node, which must find the store again (checked
through haproxy at the end).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
import requests
import yaml
from pymongo import MongoClient

ROOT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
VARS = yaml.safe_load((ROOT / "inventories" / "test" / "group_vars" / "all.yml").read_text())
SERVICE = "ferretdb"
ADDRESS = VARS["mongodb_bind_address"]
PORT = VARS["mongodb_port"]
VERSION = "v1.24.0"
USER = "ferretdb"
BINARY = f"/opt/ferretdb/ferretdb-{VERSION}"
LINK = "/usr/local/bin/ferretdb"
TEST_DB = "molecule_mongodb"


def _journal(host) -> str:
    return host.run(f"journalctl -u {SERVICE} --no-pager -n 50").stdout


def _client() -> MongoClient:
    return MongoClient(
        f"mongodb://{ADDRESS}:{PORT}/",
        directConnection=True,
        serverSelectionTimeoutMS=5000,
        connectTimeoutMS=5000,
    )


def _wait_until_ready(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        client = _client()
        try:
            if client.admin.command("ping").get("ok"):
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
        finally:
            client.close()


def test_service_is_running_and_enabled(host):
    service = host.service(SERVICE)
    assert service.is_running, _journal(host)
    assert service.is_enabled


def test_port_is_listening(host):
    assert host.socket(f"tcp://{ADDRESS}:{PORT}").is_listening, _journal(host)


def test_runs_as_its_system_user(host):
    user = host.user(USER)
    assert user.exists
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"
    main_pid = host.check_output(f"systemctl show -p MainPID --value {SERVICE}")
    assert host.process.get(pid=int(main_pid)).user == USER


def test_binary_is_versioned_and_linked(host):
    binary = host.file(BINARY)
    assert binary.is_file
    assert (binary.user, binary.group, binary.mode) == ("root", "root", 0o755)
    link = host.file(LINK)
    assert link.is_symlink
    assert link.linked_to == BINARY
    assert f"version: {VERSION}" in host.check_output(f"{LINK} --version")


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        ("/var/lib/ferretdb", USER, USER, 0o750),
        ("/var/lib/ferretdb/state", USER, USER, 0o750),
        ("/etc/ferretdb", "root", "root", 0o755),
        ("/etc/ferretdb/ferretdb.env", "root", USER, 0o640),
        ("/etc/systemd/system/ferretdb.service", "root", "root", 0o644),
    ],
)
def test_paths_have_owner_and_mode(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_configuration_is_managed_and_sqlite_without_telemetry(host):
    env = host.file("/etc/ferretdb/ferretdb.env").content_string
    assert "Ansible managed" in env
    for line in (
        "FERRETDB_HANDLER=sqlite",
        "FERRETDB_SQLITE_URL=file:/var/lib/ferretdb/",
        f"FERRETDB_LISTEN_ADDR={ADDRESS}:{PORT}",
        "FERRETDB_TELEMETRY=disable",
        f"FERRETDB_DEBUG_ADDR={VARS['mongodb_ferretdb_debug_addr']}",
    ):
        assert line in env.splitlines()
    unit = host.file("/etc/systemd/system/ferretdb.service").content_string
    assert "Ansible managed" in unit
    for line in (f"User={USER}", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict"):
        assert line in unit.splitlines()


def test_round_trip_survives_a_restart(host):
    marker = uuid.uuid4().hex
    client = _client()
    try:
        collection = client[TEST_DB]["molecule"]
        collection.insert_one({"_id": marker, "value": 42})
        assert collection.find_one({"_id": marker}) == {"_id": marker, "value": 42}
    finally:
        client.close()

    restart = host.run(f"systemctl restart {SERVICE}")
    assert restart.rc == 0, restart.stderr + _journal(host)
    _wait_until_ready()

    client = _client()
    try:
        collection = client[TEST_DB]["molecule"]
        assert collection.find_one({"_id": marker}) == {"_id": marker, "value": 42}, _journal(host)
        collection.delete_one({"_id": marker})
    finally:
        client.close()
    # the SQLite database lives in the data directory
    assert host.file(f"/var/lib/ferretdb/{TEST_DB}.sqlite").exists


def test_ams_finds_its_store_again_after_the_restart():
    """After test_round_trip_survives_a_restart: AMS writes to the restarted store (a new topic, which
    no cache answers) and reads it back, through haproxy."""
    api = f"https://127.0.0.1:{VARS['haproxy_frontend_port']}/v1/projects/APPLIANCE/topics/{uuid.uuid4().hex[:12]}"
    ca = str(ROOT / ".cache" / "artifacts" / "tls" / "ca.pem")
    headers = {"x-api-key": VARS["ams_service_token"]}
    project = api.split("/topics/")[0]
    deadline = time.monotonic() + 60
    while True:
        requests.post(project, json={}, headers=headers, verify=ca, timeout=10)  # 200, or 409 when there
        created = requests.put(api, headers=headers, verify=ca, timeout=10)
        if created.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert created.status_code == 200, created.text
    assert requests.get(api, headers=headers, verify=ca, timeout=10).json()["name"].endswith(api.rsplit("/", 1)[1])
    assert requests.delete(api, headers=headers, verify=ca, timeout=10).status_code == 200
