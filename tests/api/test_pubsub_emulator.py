"""The scenarios of tests/api/test_pubsub_grpc.py, Google's Python client unchanged, against Google's
Pub/Sub emulator (the Cloud SDK's jar, tests/pubsub_emulator.py): the side-by-side run of
docs/compatibility.md, "Google's Pub/Sub emulator, side by side".

A scenario that behaves the same on both is imported from test_pubsub_grpc.py as it is (pytest
collects it here again, with this module's fixtures). Where the emulator behaves differently, this
module has a scenario of the same name that makes the same calls and asserts what the emulator does,
so that a change on either side shows up; its docstring names the difference. Scenarios of the AMS
REST API, users and ACLs (the ``api`` fixture) and of AMS's emulator mode are not run here.

Needs java and the emulator's jar (``gcloud components install pubsub-emulator``, the Debian package
google-cloud-cli-pubsub-emulator, or PUBSUB_EMULATOR_JAR): a skip without them, a failure under
CI=true.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.types import PublisherOptions
from google.protobuf import timestamp_pb2
from google.pubsub_v1 import types as t

from tests.api.test_pubsub_grpc import AVRO, AVRO_2, PROTO, TIMEOUT, Clients, names, pull_all, stop, subscribe

# the scenarios that behave the same on both (the explicit re-export, "as" the same name, keeps them)
from tests.api.test_pubsub_grpc import (
    test_an_invalid_exactly_once_ack_carries_error_info as test_an_invalid_exactly_once_ack_carries_error_info,
)
from tests.api.test_pubsub_grpc import (
    test_exactly_once_acks_answer_through_their_futures as test_exactly_once_acks_answer_through_their_futures,
)
from tests.api.test_pubsub_grpc import (
    test_flow_control_holds_the_messages_out_and_a_nack_redelivers as test_flow_control_holds_the_messages_out_and_a_nack_redelivers,  # noqa: E501
)
from tests.api.test_pubsub_grpc import (
    test_the_publisher_batches_and_every_message_arrives_once as test_the_publisher_batches_and_every_message_arrives_once,  # noqa: E501
)
from tests.api.test_pubsub_grpc import (
    test_topics_and_subscriptions_are_made_listed_updated_and_deleted as test_topics_and_subscriptions_are_made_listed_updated_and_deleted,  # noqa: E501
)
from tests.helpers import unique
from tests.pubsub_emulator import PubsubEmulator, emulator_jar, java_command

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PubsubEmulator]:
    """One emulator for the module (it starts in about a second; every scenario works in a project
    of its own). Without java or the jar: a skip, and under CI=true a failure."""
    missing = [
        why
        for why, found in (
            ("no Pub/Sub emulator jar (the Cloud SDK's pubsub-emulator, or PUBSUB_EMULATOR_JAR)", emulator_jar()),
            ("no java (JAVA_HOME or PATH)", java_command()),
        )
        if found is None
    ]
    if missing:
        if IN_CI:
            pytest.fail("; ".join(missing))
        pytest.skip("; ".join(missing))
    started = PubsubEmulator(tmp_path_factory.mktemp("pubsub-emulator") / "data").start()
    yield started
    started.stop()


@pytest.fixture
def project() -> str:
    """Any name: the emulator takes every project without its being made."""
    return unique("proj")


@pytest.fixture
def emulator_host(emulator: PubsubEmulator, monkeypatch: pytest.MonkeyPatch) -> str:
    """PUBSUB_EMULATOR_HOST, set before the clients are made: plaintext, no credentials."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", emulator.host)
    return emulator.host


@pytest.fixture
def clients(emulator_host: str) -> Iterator[Clients]:
    made = Clients(None)
    yield made
    made.close()


@pytest.fixture
def make_clients(emulator_host: str) -> Iterator[Callable[..., Clients]]:
    made: list[Clients] = []

    def make(**publisher: Any) -> Clients:
        made.append(Clients(None, **publisher))
        return made[-1]

    yield make
    for each in made:
        each.close()


@pytest.fixture
def schema_client(emulator_host: str) -> Iterator[Any]:
    from google.pubsub_v1 import SchemaServiceClient

    made = SchemaServiceClient()
    yield made
    made.transport.close()


def nothing_soon(clients: Clients, sub: str) -> bool:
    """No message to pull. The emulator holds an empty pull until about a second before its deadline
    (test_pubsub_grpc.py's nothing_left would wait 29 s), so this asks with a deadline of 2 s."""
    try:
        return not clients.sub.pull(subscription=sub, max_messages=10, timeout=2).received_messages
    except gexc.DeadlineExceeded:
        return True


# --- the scenarios where the emulator differs -------------------------------------------------------
def test_ordering_keys_deliver_in_order_and_a_failed_key_resumes(
    make_clients: Callable[..., Clients], project: str
) -> None:
    """Difference: a nacked message of an ordering key comes again after the later messages of its
    key, and alone. AMS delivers a key's messages one at a time, so k1-10 comes again before k1-11;
    Pub/Sub's ordering guide says a redelivery brings the message and all later ones of its key."""
    clients = make_clients(publisher_options=PublisherOptions(enable_message_ordering=True))
    topic, sub = names(project)
    with pytest.raises(gexc.NotFound):
        clients.pub.publish(topic, b"lost", ordering_key="k1").result(TIMEOUT)
    paused = pubsub_v1.publisher.exceptions.PublishToPausedOrderingKeyException
    paused_by = time.monotonic() + TIMEOUT
    while not isinstance(clients.pub.publish(topic, b"paused", ordering_key="k1").exception(TIMEOUT), paused):
        assert time.monotonic() < paused_by
        time.sleep(0.05)
    clients.pub.create_topic(name=topic)
    made = clients.sub.create_subscription(request={"name": sub, "topic": topic, "enable_message_ordering": True})
    assert made.enable_message_ordering
    clients.pub.resume_publish(topic, "k1")
    futures = [
        clients.pub.publish(topic, f"{key}-{i}".encode(), ordering_key=key) for i in range(30) for key in ("k1", "k2")
    ]
    [f.result(TIMEOUT) for f in futures]
    first_try: set[str] = set()

    def handle(message: Any) -> None:
        if message.data == b"k1-10" and message.message_id not in first_try:
            first_try.add(message.message_id)
            message.nack()
            return
        message.ack()

    seen, future = subscribe(clients, sub, handle)
    seen.wait_for(lambda ms: len(ms) >= 61)
    time.sleep(1)  # and nothing more comes
    stop(future)
    got = seen.wait_for(lambda ms: True)
    for key in ("k1", "k2"):
        order = [m.data.decode() for m in got if m.ordering_key == key]
        firsts = list(dict.fromkeys(order))
        assert firsts == [f"{key}-{i}" for i in range(30)], order
    k1 = [m.data.decode() for m in got if m.ordering_key == "k1"]
    assert k1 == [f"k1-{i}" for i in range(30)] + ["k1-10"]  # AMS: k1-10 twice, then k1-11


def test_dead_letter_topic_gets_the_message_after_its_attempts(clients: Clients, project: str) -> None:
    """Difference: the emulator deletes a topic that a subscription dead-letters into (AMS refuses,
    FAILED_PRECONDITION); the subscription's policy still names it."""
    topic, sub = names(project)
    dead_topic, dead_sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.pub.create_topic(name=dead_topic)
    clients.sub.create_subscription(name=dead_sub, topic=dead_topic)
    policy = t.DeadLetterPolicy(dead_letter_topic=dead_topic, max_delivery_attempts=5)
    clients.sub.create_subscription(
        request={
            "name": sub,
            "topic": topic,
            "dead_letter_policy": policy,
            "retry_policy": t.RetryPolicy(minimum_backoff={"seconds": 0}, maximum_backoff={"seconds": 1}),
        }
    )
    assert clients.sub.get_subscription(subscription=sub).dead_letter_policy.max_delivery_attempts == 5
    clients.pub.publish(topic, b"poison").result(TIMEOUT)
    seen, future = subscribe(clients, sub, lambda m: m.nack())
    got = seen.wait_for(lambda ms: len(ms) >= 5)
    assert [m.delivery_attempt for m in got[:5]] == [1, 2, 3, 4, 5]
    (dead,) = pull_all(clients, dead_sub, 1)
    stop(future)
    assert dead.message.data == b"poison"
    assert dead.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    assert "CloudPubSubDeadLetterSourceTopicPublishTime" in dead.message.attributes
    clients.pub.delete_topic(topic=dead_topic)  # AMS: FailedPrecondition
    assert clients.sub.get_subscription(subscription=sub).dead_letter_policy.dead_letter_topic == dead_topic


def test_a_filter_delivers_only_the_matching_messages(clients: Clients, project: str) -> None:
    """Difference: the emulator keeps a subscription's filter and shows it, but delivers every
    message, and takes a malformed filter (AMS: the matching messages only; INVALID_ARGUMENT)."""
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    made = clients.sub.create_subscription(request={"name": sub, "topic": topic, "filter": 'attributes.kind = "keep"'})
    assert made.filter == 'attributes.kind = "keep"'
    malformed = clients.sub.create_subscription(
        request={"name": names(project)[1], "topic": topic, "filter": "attributes.kind = "}
    )
    assert malformed.filter == "attributes.kind = "  # AMS: InvalidArgument
    for i in range(20):
        clients.pub.publish(topic, f"{i}".encode(), kind="keep" if i % 2 else "drop").result(TIMEOUT)
    got = pull_all(clients, sub, 20)
    assert sorted(int(m.message.data) for m in got) == list(range(20))  # AMS: the 10 odd ones
    clients.sub.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in got])
    assert nothing_soon(clients, sub)


def test_the_retry_policy_holds_a_nacked_message_back(clients: Clients, project: str) -> None:
    """Difference: the emulator keeps the retry policy and shows it, but a nacked message can be
    pulled again at once (AMS: not before the policy's 5 s)."""
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    backoff = t.RetryPolicy(minimum_backoff={"seconds": 5}, maximum_backoff={"seconds": 5})
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "retry_policy": backoff})
    assert clients.sub.get_subscription(subscription=sub).retry_policy.minimum_backoff.total_seconds() == 5
    clients.pub.publish(topic, b"again").result(TIMEOUT)
    (first,) = pull_all(clients, sub, 1)
    nacked_at = time.monotonic()
    clients.sub.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0)
    (second,) = pull_all(clients, sub, 1)  # AMS: nothing to pull for 5 s
    assert time.monotonic() - nacked_at < 4.5
    assert second.message.message_id == first.message.message_id


def test_snapshots_and_seek(clients: Clients, project: str) -> None:
    """Difference: a seek to a time before messages that were acknowledged brings them back on the
    emulator only when they were retained (retain_acked_messages, or a topic's
    message_retention_duration), as the API documents; AMS brings them back whenever the topic's log
    still has them (docs/delivery.md). Snapshots and a seek to one are the same on both."""
    topic, sub = names(project)
    kept = names(project)[1]
    snapshot = f"projects/{project}/snapshots/{unique('snap')}"
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(name=sub, topic=topic)
    clients.sub.create_subscription(request={"name": kept, "topic": topic, "retain_acked_messages": True})
    [clients.pub.publish(topic, f"{i}".encode()).result(TIMEOUT) for i in range(5)]
    made = clients.sub.create_snapshot(name=snapshot, subscription=sub)
    assert made.topic == topic
    assert made.expire_time.timestamp() > time.time() + 3600
    assert [s.name for s in clients.sub.list_snapshots(project=f"projects/{project}")] == [snapshot]
    assert list(clients.pub.list_topic_snapshots(topic=topic)) == [snapshot]
    got = pull_all(clients, sub, 5)
    clients.sub.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in got])
    clients.sub.seek(request={"subscription": sub, "snapshot": snapshot})
    again = pull_all(clients, sub, 5)
    assert sorted(m.message.data for m in again) == [f"{i}".encode() for i in range(5)]
    clients.sub.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in again])
    future = timestamp_pb2.Timestamp()
    future.FromSeconds(int(time.time()) + 3600)
    clients.sub.seek(request={"subscription": sub, "time": future})
    assert nothing_soon(clients, sub)
    clients.sub.seek(request={"subscription": sub, "time": timestamp_pb2.Timestamp(seconds=0)})
    assert nothing_soon(clients, sub)  # AMS: the 5 again
    # with retain_acked_messages the emulator brings them back
    got = pull_all(clients, kept, 5)
    clients.sub.acknowledge(subscription=kept, ack_ids=[m.ack_id for m in got])
    clients.sub.seek(request={"subscription": kept, "time": timestamp_pb2.Timestamp(seconds=0)})
    assert len(pull_all(clients, kept, 5)) == 5
    clients.sub.delete_snapshot(snapshot=snapshot)
    with pytest.raises(gexc.NotFound):
        clients.sub.get_snapshot(snapshot=snapshot)


def test_schemas_revisions_and_validated_publishing(clients: Clients, schema_client: Any, project: str) -> None:
    """Differences: the emulator has no PROTOCOL_BUFFER schemas (UNIMPLEMENTED, "Protocol buffer
    support not implemented in emulator"; AMS compiles them), so the validated publishing is done
    here with the Avro schema in JSON; it lists a schema's revisions oldest first (AMS: newest
    first); its revision_create_time is not a time of day (seconds since the host started, it
    seems). The rest, Avro, revisions, rollback and validation, is the same."""
    parent = f"projects/{project}"
    avro = schema_client.create_schema(
        parent=parent, schema=t.Schema(type_=t.Schema.Type.AVRO, definition=AVRO), schema_id="readings"
    )
    assert (avro.name, avro.type_, avro.definition) == (f"{parent}/schemas/readings", t.Schema.Type.AVRO, AVRO)
    assert avro.revision_create_time.timestamp() < 946684800  # before 2000 (AMS: when it was made)
    with pytest.raises(gexc.MethodNotImplemented):  # AMS: made
        schema_client.create_schema(
            parent=parent, schema=t.Schema(type_=t.Schema.Type.PROTOCOL_BUFFER, definition=PROTO), schema_id="proto"
        )
    with pytest.raises(gexc.AlreadyExists):
        schema_client.create_schema(parent=parent, schema=avro, schema_id="readings")
    with pytest.raises(gexc.InvalidArgument):
        schema_client.create_schema(
            parent=parent, schema=t.Schema(type_=t.Schema.Type.AVRO, definition="{"), schema_id="broken"
        )
    assert {s.name for s in schema_client.list_schemas(parent=parent)} == {avro.name}

    committed = schema_client.commit_schema(
        name=avro.name, schema=t.Schema(type_=t.Schema.Type.AVRO, definition=AVRO_2)
    )
    assert committed.revision_id != avro.revision_id
    revisions = list(schema_client.list_schema_revisions(name=avro.name))
    assert [r.revision_id for r in revisions] == [avro.revision_id, committed.revision_id]  # AMS: newest first
    rolled = schema_client.rollback_schema(name=avro.name, revision_id=avro.revision_id)
    assert rolled.definition == AVRO
    assert rolled.revision_id not in (avro.revision_id, committed.revision_id)
    schema_client.delete_schema_revision(request={"name": f"{avro.name}@{committed.revision_id}"})
    assert len(list(schema_client.list_schema_revisions(name=avro.name))) == 2

    def validate(name: str, message: bytes, encoding: Any) -> None:
        request = {"parent": parent, "name": name, "message": message, "encoding": encoding}
        schema_client.validate_message(request=request)

    validate(avro.name, b'{"site": "GRNET"}', t.Encoding.JSON)
    with pytest.raises(gexc.InvalidArgument):
        validate(avro.name, b'{"x": 1}', t.Encoding.JSON)
    binary = b"\n\x05GRNET\x10\x07"
    proto = t.Schema(type_=t.Schema.Type.PROTOCOL_BUFFER, definition=PROTO)
    with pytest.raises(gexc.MethodNotImplemented):  # AMS: valid
        schema_client.validate_message(
            request={"parent": parent, "schema": proto, "message": binary, "encoding": t.Encoding.BINARY}
        )
    topic, _ = names(project)
    settings = t.SchemaSettings(schema=avro.name, encoding=t.Encoding.JSON)
    made = clients.pub.create_topic(request={"name": topic, "schema_settings": settings})
    assert made.schema_settings.schema == avro.name
    assert made.schema_settings.encoding == t.Encoding.JSON
    clients.pub.publish(topic, b'{"site": "GRNET"}').result(TIMEOUT)
    with pytest.raises(gexc.InvalidArgument):
        clients.pub.publish(topic, b'{"x": 1}').result(TIMEOUT)
    clients.pub.delete_topic(topic=topic)
    schema_client.delete_schema(name=avro.name)
    with pytest.raises(gexc.NotFound):
        schema_client.get_schema(name=avro.name)


# --- what the shared scenarios do not show ------------------------------------------------------------
def test_a_stream_is_sent_more_than_its_max_outstanding_messages(clients: Clients, project: str) -> None:
    """The emulator ignores a StreamingPull's flow control: a stream that asks for at most 5
    unacknowledged messages is sent all 40 (in one response: it sends up to 100 every 50 ms). AMS
    sends it 5 (docs/pubsub.md). The client holds back the rest itself, so the shared flow-control
    scenario passes on both."""
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(name=sub, topic=topic)
    [clients.pub.publish(topic, f"{i}".encode()).result(TIMEOUT) for i in range(40)]
    done = threading.Event()

    def requests() -> Iterator[t.StreamingPullRequest]:
        yield t.StreamingPullRequest(subscription=sub, stream_ack_deadline_seconds=60, max_outstanding_messages=5)
        done.wait(TIMEOUT)

    stream = clients.sub.streaming_pull(requests=requests())
    guard = threading.Timer(5, stream.cancel)  # should it keep to 5 after all
    guard.start()
    received = 0
    try:
        for response in stream:
            received += len(response.received_messages)
            if received >= 40:
                break
    except gexc.Cancelled:
        pass
    finally:
        guard.cancel()
        done.set()
        stream.cancel()
    assert received == 40  # AMS: 5


def test_a_nacked_ordered_message_is_pulled_after_the_later_ones_of_its_key(
    make_clients: Callable[..., Clients], project: str
) -> None:
    """With unary pulls: the emulator holds a key's later messages while one is out, as AMS does, but
    once it is nacked it answers them all, the nacked one last: its key's order is lost (AMS answers
    the nacked message alone, then the next)."""
    clients = make_clients(publisher_options=PublisherOptions(enable_message_ordering=True))
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "enable_message_ordering": True})
    for i in range(5):
        clients.pub.publish(topic, f"k-{i}".encode(), ordering_key="k").result(TIMEOUT)
    (first,) = clients.sub.pull(subscription=sub, max_messages=1, timeout=TIMEOUT).received_messages
    assert first.message.data == b"k-0"
    assert nothing_soon(clients, sub)  # k-1 waits while k-0 is out
    clients.sub.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0)
    got = pull_all(clients, sub, 5)
    assert [m.message.data for m in got] == [b"k-1", b"k-2", b"k-3", b"k-4", b"k-0"]  # AMS: [b"k-0"]
