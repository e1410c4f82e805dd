"""How AMS reaches Kafka and ZooKeeper: the client options each security setting gives, and the
listener broker discovery picks (ams_app/backends/kafka/connect.py, ams_app/zookeeper.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.security import CREATOR_ALL_ACL

from ams_app.backends.kafka.connect import client_security, pick_endpoint
from ams_app.settings import SettingsError, load_settings
from ams_app.zookeeper import zookeeper_options

SECURED = {
    "broker": 0,
    "endpoints": ["BROKER://kafka1:9091", "CLIENT://kafka1:9093"],
    "listener_security_protocol_map": {"BROKER": "SSL", "CLIENT": "SASL_SSL"},
}


def settings(**values: Any) -> Any:
    return load_settings(environ={}, overrides={"backend": "kafka", "zookeeper_hosts": "zk1:2182", **values})


def test_plaintext_adds_no_option() -> None:
    assert client_security(settings()) == {}
    assert zookeeper_options(settings()) == {}


def test_sasl_ssl_with_scram() -> None:
    options = client_security(
        settings(
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_username="ams",
            kafka_sasl_password="secret",
            kafka_ca_file="/etc/ams/tls/ca.pem",
        )
    )
    assert options == {
        "security.protocol": "sasl_ssl",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": "/etc/ams/tls/ca.pem",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "ams",
        "sasl.password": "secret",
    }


def test_mutual_tls() -> None:
    options = client_security(
        settings(kafka_security_protocol="SSL", kafka_cert_file="/c.pem", kafka_key_file="/c.key")
    )
    assert options["security.protocol"] == "ssl"
    assert (options["ssl.certificate.location"], options["ssl.key.location"]) == ("/c.pem", "/c.key")
    assert "sasl.username" not in options


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "ams"}, "kafka_sasl_password"),
        ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_password": "x"}, "kafka_sasl_username"),
        ({"kafka_sasl_username": "ams", "kafka_sasl_password": "x"}, "kafka_security_protocol"),
        ({"kafka_security_protocol": "SSL", "kafka_cert_file": "/c.pem"}, "kafka_key_file"),
        ({"kafka_ca_file": "/ca.pem"}, "kafka_security_protocol"),
        ({"kafka_security_protocol": "SASL_PLAINTEXT"}, "kafka_security_protocol"),
        ({"zookeeper_cert_file": "/c.pem", "zookeeper_key_file": "/c.key"}, "zookeeper_tls"),
        ({"zookeeper_tls": "true", "zookeeper_cert_file": "/c.pem"}, "zookeeper_key_file"),
        ({"zookeeper_ca_file": "/ca.pem"}, "zookeeper_tls"),
    ],
)
def test_settings_that_cannot_work_are_refused(values: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        settings(**values)


def test_zookeeper_tls_with_a_certificate_makes_znodes_creator_only() -> None:
    options = zookeeper_options(
        settings(
            zookeeper_tls="true",
            zookeeper_ca_file="/ca.pem",
            zookeeper_cert_file="/ams.pem",
            zookeeper_key_file="/ams.key",
        )
    )
    assert options == {
        "use_ssl": True,
        "verify_certs": True,
        "check_hostname": True,
        "ca": "/ca.pem",
        "certfile": "/ams.pem",
        "keyfile": "/ams.key",
        "default_acl": CREATOR_ALL_ACL,
    }


def test_zookeeper_tls_without_a_certificate_leaves_acls_open() -> None:
    options = zookeeper_options(settings(zookeeper_tls="true"))
    assert options["use_ssl"] is True
    assert "default_acl" not in options


def test_discovery_takes_the_listener_of_the_client_protocol() -> None:
    assert pick_endpoint(SECURED, "", "SASL_SSL") == "kafka1:9093"
    assert pick_endpoint(SECURED, "", "SSL") == "kafka1:9091"
    assert pick_endpoint(SECURED, "", "PLAINTEXT") is None


def test_discovery_takes_a_named_listener() -> None:
    assert pick_endpoint(SECURED, "BROKER", "SASL_SSL") == "kafka1:9091"
    assert pick_endpoint(SECURED, "EXTERNAL", "SASL_SSL") is None


def test_discovery_of_a_plain_broker() -> None:
    plain = {"endpoints": ["PLAINTEXT://127.0.0.1:19092"], "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"}}
    assert pick_endpoint(plain, "", "PLAINTEXT") == "127.0.0.1:19092"
    # a map-less registration names its listeners after their protocols
    assert pick_endpoint({"endpoints": ["PLAINTEXT://k:9092"]}, "", "PLAINTEXT") == "k:9092"
    assert pick_endpoint({"host": "old", "port": 9092}, "", "PLAINTEXT") == "old:9092"
    assert pick_endpoint({"host": "old", "port": 9092}, "", "SASL_SSL") is None
