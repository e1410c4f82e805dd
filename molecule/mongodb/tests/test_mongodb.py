"""Testinfra checks for the mongodb role, ferretdb flavor (run by `molecule verify` in the scenario's container).

The container shares the host's network, so the wire-protocol round trip runs from this machine with pymongo.
"""

from __future__ import annotations

import time
import uuid

import pytest
from pymongo import MongoClient

SERVICE = "ferretdb"
ADDRESS = "127.0.0.1"
PORT = 27027
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
        "FERRETDB_DEBUG_ADDR=-",
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


@pytest.mark.parametrize("path", ["/etc", "/usr", "/usr/local/bin", "/opt"])
def test_no_collateral_damage(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert directory.user == "root"
    assert directory.group == "root"
