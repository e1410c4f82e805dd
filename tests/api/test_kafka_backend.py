"""The production backend (Kafka for messages, MongoDB for metadata): a stalled broker, broker
discovery through ZooKeeper, retention, SIGKILL durability, and offsets as message ids."""

from __future__ import annotations

import base64
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers import ROOT, AmsServer, b64, error_of, load_services_tool, service_settings

pytestmark = pytest.mark.slow


services = load_services_tool()


def kafka_topic(srv: AmsServer, project: str, topic: str) -> str:
    """The Kafka topic of an AMS topic: ``{project uuid}.{topic}``, the uuid from MongoDB."""
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(srv.env["AMS_MONGO_URI"], serverSelectionTimeoutMS=5000)
    try:
        doc = client[srv.env["AMS_MONGO_DATABASE"]]["projects"].find_one({"name": project})
    finally:
        client.close()
    assert doc is not None, project
    return f"{doc['uuid']}.{topic}"


def admin_client() -> Any:
    from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

    return AdminClient({"bootstrap.servers": service_settings()["AMS_KAFKA_BOOTSTRAP_SERVERS"]})


def delete_records(key: str, before: int) -> None:
    """What Kafka's retention does: the records before offset ``before`` are gone."""
    from confluent_kafka import TopicPartition

    admin = admin_client()  # kept referenced until the futures are done: they die with it
    for future in admin.delete_records([TopicPartition(key, 0, before)], request_timeout=20).values():
        future.result(30)


def new_topic_and_sub(api: Any, ack_deadline: int = 10) -> str:
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    api.ok(
        "PUT",
        f"/projects/{project}/subscriptions/s",
        {"topic": f"projects/{project}/topics/t", "ackDeadlineSeconds": ack_deadline},
    )
    return project


def kafka_pid() -> int:
    """The Kafka JVM, from the pid file tools/services.py writes (.cache/services/kafka/kafka.pid),
    checked against its command line."""
    pid = services.KAFKA.pid()
    assert pid is not None, f"no running Kafka in {services.KAFKA.pid_file}"
    assert services.KAFKA.pid_file == ROOT / ".cache" / "services" / "kafka" / "kafka.pid"
    return int(pid)


@contextmanager
def kafka_stopped() -> Iterator[None]:
    """SIGSTOP the broker; SIGCONT it however the block ends."""
    pid = kafka_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def timed(call: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


# ------------------------------------------------------------------------- stalled broker ---
#: A request blocked by the stalled broker would wait for the Kafka timeout (20 s in the tests);
#: a request that is not blocked answers in milliseconds. The bound sits far from both.
STALL_BOUND = 3.0


def test_a_stalled_broker_blocks_neither_status_nor_metadata_requests(make_server: Any, tmp_path: Path) -> None:
    srv = make_server(tmp_path / "data", backend="kafka", ams_pull_wait_seconds="10")
    api = srv.api()
    project = new_topic_and_sub(api)
    assert api.publish(project, "t", "warm-up") == ["0"]  # the producer is connected
    assert [m["message"]["messageId"] for m in api.pull(project, "s", 5)] == ["0"]
    results: dict[str, Any] = {}

    def call(name: str, method: str, path: str, body: Any, timeout: float) -> None:
        try:
            results[name] = srv.api().request(method, path, body, timeout=timeout)
        except requests.RequestException as exc:
            results[name] = exc

    # a long-poll pull waits (nothing to deliver) before the broker stalls
    long_poll = threading.Thread(
        target=call,
        args=("pull", "POST", f"/projects/{project}/subscriptions/s:pull", {"maxMessages": "5"}, 60),
    )
    publish = threading.Thread(
        target=call,
        args=("publish", "POST", f"/projects/{project}/topics/t:publish", {"messages": [{"data": b64("stall")}]}, 90),
    )
    long_poll.start()
    time.sleep(0.5)
    with kafka_stopped():
        publish.start()
        time.sleep(0.5)
        for _ in range(4):
            status, took = timed(lambda: api.get("/status", timeout=10))
            assert took < STALL_BOUND, f"/v1/status took {took:.2f}s with the broker stalled"
            # 503 when the background health check has noticed the stall, which is correct too
            assert status.status_code in (200, 503), status.text
            if status.status_code == 503:
                assert error_of(status)["status"] == "UNAVAILABLE"
            topic, took = timed(lambda: api.get(f"/projects/{project}/topics/t", timeout=10))
            assert took < STALL_BOUND, f"GET topic took {took:.2f}s with the broker stalled"
            assert topic.status_code == 200, topic.text
            proj, took = timed(lambda: api.get(f"/projects/{project}", timeout=10))
            assert took < STALL_BOUND, f"GET project took {took:.2f}s with the broker stalled"
            assert proj.status_code == 200, proj.text
            time.sleep(0.5)
        assert publish.is_alive(), f"the publish did not wait for the stalled broker: {results.get('publish')}"
    publish.join(90)
    long_poll.join(60)
    assert not publish.is_alive()
    assert not long_poll.is_alive()

    hung = results["publish"]
    assert isinstance(hung, requests.Response), hung
    assert hung.status_code in (200, 503), hung.text
    if hung.status_code == 200:
        assert hung.json()["messageIds"] == ["1"]
    else:
        assert error_of(hung)["status"] == "UNAVAILABLE"
    pulled = results["pull"]
    assert isinstance(pulled, requests.Response), pulled
    assert pulled.status_code == 200, pulled.text

    after = api.post(f"/projects/{project}/topics/t:publish", {"messages": [{"data": b64("after")}]}, timeout=60)
    assert after.status_code == 200, after.text
    deadline = time.monotonic() + 20
    while (status := api.get("/status", timeout=10)).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status.status_code == 200, status.text


# ------------------------------------------------------------------------------- discovery ---
def test_brokers_are_discovered_through_zookeeper(make_server: Any, tmp_path: Path) -> None:
    settings = service_settings()
    srv = make_server(
        tmp_path / "data",
        backend="kafka",
        ams_kafka_bootstrap_servers="",
        ams_zookeeper_hosts=settings["AMS_ZOOKEEPER_HOSTS"],
        ams_kafka_znode=settings["AMS_KAFKA_ZNODE"],
    )
    assert srv.env["AMS_KAFKA_BOOTSTRAP_SERVERS"] == ""
    api = srv.api()
    project = new_topic_and_sub(api)
    assert api.publish(project, "t", "a", "b") == ["0", "1"]
    got = api.pull(project, "s", 5)
    assert [base64.b64decode(m["message"]["data"]) for m in got] == [b"a", b"b"]
    assert api.ack(project, "s", [got[-1]["ackId"]]).status_code == 200


# ------------------------------------------------------------------------------- retention ---
def test_retention_moves_a_subscription_to_the_oldest_message(make_server: Any, tmp_path: Path) -> None:
    srv = make_server(tmp_path / "data", backend="kafka")
    api = srv.api()
    project = new_topic_and_sub(api)  # the subscription starts at offset 0
    assert api.publish(project, "t", *[f"m{i}" for i in range(6)]) == [str(i) for i in range(6)]
    delete_records(kafka_topic(srv, project, "t"), 4)

    offsets = api.ok("GET", f"/projects/{project}/subscriptions/s:offsets")
    assert offsets == {"min": 4, "max": 6, "current": 4}
    got = api.pull(project, "s", 10)
    assert [m["message"]["messageId"] for m in got] == ["4", "5"]
    assert [base64.b64decode(m["message"]["data"]) for m in got] == [b"m4", b"m5"]
    assert api.ack(project, "s", [got[-1]["ackId"]]).status_code == 200
    assert api.ok("GET", f"/projects/{project}/subscriptions/s:offsets") == {"min": 4, "max": 6, "current": 6}


def test_retention_under_a_waiting_subscription_without_asking_offsets_first(make_server: Any, tmp_path: Path) -> None:
    srv = make_server(tmp_path / "data", backend="kafka")
    api = srv.api()
    project = new_topic_and_sub(api)
    api.publish(project, "t", *[f"m{i}" for i in range(6)])
    delete_records(kafka_topic(srv, project, "t"), 4)
    got = api.pull(project, "s", 10)  # straight to the pull: it must skip what retention removed
    assert [m["message"]["messageId"] for m in got] == ["4", "5"]


# --------------------------------------------------------------------- offsets as message ids ---
def test_message_ids_are_kafka_offsets_and_continue_after_the_topic_is_recreated(
    make_server: Any, tmp_path: Path
) -> None:
    from confluent_kafka import Consumer, TopicPartition

    srv = make_server(tmp_path / "data", backend="kafka")
    api = srv.api()
    project = new_topic_and_sub(api)
    assert api.publish(project, "t", "a", "b", "c") == ["0", "1", "2"]
    key = kafka_topic(srv, project, "t")

    consumer = Consumer(
        {
            "bootstrap.servers": service_settings()["AMS_KAFKA_BOOTSTRAP_SERVERS"],
            "group.id": "ams-test-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        assert consumer.get_watermark_offsets(TopicPartition(key, 0), timeout=10, cached=False) == (0, 3)
        api.ok("DELETE", f"/projects/{project}/topics/t")
        api.ok("PUT", f"/projects/{project}/topics/t")
        low_high = consumer.get_watermark_offsets(TopicPartition(key, 0), timeout=10, cached=False)
        assert low_high == (3, 3), low_high  # the records are gone, the offsets stay
    finally:
        consumer.close()

    api.ok("PUT", f"/projects/{project}/subscriptions/s2", {"topic": f"projects/{project}/topics/t"})
    assert api.publish(project, "t", "d", "e") == ["3", "4"]
    got = api.pull(project, "s2", 10)
    assert [(m["message"]["messageId"], base64.b64decode(m["message"]["data"])) for m in got] == [
        ("3", b"d"),
        ("4", b"e"),
    ]
    assert api.ok("GET", f"/projects/{project}/subscriptions/s2:offsets")["min"] == 3


def test_messages_larger_than_one_fetch_come_whole_and_in_order(make_server: Any, tmp_path: Path) -> None:
    """A read fetches about 1 MB at a time (ams_app/backends/kafka/log.py); a message of the
    largest size (1 MiB of data, about 1.4 MB as a record) still comes whole, between small ones."""
    srv = make_server(tmp_path / "data", backend="kafka")
    api = srv.api()
    project = new_topic_and_sub(api, ack_deadline=60)
    big = os.urandom(1024 * 1024 - 64)
    payloads = [b"small-0", big, b"small-1", big[::-1], b"small-2"]
    for payload in payloads:  # one per request: together they would pass max_request_bytes
        body = {"messages": [{"data": base64.b64encode(payload).decode()}]}
        api.ok("POST", f"/projects/{project}/topics/t:publish", body)
    got: list[bytes] = []
    while len(got) < len(payloads):
        pulled = api.pull(project, "s", 10)
        assert pulled, f"{len(got)} of {len(payloads)} messages pulled"
        got += [base64.b64decode(m["message"]["data"]) for m in pulled]
        assert api.ack(project, "s", [pulled[-1]["ackId"]]).status_code == 200
    assert got == payloads
