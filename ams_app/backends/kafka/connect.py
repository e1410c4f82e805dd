"""How AMS reaches Kafka: the client's security options, and the brokers found in ZooKeeper.

A broker may offer several listeners (docs/production.md, "Security"): in the appliance one for the
brokers among themselves (mutual TLS) and one for clients (SASL_SSL with SCRAM). AMS must pick the
client one. Kafka registers each broker in ZooKeeper under ``{chroot}/brokers/ids/N`` with every
listener (``"endpoints": ["BROKER://kafka1:9091", "CLIENT://kafka1:9093"]``) and the security
protocol of each (``"listener_security_protocol_map"``). Discovery takes the listener named by
``kafka_listener``, or else the first whose protocol is ``kafka_security_protocol``: never simply
the first endpoint, which may be one that AMS cannot (and must not) use."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ams_app.settings import Settings
from ams_app.zookeeper import zookeeper_options


def client_security(settings: Settings) -> dict[str, str]:
    """librdkafka's options for the settings' security protocol (nothing for PLAINTEXT)."""
    protocol = settings.kafka_security_protocol
    if protocol == "PLAINTEXT":
        return {}
    options = {"security.protocol": protocol.lower(), "ssl.endpoint.identification.algorithm": "https"}
    if settings.kafka_ca_file:
        options["ssl.ca.location"] = settings.kafka_ca_file
    if settings.kafka_cert_file:
        options["ssl.certificate.location"] = settings.kafka_cert_file
        options["ssl.key.location"] = settings.kafka_key_file
    if protocol == "SASL_SSL":
        options |= {
            "sasl.mechanism": settings.kafka_sasl_mechanism,
            "sasl.username": settings.kafka_sasl_username,
            "sasl.password": settings.kafka_sasl_password,
        }
    return options


def pick_endpoint(registration: Mapping[str, Any], listener: str, protocol: str) -> str | None:
    """``host:port`` of the broker registration's endpoint that AMS should use, if it has one.

    ``listener``, when given, names it; else the first endpoint whose listener speaks ``protocol``.
    A registration without a protocol map (written by Kafka before 0.10) maps each listener name to
    itself, as Kafka does for the standard names."""
    protocols = registration.get("listener_security_protocol_map") or {}
    for endpoint in registration.get("endpoints") or []:
        name, _, address = str(endpoint).partition("://")
        if listener:
            if name == listener:
                return address
        elif protocols.get(name, name) == protocol:
            return address
    if not listener and protocol == "PLAINTEXT" and not registration.get("endpoints") and registration.get("host"):
        return f"{registration['host']}:{registration['port']}"
    return None


def discover_brokers(settings: Settings) -> str:
    """Bootstrap servers from ZooKeeper's ``{kafka_znode}/brokers/ids/*``, as the original does."""
    from kazoo.client import KazooClient

    timeout = settings.kafka_timeout_seconds
    client = KazooClient(hosts=settings.zookeeper_hosts, timeout=timeout, read_only=True, **zookeeper_options(settings))
    client.start(timeout=timeout)
    try:
        root = settings.kafka_znode.rstrip("/")
        servers: list[str] = []
        offered: set[str] = set()
        for broker_id in sorted(client.get_children(f"{root}/brokers/ids")):
            data, _ = client.get(f"{root}/brokers/ids/{broker_id}")
            registration = json.loads(data)
            offered.update(str(e).partition("://")[0] for e in registration.get("endpoints") or [])
            address = pick_endpoint(registration, settings.kafka_listener, settings.kafka_security_protocol)
            if address:
                servers.append(address)
        if not servers:
            wanted = (
                f"listener {settings.kafka_listener!r}"
                if settings.kafka_listener
                else f"a {settings.kafka_security_protocol} listener"
            )
            raise RuntimeError(
                f"no Kafka broker under {root}/brokers/ids offers {wanted} (listeners: {sorted(offered)})"
            )
        return ",".join(servers)
    finally:
        client.stop()
        client.close()
