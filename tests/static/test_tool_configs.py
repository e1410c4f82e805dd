"""The local servers of tools/services.py and tools/cluster.py (make services-up, cluster-up) run the
configurations the roles write, except where a test needs otherwise: each such difference is listed
here, with why. The roles' templates are rendered with Ansible's own templating, over the roles'
defaults and vars, for one host; a change to one copy that the other does not follow fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.helpers import ROOT, load_services_tool, load_tool

services = load_services_tool()
cluster_tool = load_tool("cluster")
_loader = DataLoader()


def _trusted(value: Any) -> Any:
    """The roles' own files are templates (Ansible trusts them as such when it runs the role)."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def render_role_template(role: str, template: str, **variables: Any) -> str:
    found: dict[str, Any] = {}
    for kind in ("defaults", "vars"):
        found.update(_loader.load_from_file(str(ROOT / "roles" / role / kind / "main.yml")) or {})
    found = _trusted(found)
    found.update({"inventory_hostname": "host1", "ansible_managed": "Ansible managed", **variables})
    text = (ROOT / "roles" / role / "templates" / template).read_text()
    return str(Templar(loader=_loader, variables=found).template(trust_as_template(text)))


def render_handler_shell(role: str, tmp_path: Path, **variables: Any) -> str:
    """The shell of the role's first ``ansible.builtin.shell`` handler (its rolling restart),
    rendered as the role would render it with ``variables``."""
    handlers = (ROOT / "roles" / role / "handlers" / "main.yml").read_text()
    shell = re.search(r"ansible\.builtin\.shell: \|\n((?:    .*\n|\n)+)", handlers)
    assert shell, handlers
    template = tmp_path / "restart.sh.j2"
    template.write_text("".join(line.removeprefix("    ") + "\n" for line in shell.group(1).splitlines()))
    # an absolute path takes the place of the role's templates/ directory (pathlib's / operator)
    return render_role_template(role, str(template), **variables)


def properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def compare(
    local: dict[str, str], role: dict[str, str], per_host: set[str], differ: dict[str, str], defaults: dict[str, str]
) -> list[str]:
    """What differs between the two, beyond the keys set per host and the listed differences; a
    key only one side sets is compared with the server's default."""
    problems = []
    for key in sorted((set(local) | set(role)) - per_host - set(differ)):
        mine, theirs = local.get(key, defaults.get(key)), role.get(key, defaults.get(key))
        if mine != theirs:
            problems.append(f"{key}: tools/services.py {mine!r}, role {theirs!r}")
    problems += [f"{key}: listed as differing, but the same" for key in differ if local.get(key) == role.get(key)]
    return problems


# ------------------------------------------------------------------------------- Kafka ----
#: Kafka's defaults (3.9) for what only one side sets.
KAFKA_DEFAULTS = {
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "offsets.topic.num.partitions": "50",
    "log.retention.check.interval.ms": "300000",
    "zookeeper.connection.timeout.ms": "18000",
}
KAFKA_DIFFERENCES = {
    "group.initial.rebalance.delay.ms": "tests start consumers all the time; they need not wait 3 s",
    "offsets.topic.num.partitions": "one partition: the offsets topic is made at once on a test broker",
    "log.retention.check.interval.ms": "retention tests see old segments go within a minute",
    "zookeeper.connection.timeout.ms": "a loaded test machine may take long to reach the local ZooKeeper",
}


def test_the_local_kafka_broker_is_configured_as_the_roles_single_broker(tmp_path: Path) -> None:
    local = properties(services.render_server_properties(tmp_path / "kafka", 19092, 12181))
    role = properties(
        render_role_template(
            "kafka",
            "server.properties.j2",
            groups={"kafka": ["host1"]},
            hostvars={"host1": {}},
            ansible_host="127.0.0.1",
            kafka_version="3.9.1",
            kafka_zookeeper_connect="127.0.0.1:2181/kafka",
        )
    )
    per_host = {"broker.id", "listeners", "advertised.listeners", "log.dirs", "zookeeper.connect"}
    assert compare(local, role, per_host, KAFKA_DIFFERENCES, KAFKA_DEFAULTS) == []


# --------------------------------------------------------------------------- ZooKeeper ----
ZOOKEEPER_DEFAULTS = {"quorumListenOnAllIPs": "false"}
ZOOKEEPER_DIFFERENCES = {
    "maxClientCnxns": "every test's client comes from 127.0.0.1: a per-address limit would count them as one",
}


def test_the_local_zookeeper_is_configured_as_the_roles_standalone_server(tmp_path: Path) -> None:
    local = properties(services.render_zoo_cfg(tmp_path / "zk", 12181))
    role = properties(
        render_role_template("zookeeper", "zoo.cfg.j2", groups={"zookeeper": ["host1"]}, hostvars={"host1": {}})
    )
    per_host = {"dataDir", "clientPort", "clientPortAddress"}
    assert compare(local, role, per_host, ZOOKEEPER_DIFFERENCES, ZOOKEEPER_DEFAULTS) == []


# ----------------------------------------------------------------------------- haproxy ----
#: Directives that name this host's files, addresses, users, logging and limits: set per deployment.
HAPROXY_PER_HOST = re.compile(
    r"^(bind|server|default-server|timeout|log|stats|chroot|user|group|maxconn|pidfile|ssl-default-bind"
    r"|tune\.ssl|option httplog|option dontlognull)\b"
)
#: The sections whose behaviour the local balancer shares with the role's.
HAPROXY_SECTIONS = [
    "defaults",
    "frontend ams_https",
    "backend ams_nodes",
    "backend ams_nodes_by_subscription",
    "backend ams_nodes_alive",
    "frontend ams_https_grpc",  # the Pub/Sub gRPC API: TLS, each connection whole to one node
    "backend ams_nodes_grpc",
    "frontend ams_https_prometheus",  # haproxy's built-in Prometheus exporter (a scrape, not logged)
]


def haproxy_sections(text: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            current = line.strip()
            sections[current] = []
        elif not HAPROXY_PER_HOST.match(line.strip()):
            sections[current].append(" ".join(line.split()))
    return sections


@pytest.mark.parametrize("section", HAPROXY_SECTIONS)
def test_the_local_balancer_behaves_as_the_roles(tmp_path: Path, section: str) -> None:
    local = haproxy_sections(
        cluster_tool.render_haproxy_cfg(
            [("ams1", 8080, 8085)],
            bind_port=8443,
            pem=tmp_path / "ams.pem",
            stats_socket=tmp_path / "admin.sock",
            pid_file=tmp_path / "haproxy.pid",
        )
    )
    role = haproxy_sections(
        render_role_template(
            "haproxy",
            "haproxy.cfg.j2",
            haproxy_stats_enabled=False,
            haproxy_grpc_enabled=True,
            haproxy_backend_servers=[{"name": "ams1", "address": "127.0.0.1", "port": 8080, "grpc_port": 8085}],
        )
    )
    assert local[section] == role[section]


def test_the_json_error_pages_are_the_roles() -> None:
    role = {
        e["code"]: (e["message"], e["status"])
        for e in _loader.load_from_file(str(ROOT / "roles" / "haproxy" / "vars" / "main.yml"))["_haproxy_json_errors"]
    }
    assert role == cluster_tool.PROXY_ERRORS


def test_haproxy_verifies_the_nodes_against_the_internal_ca() -> None:
    """With haproxy_backend_tls_ca_src, every server line of the AMS backends (requests, checks, the
    subscription hash, gRPC) speaks TLS, refuses a certificate that does not chain to the internal CA
    and checks the node's name; without it, the nodes are spoken to in plain HTTP (and h2c)."""
    servers = [
        {"name": "ams1", "address": "10.0.0.11", "port": 8080, "grpc_port": 8085},
        {"name": "ams2", "address": "10.0.0.12", "port": 8080, "grpc_port": 8085, "verify_name": "ams2.internal"},
    ]

    def server_lines(**extra: object) -> dict[str, list[str]]:
        text = render_role_template(
            "haproxy", "haproxy.cfg.j2", haproxy_backend_servers=servers, haproxy_grpc_enabled=True, **extra
        )
        sections = {}
        current = ""
        for line in text.splitlines():
            if line and not line.startswith((" ", "#")):
                current = line.strip()
            elif line.strip().startswith(("server ", "default-server ")) and current.startswith("backend ams_nodes"):
                sections.setdefault(current, []).append(" ".join(line.split()))
        return sections

    secured = server_lines(haproxy_backend_tls_ca_src="/controller/ca.pem")
    assert set(secured) == {
        "backend ams_nodes",
        "backend ams_nodes_by_subscription",
        "backend ams_nodes_alive",
        "backend ams_nodes_grpc",
    }
    for section, lines in secured.items():
        first, second = (line for line in lines if line.startswith("server "))
        options = first if section.endswith(("subscription", "grpc")) else " ".join(lines)
        assert "ssl verify required ca-file /etc/haproxy/backend-ca.pem" in options, section
        if section.endswith("grpc"):  # gRPC's TLS wants HTTP/2 negotiated, as its clients do
            assert "ca-file /etc/haproxy/backend-ca.pem alpn h2 verifyhost" in first, first
        # the certificate must name the node: its inventory hostname, or the verify_name given
        assert (first.split()[-2:], second.split()[-2:]) == (["verifyhost", "ams1"], ["verifyhost", "ams2.internal"])
    plain = server_lines()
    assert not any("ssl" in line for lines in plain.values() for line in lines)


def test_the_grpc_backend_sends_each_node_its_grpc_port_and_follows_its_health() -> None:
    """Only nodes with a grpc_port get gRPC connections, on that port; each server tracks the node's
    server in ams_nodes (health, drain, maintenance) and its connections close when it goes DOWN."""
    servers = [
        {"name": "ams1", "address": "10.0.0.11", "port": 8080, "grpc_port": 8085},
        {"name": "ams2", "address": "fd00::12", "port": 8080, "grpc_port": 9085},
        {"name": "ams3", "address": "10.0.0.13", "port": 8080},
    ]
    text = render_role_template("haproxy", "haproxy.cfg.j2", haproxy_backend_servers=servers, haproxy_grpc_enabled=True)
    sections = haproxy_sections(text)
    assert "bind 0.0.0.0:8444 ssl crt /etc/haproxy/certs/ams.pem alpn h2" in text
    assert "timeout client 20m" in text
    lines = [" ".join(line.split()) for line in text.split("backend ams_nodes_grpc", 1)[1].splitlines()]
    assert [line for line in lines if line.startswith("server ")] == [
        "server ams1 10.0.0.11:8085 track ams_nodes/ams1 maxconn 400 on-marked-down shutdown-sessions",
        "server ams2 [fd00::12]:9085 track ams_nodes/ams2 maxconn 400 on-marked-down shutdown-sessions",
    ]
    assert "timeout server 20m" in lines
    assert sections["backend ams_nodes_grpc"] == ["mode tcp", "balance leastconn"]
    off = render_role_template("haproxy", "haproxy.cfg.j2", haproxy_backend_servers=servers)
    assert "_grpc" not in off


@pytest.mark.parametrize("shutdown_timeout", [0, 15, 60])
def test_the_api_units_stop_timeout_covers_the_parents_wait_for_its_workers(shutdown_timeout: int) -> None:
    """``ams serve`` with workers (ams_app/workers.py): SIGTERM to the parent alone (KillMode=mixed),
    which stops its workers and waits for them at most 2 * shutdown_timeout + 10 s; systemd waits
    longer before its SIGKILL."""
    from ams_app.settings import Settings
    from ams_app.workers import stop_seconds

    text = render_role_template("ams", "ams.service.j2", ams_shutdown_timeout=shutdown_timeout)
    unit = properties("\n".join(line for line in text.splitlines() if "=" in line))
    assert unit["KillMode"] == "mixed"
    assert unit["KillSignal"] == "SIGTERM"
    assert int(unit["TimeoutStopSec"]) >= stop_seconds(Settings(shutdown_timeout=shutdown_timeout)) + 10
