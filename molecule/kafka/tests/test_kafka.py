"""Testinfra checks for the kafka role (run by `molecule verify` against the scenario's container).

The container shares the host's network, so the round trip runs from this machine with confluent_kafka
against 127.0.0.1:29092, the listener molecule.yml sets (ZooKeeper on 24181, chroot /ams-kafka).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ADDRESS = "127.0.0.1"
PORT = 29092
BOOTSTRAP = f"{ADDRESS}:{PORT}"
VERSIONED_DIR = "/opt/kafka_2.13-3.9.1"
SERVER_PROPERTIES = "/etc/kafka/server.properties"
TIMEOUT = 30.0


def listeners(host) -> set[tuple[str, int]]:
    """(address, port) of every TCP listener in the container; Java shows IPv4 as [::ffff:a.b.c.d]."""
    found = set()
    for line in host.check_output("ss -tlnH").splitlines():
        address, _, port = line.split()[3].rpartition(":")
        found.add((address.removeprefix("[::ffff:").strip("[]"), int(port)))
    return found


@pytest.fixture(scope="module")
def server_properties(host) -> list[str]:
    return host.file(SERVER_PROPERTIES).content_string.splitlines()


def test_service_is_running_and_enabled(host):
    service = host.service("kafka")
    if not service.is_running:
        print(host.run("journalctl -u kafka --no-pager -n 80").stdout)
    assert service.is_running
    assert service.is_enabled


def test_listener_is_on_the_configured_address(host):
    assert (ADDRESS, PORT) in listeners(host)


def test_broker_runs_as_the_kafka_user(host):
    broker = host.process.get(user="kafka", comm="java")
    assert "kafka.Kafka" in broker.args


@pytest.mark.parametrize(
    "line",
    [
        "broker.id=1",
        f"listeners=PLAINTEXT://{ADDRESS}:{PORT}",
        f"advertised.listeners=PLAINTEXT://{ADDRESS}:{PORT}",
        "zookeeper.connect=127.0.0.1:24181/ams-kafka",
        "log.dirs=/var/lib/kafka/data",
        "offsets.topic.replication.factor=1",
        "auto.create.topics.enable=false",
    ],
)
def test_server_properties_has(server_properties, line):
    assert line in server_properties


def test_server_properties_carries_the_ansible_managed_header(server_properties):
    assert "# Ansible managed" in server_properties[:3]


def test_stable_symlink_points_at_the_versioned_directory(host):
    link = host.file("/opt/kafka")
    assert link.is_symlink
    assert link.linked_to == VERSIONED_DIR


@pytest.mark.parametrize(
    ("path", "user", "group", "mode"),
    [
        (VERSIONED_DIR, "root", "root", 0o755),
        (f"{VERSIONED_DIR}/libs", "root", "root", 0o755),
        (f"{VERSIONED_DIR}/libs/kafka_2.13-3.9.1.jar", "root", "root", 0o644),
        ("/etc/kafka", "root", "kafka", 0o750),
        (SERVER_PROPERTIES, "root", "kafka", 0o640),
        ("/etc/kafka/log4j.properties", "root", "kafka", 0o640),
        ("/etc/systemd/system/kafka.service", "root", "root", 0o644),
        ("/var/lib/kafka/data", "kafka", "kafka", 0o750),
    ],
)
def test_file_ownership_and_mode(host, path, user, group, mode):
    f = host.file(path)
    assert f.exists
    assert (f.user, f.group, f.mode) == (user, group, mode)


def test_broker_wrote_its_id_into_the_data_directory(host):
    assert "broker.id=1" in host.file("/var/lib/kafka/data/meta.properties").content_string.splitlines()


def test_round_trip_from_the_host():
    topic = f"molecule-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": BOOTSTRAP})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(timeout=TIMEOUT)

    producer = Producer({"bootstrap.servers": BOOTSTRAP, "acks": "all"})
    producer.produce(topic, key=b"k", value=b"hello from molecule")
    assert producer.flush(TIMEOUT) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": BOOTSTRAP,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(int(TIMEOUT)):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        assert message is not None
        assert message.error() is None, message.error()
        assert (message.key(), message.value()) == (b"k", b"hello from molecule")
    finally:
        consumer.close()
        admin.delete_topics([topic])[topic].result(timeout=TIMEOUT)


@pytest.mark.parametrize("path", ["/etc", "/usr", "/opt"])
def test_no_collateral_damage(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert directory.user == "root"
    assert directory.group == "root"
