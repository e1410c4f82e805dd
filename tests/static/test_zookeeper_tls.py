"""The zookeeper role's TLS mode (``zookeeper_tls_enabled``) writes the configuration that
tools/secure_services.py runs and tests/api/test_secure_links.py proves against a real ZooKeeper
(docs/production.md, "Security"). The role's templates are rendered with Ansible's own templating, as in
test_tool_configs.py, and compared key by key; each difference allowed is listed here, with why."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import load_tool
from tests.static.test_tool_configs import compare, properties, render_handler_shell, render_role_template

secure_services = load_tool("secure_services")

#: The role's default zookeeper_tls_dir: TlsFiles over it names the files as the role installs them, so
#: the key and trust store locations are compared too.
TLS = secure_services.TlsFiles(Path("/etc/zookeeper/tls"))
SECURE_PORT, PLAIN_PORT = 2182, 2181  # the role's defaults

#: ZooKeeper 3.8's defaults, for what only one side sets.
ZOOKEEPER_DEFAULTS = {
    "quorumListenOnAllIPs": "false",
    "autopurge.snapRetainCount": "3",
    "autopurge.purgeInterval": "0",
    "sslQuorum": "false",
}
#: The quorum over TLS, which the role writes whenever TLS is on.
QUORUM_TLS_KEYS = {
    "sslQuorum",
    "ssl.quorum.keyStore.type",
    "ssl.quorum.keyStore.location",
    "ssl.quorum.trustStore.type",
    "ssl.quorum.trustStore.location",
}
#: Set per host or per deployment: this host's data directory and the address the secure port binds to
#: (zookeeper_client_port_address in the role; loopback on the test server).
PER_HOST = {"dataDir", "secureClientPortAddress"}
TLS_DIFFERENCES = {
    "maxClientCnxns": "every test's client comes from 127.0.0.1: a per-address limit would count them as one",
    "4lw.commands.whitelist": "the role also answers mntr, for an operator's look; the test server the health words",
    "autopurge.purgeInterval": "a test server lives for minutes: there is nothing to purge",
    **dict.fromkeys(
        QUORUM_TLS_KEYS,
        "the test server is standalone, without a quorum; the role writes them for any group, one that grows too",
    ),
}


def secure_test_server(tmp_path: Path) -> dict[str, str]:
    return properties(secure_services.render_zoo_cfg(tmp_path / "zk", TLS, SECURE_PORT, PLAIN_PORT))


def ensemble(**variables: Any) -> dict[str, Any]:
    """Three members at 10.0.0.31-33, seen from the first, each with its secure port on its own address."""
    members = {
        f"host{i}": {"ansible_host": f"10.0.0.3{i}", "zookeeper_client_port_address": f"10.0.0.3{i}"} for i in (1, 2, 3)
    }
    return {"groups": {"zookeeper": list(members)}, "hostvars": members, **members["host1"], **variables}


STANDALONE = {"groups": {"zookeeper": ["host1"]}, "hostvars": {"host1": {}}}


def zoo_cfg(**variables: Any) -> dict[str, str]:
    return properties(render_role_template("zookeeper", "zoo.cfg.j2", **variables))


def test_the_standalone_tls_server_is_the_secure_test_servers(tmp_path: Path) -> None:
    role = zoo_cfg(**STANDALONE, zookeeper_tls_enabled=True)
    assert compare(secure_test_server(tmp_path), role, PER_HOST, TLS_DIFFERENCES, ZOOKEEPER_DEFAULTS) == []
    assert not [key for key in role if key.startswith("server.")]


def test_each_ensemble_member_is_the_secure_test_server_with_a_quorum_over_tls(tmp_path: Path) -> None:
    role = zoo_cfg(**ensemble(zookeeper_tls_enabled=True))
    servers = {key for key in role if key.startswith("server.")}
    assert compare(secure_test_server(tmp_path), role, PER_HOST | servers, TLS_DIFFERENCES, ZOOKEEPER_DEFAULTS) == []
    assert role["secureClientPortAddress"] == "10.0.0.31"
    assert {key: role[key] for key in sorted(servers)} == {f"server.{i}": f"10.0.0.3{i}:2888:3888" for i in (1, 2, 3)}
    # the quorum uses the member's own key store and the CA, as the client port does
    assert role["ssl.quorum.keyStore.location"] == role["ssl.keyStore.location"] == str(TLS.store("zookeeper"))
    assert role["ssl.quorum.trustStore.location"] == role["ssl.trustStore.location"] == str(TLS.ca)


@pytest.mark.parametrize("variables", [STANDALONE, ensemble()], ids=["standalone", "ensemble"])
def test_without_tls_nothing_of_it_is_written(tmp_path: Path, variables: dict[str, Any]) -> None:
    plain_test_server = properties(load_tool("services").render_zoo_cfg(tmp_path / "zk", PLAIN_PORT))
    tls_keys = (set(secure_test_server(tmp_path)) - set(plain_test_server)) | QUORUM_TLS_KEYS
    role = zoo_cfg(**variables)
    assert tls_keys & set(role) == set()
    assert [key for key in role if re.match(r"ssl|secure|enforce\.|authProvider\.", key)] == []
    assert role["clientPortAddress"] == variables.get("zookeeper_client_port_address", "0.0.0.0")


def class_path(**variables: Any) -> list[str]:
    unit = render_role_template("zookeeper", "zookeeper.service.j2", **STANDALONE, **variables)
    found = re.search(r"-cp (\S+)", unit)
    assert found, unit
    return found.group(1).split(":")


def test_the_tls_class_path_has_nettys_codec() -> None:
    assert secure_services.NETTY_CODEC_JAR in class_path(zookeeper_tls_enabled=True)
    assert secure_services.NETTY_CODEC_JAR not in class_path()
    assert class_path(zookeeper_tls_enabled=True)[: len(class_path())] == class_path()


def restart_script(tmp_path: Path, **variables: Any) -> str:
    """The shell of the restart handler, rendered for the first of three members."""
    return render_handler_shell("zookeeper", tmp_path, **ensemble(**variables))


def test_the_restart_handler_checks_the_peers_over_tls_and_itself_on_loopback(tmp_path: Path) -> None:
    script = restart_script(tmp_path, zookeeper_tls_enabled=True)
    assert 'peers=("10.0.0.32 2182" "10.0.0.33 2182" )' in script
    assert 'self="127.0.0.1 2181"' in script
    tls_args = f"--tls-ca {TLS.ca} --tls-cert {TLS.cert('zookeeper')} --tls-key {TLS.key('zookeeper')}"
    assert f'peer_health() {{ health "$@" {tls_args}; }}' in script
    assert not re.search(r"\bhealth \$peer", script), "a peer checked without TLS"
    assert "--tls" not in "".join(line for line in script.splitlines() if "$self" in line)


def test_without_tls_the_restart_handler_checks_the_peers_plain_client_port(tmp_path: Path) -> None:
    script = restart_script(tmp_path)
    assert 'peers=("10.0.0.32 2181" "10.0.0.33 2181" )' in script
    assert 'self="10.0.0.31 2181"' in script
    assert 'peer_health() { health "$@"; }' in script
    assert "--tls" not in script
