"""Testinfra checks for the zookeeper role (run by `molecule verify` against the scenario's container).

The container shares the host's network, so the four-letter words are sent from this machine's Python to
127.0.0.1:22181, the client port molecule.yml sets.
"""

from __future__ import annotations

import socket

import pytest

ADDRESS = "127.0.0.1"
CLIENT_PORT = 22181
ZOO_CFG = "/etc/zookeeper/zoo.cfg"
MYID = "/var/lib/zookeeper/myid"


def four_letter_word(word: str) -> str:
    with socket.create_connection((ADDRESS, CLIENT_PORT), timeout=5) as conn:
        conn.sendall(word.encode())
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


@pytest.fixture(scope="module")
def zoo_cfg(host) -> str:
    return host.file(ZOO_CFG).content_string


def test_service_is_running_and_enabled(host):
    service = host.service("zookeeper")
    if not service.is_running:
        print(host.run("journalctl -u zookeeper --no-pager -n 50").stdout)
    assert service.is_running
    assert service.is_enabled


def listeners(host) -> set[tuple[str, int]]:
    """(address, port) of every TCP listener in the container; Java shows IPv4 as [::ffff:a.b.c.d]."""
    found = set()
    for line in host.check_output("ss -tlnH").splitlines():
        address, _, port = line.split()[3].rpartition(":")
        found.add((address.removeprefix("[::ffff:").strip("[]"), int(port)))
    return found


def test_client_port_listens_on_the_configured_address(host):
    assert (ADDRESS, CLIENT_PORT) in listeners(host)


@pytest.mark.parametrize("port", [22888, 23888])
def test_standalone_server_opens_no_quorum_port(host, port):
    assert port not in {listening for _, listening in listeners(host)}


def test_server_runs_as_the_zookeeper_user(host):
    assert host.process.get(comm="java").user == "zookeeper"


@pytest.mark.parametrize(
    "line",
    [
        f"clientPort={CLIENT_PORT}",
        f"clientPortAddress={ADDRESS}",
        "dataDir=/var/lib/zookeeper",
        "4lw.commands.whitelist=ruok,srvr,mntr",
        "admin.enableServer=false",
    ],
)
def test_zoo_cfg_has(zoo_cfg, line):
    assert line in zoo_cfg.splitlines()


def test_zoo_cfg_has_no_server_lines_for_a_single_member(zoo_cfg):
    # one member: standalone, no server.N line (ZooKeeper logs an error for a one-server ensemble)
    assert not [line for line in zoo_cfg.splitlines() if line.startswith("server.")]


def test_zoo_cfg_carries_the_ansible_managed_header(zoo_cfg):
    assert "# Ansible managed" in zoo_cfg.splitlines()[:3]


def test_myid_is_the_position_in_the_group(host):
    assert host.file(MYID).content_string.strip() == "1"


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        (ZOO_CFG, "root", "zookeeper", 0o640),
        ("/etc/zookeeper/log4j.properties", "root", "zookeeper", 0o640),
        (MYID, "root", "zookeeper", 0o640),
        ("/var/lib/zookeeper", "zookeeper", "zookeeper", 0o750),
        ("/etc/systemd/system/zookeeper.service", "root", "root", 0o644),
    ],
)
def test_file_ownership_and_mode(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_ruok_answers_imok_from_the_host():
    assert four_letter_word("ruok") == "imok"


def test_srvr_reports_standalone_mode_from_the_host():
    assert "Mode: standalone" in four_letter_word("srvr").splitlines()


@pytest.mark.parametrize("path", ["/etc", "/usr"])
def test_no_collateral_damage(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert directory.user == "root"
    assert directory.group == "root"
