"""The JMX exporter javaagent in the tests' own Kafka and ZooKeeper (tools/services.py), with the
configuration files the appliance uses (roles/prometheus/files/*-jmx-exporter.yml): every Kafka and
ZooKeeper metric the alert rules (roles/prometheus/files/rules) ask for is on the real pages, with
the value a healthy single broker has."""

from __future__ import annotations

import re

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require_backend
from tests.helpers import ROOT, load_services_tool

services = load_services_tool()
RULES = ROOT / "roles" / "prometheus" / "files" / "rules"


def page(port: int) -> dict[str, float]:
    r = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return {s.name: s.value for f in text_string_to_metric_families(r.text) for s in f.samples if not s.labels}


def names_in_rules(prefix: str) -> set[str]:
    text = "\n".join(path.read_text() for path in RULES.glob("*.rules.yml"))
    return set(re.findall(rf"\b{prefix}_[a-z_]+\b", text))


@pytest.fixture(autouse=True)
def _services() -> None:
    require_backend("kafka")


def test_kafka_page_has_what_the_rules_ask_for() -> None:
    kafka = page(services.KAFKA_METRICS_PORT)
    wanted = names_in_rules("kafka")
    assert wanted, "the Kafka rules use no Kafka metric?"
    assert wanted <= set(kafka), sorted(wanted - set(kafka))
    assert kafka["kafka_controller_kafkacontroller_activecontrollercount"] == 1  # the only broker
    assert kafka["kafka_server_replicamanager_underreplicatedpartitions"] == 0


def test_zookeeper_page_answers_with_the_server_figures() -> None:
    zookeeper = page(services.ZOOKEEPER_METRICS_PORT)
    assert names_in_rules("zookeeper") <= set(zookeeper)
    assert zookeeper["zookeeper_server_numaliveconnections"] >= 1  # Kafka's session at least
    assert zookeeper["zookeeper_datatree_nodecount"] > 0
