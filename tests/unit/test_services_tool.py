"""tools/services.py and tools/cluster.py: the configuration they render (no server is started
here)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, load_services_tool, load_tool

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


svc = load_services_tool()
cluster_tool = load_tool("cluster")


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


@pytest.fixture(scope="module")
def haproxy() -> str:
    """The haproxy binary; under CI=true it is installed (apt) when missing, as `install` would."""
    found = svc._which("haproxy")
    if found is None and IN_CI:
        svc.install_apt(["haproxy", "openssl"])
        found = svc._which("haproxy")
    if found is None:
        pytest.skip("haproxy is not installed (python -m tools.services install)")
    return str(found)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, haproxy: str) -> Any:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    return cluster_tool.make_tls(tmp_path_factory.mktemp("tls"))


def test_ports_default_and_env() -> None:
    assert svc.Ports.from_env({}) == svc.Ports(12181, 19092, 27018)
    ports = svc.Ports.from_env({"AMS_SVC_ZK_PORT": "2181", "AMS_SVC_KAFKA_PORT": "9092", "AMS_SVC_MONGO_PORT": "27017"})
    assert ports == svc.Ports(2181, 9092, 27017)
    with pytest.raises(svc.ServiceError):
        svc.Ports.from_env({"AMS_SVC_KAFKA_PORT": "nine"})
    with pytest.raises(svc.ServiceError):
        svc.Ports.from_env({"AMS_SVC_KAFKA_PORT": "12181"})


def test_connection_env() -> None:
    assert svc.connection_env(svc.Ports()) == {
        "AMS_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
        "AMS_MONGO_URI": "mongodb://127.0.0.1:27018",
        "AMS_ZOOKEEPER_HOSTS": "127.0.0.1:12181",
        "AMS_KAFKA_ZNODE": "/ams-kafka",
    }


def test_zoo_cfg(tmp_path: Path) -> None:
    cfg = _properties(svc.render_zoo_cfg(tmp_path / "zk", 12181))
    assert cfg["dataDir"] == str(tmp_path / "zk")
    assert cfg["clientPort"] == "12181"
    assert cfg["clientPortAddress"] == "127.0.0.1"
    assert cfg["admin.enableServer"] == "false"
    assert cfg["4lw.commands.whitelist"] == "ruok,srvr,mntr"
    assert cfg["tickTime"] == "2000"


def test_server_properties(tmp_path: Path) -> None:
    props = _properties(svc.render_server_properties(tmp_path / "kafka", 19092, 12181))
    assert props["broker.id"] == "0"
    assert props["listeners"] == props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path / "kafka")
    assert props["zookeeper.connect"] == "127.0.0.1:12181/ams-kafka"
    assert props["auto.create.topics.enable"] == "false"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor", "num.partitions"):
        assert props[key] == "1"


def test_ferretdb_storage_a_postgresql_of_its_own_by_default_or_sqlite(tmp_path: Path) -> None:
    assert svc.ferretdb_handler({}) == "pg"
    assert svc.ferretdb_handler({"AMS_SVC_FERRETDB_HANDLER": "sqlite"}) == "sqlite"
    assert svc.render_ferretdb_storage("sqlite", tmp_path, 15432) == [
        "--handler=sqlite",
        f"--sqlite-url=file:{tmp_path}/",
    ]
    assert svc.ferretdb_handler({"AMS_SVC_FERRETDB_HANDLER": "pg"}) == "pg"
    assert svc.render_ferretdb_storage("pg", tmp_path, 15433) == [
        "--handler=pg",
        "--postgresql-url=postgres://postgres@127.0.0.1:15433/postgres",
    ]
    assert svc.pg_port({"AMS_SVC_PG_PORT": "15433"}) == 15433
    with pytest.raises(svc.ServiceError, match="one of pg, sqlite"):
        svc.ferretdb_handler({"AMS_SVC_FERRETDB_HANDLER": "mongo"})
    assert svc.POSTGRES.marker == str(svc.POSTGRES.data)  # the server's -D: how its process is found


def test_postgresql_is_a_service_in_use_only_for_the_pg_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMS_SVC_FERRETDB_HANDLER", "sqlite")
    monkeypatch.setattr(svc.Service, "pid", lambda self: None)
    assert svc.services_in_use() == [svc.ZOOKEEPER, svc.KAFKA, svc.FERRETDB]
    monkeypatch.delenv("AMS_SVC_FERRETDB_HANDLER")
    assert svc.services_in_use() == [svc.ZOOKEEPER, svc.KAFKA, svc.FERRETDB, svc.POSTGRES]


def test_pom_names_kafka_and_a_log_binding() -> None:
    pom = svc.render_pom()
    assert f"<artifactId>kafka_{svc.SCALA_VERSION}</artifactId><version>{svc.KAFKA_VERSION}</version>" in pom
    assert "<artifactId>slf4j-reload4j</artifactId>" in pom


def test_node_settings_load_as_ams_settings(tmp_path: Path) -> None:
    from ams_app.settings import load_settings

    mapping = cluster_tool.node_settings(
        2, backend="kafka", token="tok", database="ams_test_x", data_dir=tmp_path, ports=svc.Ports()
    )
    path = tmp_path / "node2.yml"
    path.write_text(cluster_tool.render_node_settings(mapping))
    assert yaml.safe_load(path.read_text()) == mapping
    settings = load_settings(path, environ={})
    assert (settings.host, settings.port, settings.node_name) == ("127.0.0.1", 18082, "node2")
    assert settings.grpc_port == 18182  # the Pub/Sub gRPC API, plaintext behind haproxy's TLS
    assert not settings.tls_cert
    assert not settings.grpc_emulator_user
    assert settings.backend == "kafka"
    assert settings.mongo_uri == "mongodb://127.0.0.1:27018"
    assert settings.mongo_database == "ams_test_x"
    assert settings.kafka_bootstrap_servers == "127.0.0.1:19092"
    assert settings.service_token == "tok"
    assert settings.pull_wait_seconds == 10
    assert settings.kafka_replication_factor == 1
    assert settings.consume_owner is True  # one owner per subscription, as in production
    assert settings.zookeeper_hosts == "127.0.0.1:12181"  # which the owners need


def _haproxy_cfg(tmp_path: Path, pem: Path, nodes: int = 3) -> str:
    return str(
        cluster_tool.render_haproxy_cfg(
            [(f"node{n}", cluster_tool.node_port(n), cluster_tool.node_grpc_port(n)) for n in range(1, nodes + 1)],
            bind_port=8443,
            pem=pem,
            stats_socket=tmp_path / "haproxy.sock",
            pid_file=tmp_path / "haproxy.pid",
        )
    )


def test_haproxy_cfg_content(tmp_path: Path) -> None:
    cfg = _haproxy_cfg(tmp_path, tmp_path / "haproxy.pem")
    lines = [line.strip() for line in cfg.splitlines()]
    assert f"bind 127.0.0.1:8443 ssl crt {tmp_path / 'haproxy.pem'}" in lines
    assert "balance roundrobin" in lines
    assert "option httpchk GET /v1/status" in lines
    assert "http-check expect status 200" in lines
    assert "option redispatch" in lines
    assert "retries 3" in lines
    assert "retry-on conn-failure" in lines  # only what cannot have reached a node: a POST is never sent twice
    for timeout in ("timeout connect 2s", "timeout client 60s", "timeout server 60s"):
        assert timeout in lines
    assert f"stats socket {tmp_path / 'haproxy.sock'} mode 600 level admin" in lines
    errors = {int(line.split()[2]): line for line in lines if line.startswith("http-error status ")}
    assert sorted(errors) == [502, 503, 504]
    for code, line in errors.items():  # the balancer's own answers are the AMS envelope too
        body = json.loads(line.split(" string ", 1)[1].strip("'"))
        assert body["error"]["code"] == code
        assert set(body["error"]) == {"code", "message", "status"}
        assert 'content-type "application/json; charset=utf-8"' in line
    template = (ROOT / "roles" / "haproxy" / "templates" / "haproxy.cfg.j2").read_text()
    servers = [line for line in lines if line.startswith("server ")]
    checked = [f"server node{n} 127.0.0.1:{18080 + n} check inter 1s fall 2 rise 1" for n in (1, 2, 3)]
    tracking = [f"server node{n} 127.0.0.1:{18080 + n} track ams_nodes/node{n}" for n in (1, 2, 3)]
    grpc = [
        f"server node{n} 127.0.0.1:{18180 + n} track ams_nodes/node{n} on-marked-down shutdown-sessions"
        for n in (1, 2, 3)
    ]
    assert servers == checked + tracking + checked + grpc
    # the Pub/Sub gRPC API: TLS and HTTP/2 at haproxy, each connection whole to one node, as the role does
    grpc_frontend = cfg.split("frontend ams_https_grpc\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.strip() for line in grpc_frontend] == [
        "mode tcp",
        "option tcplog",
        f"bind 127.0.0.1:{cluster_tool.CLUSTER_GRPC_PORT} ssl crt {tmp_path / 'haproxy.pem'} alpn h2",
        f"timeout client {cluster_tool.GRPC_TIMEOUT}",
        "default_backend ams_nodes_grpc",
    ]
    assert "balance leastconn" in lines
    assert f"timeout server {cluster_tool.GRPC_TIMEOUT}" in lines
    # while no node passes /v1/status, the live ones answer: as in the haproxy role's template
    fallback = "use_backend ams_nodes_alive if !{ nbsrv(ams_nodes) gt 0 }"
    assert fallback in lines
    assert lines.index(fallback) < lines.index("use_backend ams_nodes_by_subscription if ams_subscription_cursor")
    assert f"option httpchk GET {cluster_tool.LIVENESS_PATH}" in lines
    defaults = (ROOT / "roles" / "haproxy" / "defaults" / "main.yml").read_text()
    assert f"haproxy_liveness_check_path: {cluster_tool.LIVENESS_PATH}\n" in defaults
    assert "use_backend {{ haproxy_backend_name }}_alive if !{ nbsrv({{ haproxy_backend_name }}) gt 0 }" in template
    # a subscription's cursor routes go by a hash of its path, as in the haproxy role's template
    assert f"acl ams_subscription_cursor path_reg {cluster_tool.SUBSCRIPTION_CURSOR_PATH}" in lines
    assert f"acl ams_subscription_cursor path_reg {cluster_tool.SUBSCRIPTION_CURSOR_PATH}\n" in template
    assert "balance hash path,field(1,:)\n    hash-type consistent\n" in template
    assert "use_backend ams_nodes_by_subscription if ams_subscription_cursor" in lines
    assert "balance hash path,field(1,:)" in lines
    assert "hash-type consistent" in lines
    with pytest.raises(ValueError, match="at least one node"):
        cluster_tool.render_haproxy_cfg([], bind_port=8443, pem=tmp_path, stats_socket=tmp_path, pid_file=tmp_path)


def test_haproxy_error_pages_are_the_haproxy_roles(tmp_path: Path) -> None:
    """The local haproxy answers its own errors with the role's messages (one list of facts)."""
    role = yaml.safe_load((ROOT / "roles" / "haproxy" / "vars" / "main.yml").read_text())["_haproxy_json_errors"]
    assert {e["code"]: (e["message"], e["status"]) for e in role} == cluster_tool.PROXY_ERRORS
    lines = [line.strip() for line in _haproxy_cfg(tmp_path, tmp_path / "haproxy.pem").splitlines()]
    pages = {int(line.split()[2]): line for line in lines if line.startswith("http-error status ")}
    for error in role:
        envelope = {"error": {"code": error["code"], "message": error["message"], "status": error["status"]}}
        assert json.loads(pages[error["code"]].split(" string ", 1)[1].strip("'")) == envelope


def test_haproxy_accepts_the_config(tmp_path: Path, haproxy: str, tls: Any) -> None:
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(_haproxy_cfg(tmp_path, tls.combined))
    done = subprocess.run([haproxy, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    cluster_tool.check_haproxy_cfg(cfg)
    cfg.write_text(cfg.read_text().replace("balance roundrobin", "balance nonsense"))
    with pytest.raises(svc.ServiceError, match="haproxy -c"):
        cluster_tool.check_haproxy_cfg(cfg)


def test_the_test_ca_signs_a_server_cert_for_loopback(tls: Any) -> None:
    import ssl

    files = tls
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.combined))
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-text", "-in", str(files.cert)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "IP Address:127.0.0.1" in text
    assert "DNS:localhost" in text
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(files.ca), str(files.cert)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert oct(files.combined.stat().st_mode & 0o777) == "0o600"
    assert cluster_tool.make_tls(files.ca.parent) == files  # made once


def test_parse_haproxy_stat() -> None:
    text = (
        "# pxname,svname,qcur,status,\n"
        "ams_https,FRONTEND,,OPEN,\n"
        "ams_nodes,node1,0,UP,\n"
        "ams_nodes,node2,0,DOWN,\n"
        "ams_nodes,BACKEND,0,UP,\n"
    )
    assert cluster_tool.parse_haproxy_stat(text) == {"node1": "UP", "node2": "DOWN"}
