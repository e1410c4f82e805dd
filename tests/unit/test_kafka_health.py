"""roles/kafka/files/kafka-health: the Metadata v1 parsing, and its exit codes against a fake broker.

The answers are built here byte by byte after the protocol's layout, so no Kafka is needed."""

from __future__ import annotations

import json
import socket
import socketserver
import struct
import sys
from collections.abc import Iterator

import pytest

from tests.helpers import ROOT, load_script, run_probe, server_port, serving

SCRIPT = ROOT / "roles" / "kafka" / "files" / "kafka-health"

PartitionSpec = tuple[int, int, int, list[int], list[int]]  # error_code, index, leader, replicas, isr
TopicSpec = tuple[str, list[PartitionSpec]]


kafka_health = load_script(SCRIPT, "ams_role_kafka_health")


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def _int32_array(values: list[int]) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def metadata_v1(
    brokers: list[tuple[int, str, int, str | None]],
    controller: int,
    topics: list[TopicSpec],
    correlation_id: int = 1,
) -> bytes:
    """A Metadata v1 response body (no size prefix)."""
    out = struct.pack(">i", correlation_id)
    out += struct.pack(">i", len(brokers))
    for node_id, host, port, rack in brokers:
        out += struct.pack(">i", node_id) + _string(host) + struct.pack(">i", port) + _string(rack)
    out += struct.pack(">i", controller)
    out += struct.pack(">i", len(topics))
    for name, partitions in topics:
        out += struct.pack(">h", 0) + _string(name) + struct.pack(">b", 1 if name.startswith("__") else 0)
        out += struct.pack(">i", len(partitions))
        for error_code, index, leader, replicas, isr in partitions:
            out += struct.pack(">hii", error_code, index, leader) + _int32_array(replicas) + _int32_array(isr)
    return out


THREE_BROKERS = [(1, "kafka-1", 9092, None), (2, "kafka-2.example.org", 9092, "rack-b"), (3, "k3", 19092, "")]
HEALTHY_TOPICS: list[TopicSpec] = [
    ("orders", [(0, 0, 1, [1, 2, 3], [1, 2, 3]), (0, 1, 2, [2, 3, 1], [3, 2, 1])]),
    ("__consumer_offsets", [(0, p, 3, [3, 1, 2], [3, 1, 2]) for p in range(3)]),
]
DEGRADED_TOPICS: list[TopicSpec] = [
    ("orders", [(0, 0, 1, [1, 2, 3], [1, 2]), (0, 1, 2, [2, 3, 1], [2, 1]), (0, 2, 1, [1, 2, 3], [1, 2, 3])]),
    ("lonely", [(5, 0, -1, [3], [])]),  # LEADER_NOT_AVAILABLE: offline, and under-replicated
]


def test_request_is_a_metadata_v1_for_all_topics() -> None:
    request = kafka_health.metadata_request(7)
    size, api_key, api_version, correlation_id, client_length = struct.unpack_from(">ihhih", request)
    assert (api_key, api_version, correlation_id) == (3, 1, 7)
    assert size == len(request) - 4
    assert request[14 : 14 + client_length] == b"kafka-health"
    assert struct.unpack_from(">i", request, 14 + client_length) == (-1,)  # null topic array: every topic
    assert len(request) == 14 + client_length + 4


def test_parses_brokers_controller_and_partitions() -> None:
    metadata = kafka_health.parse_metadata_v1(metadata_v1(THREE_BROKERS, 2, HEALTHY_TOPICS, correlation_id=9))
    assert metadata.correlation_id == 9
    assert metadata.brokers == {1: ("kafka-1", 9092), 2: ("kafka-2.example.org", 9092), 3: ("k3", 19092)}
    assert metadata.controller == 2
    assert [(t.name, t.is_internal, len(t.partitions)) for t in metadata.topics] == [
        ("orders", False, 2),
        ("__consumer_offsets", True, 3),
    ]
    second = metadata.topics[0].partitions[1]
    assert (second.error_code, second.index, second.leader, second.replicas, second.isr) == (
        0,
        1,
        2,
        [2, 3, 1],
        [3, 2, 1],
    )
    assert kafka_health.summarize(metadata) == {
        "brokers": [1, 2, 3],
        "controller": 2,
        "partitions": 5,
        "under_replicated": 0,
        "offline": 0,
    }


def test_counts_under_replicated_and_offline_partitions() -> None:
    summary = kafka_health.summarize(kafka_health.parse_metadata_v1(metadata_v1(THREE_BROKERS[:2], 1, DEGRADED_TOPICS)))
    assert summary == {"brokers": [1, 2], "controller": 1, "partitions": 4, "under_replicated": 3, "offline": 1}
    assert kafka_health.healthy(summary, broker_id=2, require_no_under_replicated=False)
    assert not kafka_health.healthy(summary, broker_id=3, require_no_under_replicated=False)
    assert not kafka_health.healthy(summary, broker_id=None, require_no_under_replicated=True)


def test_no_topics_and_no_controller() -> None:
    summary = kafka_health.summarize(kafka_health.parse_metadata_v1(metadata_v1([(1, "a", 9092, None)], -1, [])))
    assert summary == {"brokers": [1], "controller": -1, "partitions": 0, "under_replicated": 0, "offline": 0}
    assert not kafka_health.healthy(summary, broker_id=1, require_no_under_replicated=True)


@pytest.mark.parametrize("cut", [3, 10, 40, -1])
def test_truncated_answer_is_a_value_error(cut: int) -> None:
    body = metadata_v1(THREE_BROKERS, 2, HEALTHY_TOPICS)
    with pytest.raises(ValueError, match="truncated"):
        kafka_health.parse_metadata_v1(body[:cut])


class _FakeBroker(socketserver.BaseRequestHandler):
    """Reads one size-prefixed request and answers the server's canned body (or closes at once)."""

    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _FakeBrokerServer)
        size = struct.unpack(">i", self._read(4))[0]
        server.requests.append(self._read(size))
        if server.body is not None:
            self.request.sendall(struct.pack(">i", len(server.body)) + server.body)

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.request.recv(size - len(data))
            if not chunk:
                raise ConnectionError("client went away")
            data += chunk
        return data


class _FakeBrokerServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, body: bytes | None) -> None:
        super().__init__(("127.0.0.1", 0), _FakeBroker)
        self.body = body
        self.requests: list[bytes] = []


@pytest.fixture
def fake_broker() -> Iterator[_FakeBrokerServer]:
    with serving(_FakeBrokerServer(None)) as server:
        yield server


def test_exit_0_when_the_broker_is_registered_and_everything_is_replicated(fake_broker: _FakeBrokerServer) -> None:
    fake_broker.body = metadata_v1(THREE_BROKERS, 3, HEALTHY_TOPICS)
    done = run_probe(SCRIPT, server_port(fake_broker), "--broker-id", "2", "--require-no-under-replicated")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "brokers": [1, 2, 3],
        "controller": 3,
        "partitions": 5,
        "under_replicated": 0,
        "offline": 0,
    }
    assert done.stdout.count("\n") == 1
    assert fake_broker.requests == [kafka_health.metadata_request(1)[4:]]


def test_exit_1_when_the_broker_is_not_registered(fake_broker: _FakeBrokerServer) -> None:
    fake_broker.body = metadata_v1(THREE_BROKERS[:2], 1, [])
    assert run_probe(SCRIPT, server_port(fake_broker), "--broker-id", "1").returncode == 0
    done = run_probe(SCRIPT, server_port(fake_broker), "--broker-id", "3")
    assert done.returncode == 1
    assert json.loads(done.stdout)["brokers"] == [1, 2]


def test_exit_1_without_a_controller(fake_broker: _FakeBrokerServer) -> None:
    fake_broker.body = metadata_v1(THREE_BROKERS, -1, [])
    assert run_probe(SCRIPT, server_port(fake_broker)).returncode == 1


def test_under_replication_fails_only_with_the_flag(fake_broker: _FakeBrokerServer) -> None:
    fake_broker.body = metadata_v1(THREE_BROKERS, 1, DEGRADED_TOPICS)
    assert run_probe(SCRIPT, server_port(fake_broker), "--broker-id", "1").returncode == 0
    done = run_probe(SCRIPT, server_port(fake_broker), "--broker-id", "1", "--require-no-under-replicated")
    assert done.returncode == 1
    assert json.loads(done.stdout)["under_replicated"] == 3


def test_exit_2_when_the_broker_closes_without_answering(fake_broker: _FakeBrokerServer) -> None:
    fake_broker.body = None
    done = run_probe(SCRIPT, server_port(fake_broker))
    assert done.returncode == 2
    assert "closed the connection" in done.stderr
    assert done.stdout == ""


def test_exit_2_when_nothing_listens() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the port was free a moment ago and nothing listens on it now: connection refused
    done = run_probe(SCRIPT, port)
    assert done.returncode == 2
    assert "127.0.0.1" in done.stderr


def test_script_is_executable_python3() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    assert SCRIPT.read_text().startswith("#!/usr/bin/python3\n")


def test_script_uses_the_standard_library_only() -> None:
    imported = {
        line.split()[1].split(".")[0]
        for line in SCRIPT.read_text().splitlines()
        if line.startswith(("import ", "from "))
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}
