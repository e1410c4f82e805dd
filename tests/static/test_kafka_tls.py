"""The kafka role's security mode (``kafka_security_enabled``) writes the broker configuration that
tools/secure_services.py runs and tests/api/test_secure_links.py proves against a real broker
(docs/production.md, "Security"). The role's templates are rendered with Ansible's own templating, as in
test_tool_configs.py, and compared key by key; each difference allowed is listed here, with why. Off, the
role writes only its PLAINTEXT listener and nothing of the rest.

The role's users and ACLs are checked here too, without a broker: the README's ACLs are the ones
tools/secure_services.py makes, and the role adds only those that Kafka's ``AclCommand --list`` lacks."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, load_tool
from tests.static.test_tool_configs import (
    KAFKA_DEFAULTS,
    compare,
    properties,
    render_handler_shell,
    render_role_template,
)

secure_services = load_tool("secure_services")
services = load_tool("services")

#: The role's default kafka_tls_dir: TlsFiles over it names the files as the role installs them, so the
#: key and trust store locations are compared too.
TLS = secure_services.TlsFiles(Path("/etc/kafka/tls"))
BROKER_PORT, CLIENT_PORT = 9091, 9093  # the role's defaults
ZK_TLS_PORT = 2182
ZNODE = secure_services.KAFKA_ZNODE

#: Set per host: this broker's id (derived from its place in the group; the test broker is 0) and data directory.
PER_HOST = {"broker.id", "log.dirs"}
SECURE_DIFFERENCES = {
    "group.initial.rebalance.delay.ms": "tests start consumers all the time; they need not wait 3 s",
    "offsets.topic.num.partitions": "one partition: the offsets topic is made at once on a test broker",
    "zookeeper.connection.timeout.ms": "a loaded test machine may take long to reach the local ZooKeeper",
}
#: Three brokers replicate what one test broker cannot: each topic thrice, acks=all writes on two replicas.
REPLICATION = {
    "default.replication.factor": "three brokers keep three replicas",
    "offsets.topic.replication.factor": "three brokers keep three replicas",
    "transaction.state.log.replication.factor": "three brokers keep three replicas",
    "transaction.state.log.min.isr": "two of the three replicas",
    "min.insync.replicas": "two of the three replicas, so one broker may restart",
}
#: What kafka_zookeeper_tls adds, on top of kafka_security_enabled.
ZOOKEEPER_TLS_KEYS = {
    "zookeeper.ssl.client.enable",
    "zookeeper.clientCnxnSocket",
    "zookeeper.ssl.keystore.type",
    "zookeeper.ssl.keystore.location",
    "zookeeper.ssl.truststore.type",
    "zookeeper.ssl.truststore.location",
    "zookeeper.set.acl",
}


def secure_test_broker(tmp_path: Path) -> dict[str, str]:
    return properties(
        secure_services.render_server_properties(tmp_path / "kafka", TLS, BROKER_PORT, CLIENT_PORT, ZK_TLS_PORT)
    )


def single(**variables: Any) -> dict[str, Any]:
    """One broker, bound and advertised as the test broker is (loopback, localhost), on its ZooKeeper."""
    return {
        "groups": {"kafka": ["host1"]},
        "hostvars": {"host1": {}},
        "kafka_listen_address": services.HOST,
        "kafka_advertised_address": "localhost",
        "kafka_zookeeper_connect": f"{services.HOST}:{ZK_TLS_PORT}{ZNODE}",
        **variables,
    }


def cluster(**variables: Any) -> dict[str, Any]:
    """Three brokers at 10.0.0.21-23, named kafka1-3, seen from the second, on three ZooKeepers' TLS port."""
    brokers = {f"host{i}": {"ansible_host": f"10.0.0.2{i}"} for i in (1, 2, 3)}
    return {
        "groups": {"kafka": list(brokers)},
        "hostvars": brokers,
        "inventory_hostname": "host2",
        "ansible_host": "10.0.0.22",
        "kafka_listen_address": "10.0.0.22",
        "kafka_advertised_address": "kafka2",
        "kafka_zookeeper_connect": "zk1:2182,zk2:2182,zk3:2182/kafka",
        **variables,
    }


SECURE = {"kafka_security_enabled": True, "kafka_zookeeper_tls": True}


def server_properties(**variables: Any) -> dict[str, str]:
    return properties(render_role_template("kafka", "server.properties.j2", kafka_version="3.9.1", **variables))


def test_one_secure_broker_is_the_secure_test_broker(tmp_path: Path) -> None:
    role = server_properties(**single(**SECURE))
    assert compare(secure_test_broker(tmp_path), role, PER_HOST, SECURE_DIFFERENCES, KAFKA_DEFAULTS) == []
    # the same listeners, addresses and files, not only the same keys
    assert role["listeners"] == f"BROKER://127.0.0.1:{BROKER_PORT},CLIENT://127.0.0.1:{CLIENT_PORT}"
    assert role["ssl.keystore.location"] == role["zookeeper.ssl.keystore.location"] == str(TLS.store("kafka"))
    assert role["ssl.truststore.location"] == role["zookeeper.ssl.truststore.location"] == str(TLS.ca)


def test_each_of_three_secure_brokers_is_the_secure_test_broker_replicated(tmp_path: Path) -> None:
    role = server_properties(**cluster(**SECURE))
    per_host = PER_HOST | {"listeners", "advertised.listeners", "zookeeper.connect"}
    differences = SECURE_DIFFERENCES | REPLICATION
    assert compare(secure_test_broker(tmp_path), role, per_host, differences, KAFKA_DEFAULTS) == []
    assert role["broker.id"] == "2"
    assert role["listeners"] == "BROKER://10.0.0.22:9091,CLIENT://10.0.0.22:9093"
    assert role["advertised.listeners"] == "BROKER://kafka2:9091,CLIENT://kafka2:9093"
    assert role["zookeeper.connect"] == "zk1:2182,zk2:2182,zk3:2182/kafka"
    assert [role[key] for key in REPLICATION] == ["3", "3", "3", "2", "2"]


def test_security_without_zookeeper_tls_leaves_zookeeper_plain(tmp_path: Path) -> None:
    role = server_properties(**single(kafka_security_enabled=True))
    differences = SECURE_DIFFERENCES | dict.fromkeys(ZOOKEEPER_TLS_KEYS, "kafka_zookeeper_tls is off")
    assert compare(secure_test_broker(tmp_path), role, PER_HOST, differences, KAFKA_DEFAULTS) == []
    assert ZOOKEEPER_TLS_KEYS & set(role) == set()


@pytest.mark.parametrize("topology", [single, cluster], ids=["one", "three"])
def test_without_security_nothing_of_it_is_written(tmp_path: Path, topology: Any) -> None:
    plain_test_broker = properties(services.render_server_properties(tmp_path / "kafka", 19092, 12181))
    security_keys = set(secure_test_broker(tmp_path)) - set(plain_test_broker)
    assert {"listener.security.protocol.map", "ssl.keystore.location", "super.users"} <= security_keys
    role = server_properties(**topology())
    assert security_keys & set(role) == set()
    assert [key for key in role if re.match(r"ssl\.|sasl\.|listener\.|zookeeper\.ssl|authorizer", key)] == []
    assert re.fullmatch(r"PLAINTEXT://[^,]+:9092", role["listeners"])
    assert re.fullmatch(r"PLAINTEXT://[^,]+:9092", role["advertised.listeners"])


# -------------------------------------------------------------------------- health checks ----
def restart_script(tmp_path: Path, **variables: Any) -> str:
    """The shell of the restart handler, rendered for the second of three brokers."""
    return render_handler_shell("kafka", tmp_path, **cluster(**variables))


def role_value(tmp_path: Path, expression: str, **variables: Any) -> Any:
    """A value of the role's vars, as the role's tasks see it for the second of three brokers."""
    template = tmp_path / "value.j2"
    template.write_text(f"{{{{ {expression} | to_json }}}}")
    return json.loads(render_role_template("kafka", str(template), **cluster(**variables)))


def test_the_secure_checks_ask_the_broker_listener_as_the_super_user(tmp_path: Path) -> None:
    tls_args = f"--tls-ca {TLS.ca} --tls-cert {TLS.cert('kafka')} --tls-key {TLS.key('kafka')}"
    script = restart_script(tmp_path, **SECURE)
    assert f'health() {{ /usr/local/sbin/kafka-health kafka2 9091 {tls_args} "$@"; }}' in script
    argv = role_value(tmp_path, "_kafka_health_argv", **SECURE)
    assert argv == ["/usr/local/sbin/kafka-health", "kafka2", "9091", *tls_args.split()]
    assert role_value(tmp_path, "_kafka_health_port", **SECURE) == BROKER_PORT


def test_without_security_the_checks_ask_the_plaintext_listener(tmp_path: Path) -> None:
    script = restart_script(tmp_path)
    assert 'health() { /usr/local/sbin/kafka-health 10.0.0.22 9092 "$@"; }' in script
    assert "--tls" not in script
    assert role_value(tmp_path, "_kafka_health_argv") == ["/usr/local/sbin/kafka-health", "10.0.0.22", "9092"]


# --------------------------------------------------------------------------- users and ACLs ----
def readme_example() -> dict[str, Any]:
    """The inventory example of the role's README that sets kafka_acls."""
    readme = (ROOT / "roles" / "kafka" / "README.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "kafka_acls:" in b]
    assert len(blocks) == 1, "one example of kafka_acls in roles/kafka/README.md"
    return dict(blocks[0])


#: What SecureServices.make_users() allows (tools/secure_services.py), as Kafka names it:
#: (resource type, pattern type, name, principal, operation).
SECURE_SERVICES_ACLS = {
    ("TOPIC", "LITERAL", "*", "User:ams", "ALL"),
    ("GROUP", "LITERAL", secure_services.AMS_GROUP, "User:ams", "READ"),
    ("CLUSTER", "LITERAL", "kafka-cluster", "User:ams", "DESCRIBE"),
    ("TOPIC", "LITERAL", "*", "User:spark", "READ"),
    ("TOPIC", "LITERAL", "*", "User:spark", "DESCRIBE"),
    ("GROUP", "PREFIXED", secure_services.SPARK_GROUP_PREFIX, "User:spark", "READ"),
    ("GROUP", "LITERAL", "ams-spark-bounds", "User:spark", "READ"),
}


def acl_list_output(acls: set[tuple[str, str, str, str, str]]) -> list[str]:
    """AclCommand --list's standard output lines (Kafka 3.9: ResourcePattern and AccessControlEntry's
    toString, the entries tab-indented after a space, a space and an empty line after the last)."""
    text = ""
    for resource in sorted({acl[:3] for acl in acls}):
        kind, pattern, name = resource
        entries = [
            f"\t(principal={principal}, host=*, operation={operation}, permissionType=ALLOW)"
            for *found, principal, operation in sorted(acls)
            if tuple(found) == resource
        ]
        pattern_text = f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"
        text += f"Current ACLs for resource `{pattern_text}`: \n " + "\n".join(entries) + " \n\n"
    return text.splitlines()


def acl_calls(tmp_path: Path, present: set[tuple[str, str, str, str, str]]) -> list[list[str]]:
    listed = {"stdout_lines": acl_list_output(present)}
    return list(
        role_value(tmp_path, "_kafka_acl_add_args", kafka_acls=readme_example()["kafka_acls"], __kafka_acl_list=listed)
    )


def test_the_readme_acls_are_the_secure_test_brokers(tmp_path: Path) -> None:
    example = readme_example()
    wanted = role_value(tmp_path, "_kafka_acl_wanted", kafka_acls=example["kafka_acls"])
    assert {tuple(json.loads(acl["key"])) for acl in wanted} == SECURE_SERVICES_ACLS
    assert [user["name"] for user in example["kafka_scram_users"]] == [secure_services.AMS_USER, "spark"]


def add(principal: str, pattern: str, operations: list[str], *resources: str) -> list[str]:
    """AclCommand's arguments that add ``operations`` on ``resources`` for ``principal``."""
    argv = ["--add", "--allow-principal", principal, "--resource-pattern-type", pattern]
    for operation in operations:
        argv += ["--operation", operation]
    return argv + list(resources)


def test_a_cluster_without_acls_gets_them_in_one_call_per_principal_pattern_and_operations(tmp_path: Path) -> None:
    assert acl_calls(tmp_path, set()) == [
        add("User:ams", "literal", ["All"], "--topic", "*"),
        add("User:ams", "literal", ["Read"], "--group", "ams-reader"),
        add("User:ams", "literal", ["Describe"], "--cluster"),
        add("User:spark", "literal", ["Describe", "Read"], "--topic", "*"),
        add("User:spark", "prefixed", ["Read"], "--group", "spark-kafka-"),
        add("User:spark", "literal", ["Read"], "--group", "ams-spark-bounds"),
    ]


def test_a_cluster_with_every_acl_gets_none(tmp_path: Path) -> None:
    assert acl_calls(tmp_path, SECURE_SERVICES_ACLS) == []


def test_only_the_missing_acls_are_added_and_others_do_not_count(tmp_path: Path) -> None:
    present = SECURE_SERVICES_ACLS - {
        ("TOPIC", "LITERAL", "*", "User:spark", "DESCRIBE"),
        ("CLUSTER", "LITERAL", "kafka-cluster", "User:ams", "DESCRIBE"),
    }
    # an ACL of the same operation but another pattern type, resource or principal is not the one wanted
    present |= {
        ("TOPIC", "PREFIXED", "*", "User:spark", "DESCRIBE"),
        ("CLUSTER", "LITERAL", "kafka-cluster", "User:x", "DESCRIBE"),
    }
    assert acl_calls(tmp_path, present) == [
        add("User:ams", "literal", ["Describe"], "--cluster"),
        add("User:spark", "literal", ["Describe"], "--topic", "*"),
    ]


def test_resources_lacking_the_same_operations_share_a_call(tmp_path: Path) -> None:
    acls = [
        {"principal": "User:a", "resource_type": "topic", "name": "t1", "operations": ["Read", "Describe"]},
        {"principal": "User:a", "resource_type": "group", "name": "g1", "operations": ["Describe", "Read"]},
        {"principal": "User:a", "resource_type": "topic", "name": "t2", "pattern": "prefixed", "operations": ["Read"]},
        {"principal": "User:b", "resource_type": "topic", "name": "t1", "operations": ["Read"]},
    ]
    calls = role_value(tmp_path, "_kafka_acl_add_args", kafka_acls=acls, __kafka_acl_list={"stdout_lines": []})
    assert calls == [
        add("User:a", "literal", ["Describe", "Read"], "--topic", "t1", "--group", "g1"),
        add("User:a", "prefixed", ["Read"], "--topic", "t2"),
        add("User:b", "literal", ["Read"], "--topic", "t1"),
    ]


def test_the_scram_markers_change_with_the_password_only(tmp_path: Path) -> None:
    def markers(password: str) -> dict[str, str]:
        users = [{"name": "ams", "password": password}, {"name": "spark", "password": "s"}]
        return dict(role_value(tmp_path, "_kafka_scram_markers", kafka_scram_users=users))

    first, again, changed = markers("secret"), markers("secret"), markers("secret2")
    assert first == again
    assert first["ams"] != changed["ams"]
    assert first["spark"] == changed["spark"]
    assert all(re.fullmatch(r"[0-9a-f]{64}", marker) for marker in first.values())
    assert "secret" not in json.dumps(first)
