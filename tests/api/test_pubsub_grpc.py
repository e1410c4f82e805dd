"""Google's Python client for Pub/Sub (google-cloud-pubsub, unchanged) against the gRPC API of
``ams serve``, on both backends, over TLS with an AMS token as its API key (docs/pubsub.md).

The scenarios are the client's own features: the admin calls, publisher batching, ordering keys
with resume_publish, the streaming subscriber with flow control, nack and redelivery, dead-letter
topics, filters, retry policy, exactly-once with ack futures, snapshots and seek, schemas; and the
two doors to the same objects (REST and gRPC)."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber import exceptions as sub_exceptions
from google.cloud.pubsub_v1.types import BatchSettings, FlowControl, PublisherOptions
from google.protobuf import field_mask_pb2, timestamp_pb2
from google.pubsub_v1 import types as t

from tests.helpers import AmsServer, Api, sample, unique

TIMEOUT = 30.0


class Clients:
    """A publisher and a subscriber client of one caller, against one server; with no server,
    against the Pub/Sub emulator that PUBSUB_EMULATOR_HOST names (tests/api/test_pubsub_emulator.py)."""

    def __init__(self, server: AmsServer | None, token: str = "", **publisher: Any) -> None:
        options = {"api_endpoint": server.grpc_host, "api_key": token} if server else None
        self.pub = pubsub_v1.PublisherClient(client_options=options, **publisher)
        self.sub = pubsub_v1.SubscriberClient(client_options=options)

    def close(self) -> None:
        self.pub.stop()
        self.sub.close()


@pytest.fixture
def clients(server: AmsServer) -> Iterator[Clients]:
    made = Clients(server, server.token)
    yield made
    made.close()


@pytest.fixture
def make_clients(server: AmsServer) -> Iterator[Callable[..., Clients]]:
    made: list[Clients] = []

    def make(token: str | None = None, **publisher: Any) -> Clients:
        made.append(Clients(server, token or server.token, **publisher))
        return made[-1]

    yield make
    for each in made:
        each.close()


def names(project: str) -> tuple[str, str]:
    return f"projects/{project}/topics/{unique('t')}", f"projects/{project}/subscriptions/{unique('s')}"


class Received:
    """What a streaming subscriber's callback saw."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.messages: list[Any] = []
        self.changed = threading.Condition(self.lock)

    def add(self, message: Any) -> None:
        with self.changed:
            self.messages.append(message)
            self.changed.notify_all()

    def wait_for(self, test: Callable[[list[Any]], bool], timeout: float = TIMEOUT) -> list[Any]:
        give_up = time.monotonic() + timeout
        with self.changed:
            while not test(self.messages):  # looked at on each message, and often: ``test`` may read more
                left = give_up - time.monotonic()
                assert left > 0, f"saw {len(self.messages)}"
                self.changed.wait(min(left, 0.1))
            return list(self.messages)


def subscribe(clients: Clients, sub: str, handle: Callable[[Any], None], **flow: Any) -> tuple[Received, Any]:
    seen = Received()

    def callback(message: Any) -> None:
        seen.add(message)
        handle(message)

    future = clients.sub.subscribe(sub, callback, flow_control=FlowControl(**flow) if flow else ())
    return seen, future


def stop(future: Any) -> None:
    future.cancel()
    future.result(timeout=TIMEOUT)


def nothing_left(clients: Clients, sub: str) -> bool:
    """No message to pull (the server's pull waits its pull_wait_seconds, 2 in the tests)."""
    return not clients.sub.pull(subscription=sub, max_messages=10, timeout=TIMEOUT).received_messages


def pull_all(clients: Clients, sub: str, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        response = clients.sub.pull(subscription=sub, max_messages=count - len(got), timeout=TIMEOUT)
        got += response.received_messages
    return got


# --- the admin calls ------------------------------------------------------------------------------
def test_topics_and_subscriptions_are_made_listed_updated_and_deleted(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    made = clients.pub.create_topic(name=topic)
    assert made.name == topic
    assert clients.pub.get_topic(topic=topic).name == topic
    with pytest.raises(gexc.AlreadyExists):
        clients.pub.create_topic(name=topic)
    assert topic in [x.name for x in clients.pub.list_topics(project=f"projects/{project}")]

    created = clients.sub.create_subscription(name=sub, topic=topic, ack_deadline_seconds=30)
    assert (created.name, created.topic, created.ack_deadline_seconds) == (sub, topic, 30)
    with pytest.raises(gexc.AlreadyExists):
        clients.sub.create_subscription(name=sub, topic=topic)
    assert [x.name for x in clients.sub.list_subscriptions(project=f"projects/{project}")] == [sub]
    assert list(clients.pub.list_topic_subscriptions(topic=topic)) == [sub]

    mask = field_mask_pb2.FieldMask(paths=["ack_deadline_seconds", "retry_policy"])
    wanted = t.Subscription(
        name=sub, ack_deadline_seconds=45, retry_policy=t.RetryPolicy(minimum_backoff={"seconds": 2})
    )
    updated = clients.sub.update_subscription(subscription=wanted, update_mask=mask)
    assert updated.ack_deadline_seconds == 45
    assert updated.retry_policy.minimum_backoff.total_seconds() == 2
    assert clients.sub.get_subscription(subscription=sub).ack_deadline_seconds == 45
    fixed = field_mask_pb2.FieldMask(paths=["filter"])
    with pytest.raises(gexc.InvalidArgument):
        clients.sub.update_subscription(subscription=t.Subscription(name=sub, filter="x"), update_mask=fixed)

    clients.sub.delete_subscription(subscription=sub)
    with pytest.raises(gexc.NotFound):
        clients.sub.get_subscription(subscription=sub)
    clients.pub.delete_topic(topic=topic)
    with pytest.raises(gexc.NotFound):
        clients.pub.get_topic(topic=topic)
    with pytest.raises(gexc.NotFound):
        clients.sub.create_subscription(name=sub, topic=topic)


def test_rest_and_grpc_are_two_doors_to_the_same_objects(clients: Clients, api: Api, project: str) -> None:
    rest_topic = unique("rest-topic")
    api.ok("PUT", f"/projects/{project}/topics/{rest_topic}")
    topic = f"projects/{project}/topics/{rest_topic}"
    _, sub = names(project)
    clients.sub.create_subscription(name=sub, topic=topic)
    ids = [clients.pub.publish(topic, b"over grpc", kind="g").result(TIMEOUT)]
    ids += api.publish(project, rest_topic, "over rest")
    rest_sub = sub.rsplit("/", 1)[1]
    pulled = api.ok("POST", f"/projects/{project}/subscriptions/{rest_sub}:pull", {"maxMessages": "1"})
    first = pulled["receivedMessages"][0]
    assert base64.b64decode(first["message"]["data"]) == b"over grpc"
    assert first["message"]["attributes"] == {"kind": "g"}
    api.ok("POST", f"/projects/{project}/subscriptions/{rest_sub}:acknowledge", {"ackIds": [first["ackId"]]})
    (second,) = pull_all(clients, sub, 1)
    assert second.message.data == b"over rest"
    assert [first["message"]["messageId"], second.message.message_id] == ids
    clients.sub.acknowledge(subscription=sub, ack_ids=[second.ack_id])
    assert nothing_left(clients, sub)


# --- publishing -----------------------------------------------------------------------------------
def test_the_publisher_batches_and_every_message_arrives_once(
    make_clients: Callable[..., Clients], project: str
) -> None:
    clients = make_clients(batch_settings=BatchSettings(max_messages=50, max_latency=0.05))
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(name=sub, topic=topic)
    futures = [clients.pub.publish(topic, f"m{i}".encode(), i=str(i)) for i in range(1000)]
    ids = [f.result(TIMEOUT) for f in futures]
    assert len(set(ids)) == 1000
    seen, future = subscribe(clients, sub, lambda m: m.ack())
    got = seen.wait_for(lambda ms: len({m.message_id for m in ms}) >= 1000)
    stop(future)
    assert sorted(int(m.attributes["i"]) for m in got) == list(range(1000))
    assert all(m.data == f"m{m.attributes['i']}".encode() for m in got)


def test_ordering_keys_deliver_in_order_and_a_failed_key_resumes(
    make_clients: Callable[..., Clients], project: str
) -> None:
    clients = make_clients(publisher_options=PublisherOptions(enable_message_ordering=True))
    topic, sub = names(project)
    # a publish that fails (no topic yet) pauses its key until resume_publish
    with pytest.raises(gexc.NotFound):
        clients.pub.publish(topic, b"lost", ordering_key="k1").result(TIMEOUT)
    paused = pubsub_v1.publisher.exceptions.PublishToPausedOrderingKeyException
    paused_by = time.monotonic() + TIMEOUT  # the client pauses the key in its own thread, just after
    while not isinstance(clients.pub.publish(topic, b"paused", ordering_key="k1").exception(TIMEOUT), paused):
        assert time.monotonic() < paused_by  # (until then, each fails as the first did)
        time.sleep(0.05)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "enable_message_ordering": True})
    clients.pub.resume_publish(topic, "k1")
    futures = [
        clients.pub.publish(topic, f"{key}-{i}".encode(), ordering_key=key) for i in range(30) for key in ("k1", "k2")
    ]
    [f.result(TIMEOUT) for f in futures]
    first_try: set[str] = set()

    def handle(message: Any) -> None:
        if message.data == b"k1-10" and message.message_id not in first_try:
            first_try.add(message.message_id)
            message.nack()  # its key waits for it: it comes again before k1-11
            return
        message.ack()

    seen, future = subscribe(clients, sub, handle)
    got = seen.wait_for(lambda ms: len(ms) >= 61)
    stop(future)
    for key in ("k1", "k2"):
        order = [m.data.decode() for m in got if m.ordering_key == key]
        firsts = list(dict.fromkeys(order))
        assert firsts == [f"{key}-{i}" for i in range(30)], order
    k1 = [m.data.decode() for m in got if m.ordering_key == "k1"]
    assert k1.index("k1-11") > len(k1) - 1 - k1[::-1].index("k1-10")


# --- subscribing ----------------------------------------------------------------------------------
def test_flow_control_holds_the_messages_out_and_a_nack_redelivers(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(name=sub, topic=topic)
    [clients.pub.publish(topic, f"{i}".encode()).result(TIMEOUT) for i in range(40)]
    lock = threading.Lock()
    state = {"out": 0, "most": 0}
    nacked: set[str] = set()

    def handle(message: Any) -> None:
        with lock:
            state["out"] += 1
            state["most"] = max(state["most"], state["out"])
        time.sleep(0.02)
        with lock:
            state["out"] -= 1
        if message.data == b"7" and message.message_id not in nacked:
            nacked.add(message.message_id)
            message.nack()
        else:
            message.ack()

    seen, future = subscribe(clients, sub, handle, max_messages=5)
    got = seen.wait_for(lambda ms: len(ms) >= 41)
    stop(future)
    assert state["most"] <= 5
    assert [m.data for m in got].count(b"7") == 2  # nacked once, then delivered again
    assert {m.data for m in got} == {f"{i}".encode() for i in range(40)}


def test_dead_letter_topic_gets_the_message_after_its_attempts(clients: Clients, project: str) -> None:
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
    published = dead.message.attributes["CloudPubSubDeadLetterSourceTopicPublishTime"]  # the original's
    assert published.startswith(got[0].publish_time.strftime("%Y-%m-%dT%H:%M:%S."))
    assert published.endswith("Z")
    with pytest.raises(gexc.FailedPrecondition):
        clients.pub.delete_topic(topic=dead_topic)


def test_a_filter_delivers_only_the_matching_messages(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "filter": 'attributes.kind = "keep"'})
    with pytest.raises(gexc.InvalidArgument):
        clients.sub.create_subscription(
            request={"name": names(project)[1], "topic": topic, "filter": "attributes.kind = "}
        )
    for i in range(20):
        clients.pub.publish(topic, f"{i}".encode(), kind="keep" if i % 2 else "drop").result(TIMEOUT)
    got = pull_all(clients, sub, 10)
    assert sorted(int(m.message.data) for m in got) == list(range(1, 20, 2))
    clients.sub.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in got])
    assert nothing_left(clients, sub)


def test_the_retry_policy_holds_a_nacked_message_back(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    backoff = t.RetryPolicy(minimum_backoff={"seconds": 5}, maximum_backoff={"seconds": 5})
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "retry_policy": backoff})
    clients.pub.publish(topic, b"again").result(TIMEOUT)
    (first,) = pull_all(clients, sub, 1)
    nacked_at = time.monotonic()
    clients.sub.modify_ack_deadline(subscription=sub, ack_ids=[first.ack_id], ack_deadline_seconds=0)
    assert nothing_left(clients, sub)
    (second,) = pull_all(clients, sub, 1)
    assert time.monotonic() - nacked_at >= 4.5  # not before its backoff
    assert second.message.message_id == first.message.message_id


def test_exactly_once_acks_answer_through_their_futures(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "enable_exactly_once_delivery": True})
    [clients.pub.publish(topic, f"{i}".encode()).result(TIMEOUT) for i in range(10)]
    results: dict[bytes, Any] = {}
    lock = threading.Lock()

    # Google's Python client reads a refusal as the answer for every id of its request but those
    # it names (docs/pubsub.md), and it batches acks: the stale ack goes alone
    others_done, stale_done = threading.Event(), threading.Event()

    arrivals: dict[bytes, int] = {}

    def handle(message: Any) -> None:
        with lock:
            arrivals[message.data] = arrivals.get(message.data, 0) + 1
            again = arrivals[message.data] > 1
        if message.data == b"3" and not again:
            others_done.wait(TIMEOUT)
            message.nack_with_response().result(TIMEOUT)
            try:  # its ack id is no longer valid
                message.ack_with_response().result(TIMEOUT)
                outcome: Any = "acked"
            except sub_exceptions.AcknowledgeError as error:
                outcome = error.error_code
            stale_done.set()
        else:  # the nacked message comes again, under a new ack id, which is taken
            if message.data == b"3":
                stale_done.wait(TIMEOUT)
            outcome = message.ack_with_response().result(TIMEOUT)
        with lock:
            results[message.data + (b" again" if again else b"")] = outcome
            if len(results) >= 9 and b"3" not in results:
                others_done.set()

    seen, future = subscribe(clients, sub, handle)
    seen.wait_for(lambda ms: len({m.data for m in ms}) >= 10 and b"3 again" in results)
    stop(future)
    assert results[b"3 again"] == sub_exceptions.AcknowledgeStatus.SUCCESS
    assert results[b"3"] == sub_exceptions.AcknowledgeStatus.INVALID_ACK_ID
    assert all(results[f"{i}".encode()] == sub_exceptions.AcknowledgeStatus.SUCCESS for i in range(10) if i != 3)


def test_an_invalid_exactly_once_ack_carries_error_info(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(request={"name": sub, "topic": topic, "enable_exactly_once_delivery": True})
    clients.pub.publish(topic, b"x").result(TIMEOUT)
    (message,) = pull_all(clients, sub, 1)
    clients.sub.acknowledge(subscription=sub, ack_ids=[message.ack_id])
    with pytest.raises(gexc.InvalidArgument) as raised:
        clients.sub.acknowledge(subscription=sub, ack_ids=[message.ack_id])
    refused = raised.value
    assert (refused.reason, refused.domain) == ("EXACTLY_ONCE_ACKID_FAILURE", "pubsub.googleapis.com")
    assert dict(refused.metadata) == {message.ack_id: "PERMANENT_FAILURE_INVALID_ACK_ID"}


# --- snapshots and seek ---------------------------------------------------------------------------
def test_snapshots_and_seek(clients: Clients, project: str) -> None:
    topic, sub = names(project)
    snapshot = f"projects/{project}/snapshots/{unique('snap')}"
    clients.pub.create_topic(name=topic)
    clients.sub.create_subscription(name=sub, topic=topic)
    [clients.pub.publish(topic, f"{i}".encode()).result(TIMEOUT) for i in range(5)]
    made = clients.sub.create_snapshot(name=snapshot, subscription=sub)
    assert made.topic == topic
    assert made.expire_time.timestamp() > time.time() + 3600
    assert [s.name for s in clients.sub.list_snapshots(project=f"projects/{project}")] == [snapshot]
    assert list(clients.pub.list_topic_snapshots(topic=topic)) == [snapshot]
    got = pull_all(clients, sub, 5)
    clients.sub.acknowledge(subscription=sub, ack_ids=[m.ack_id for m in got])
    clients.sub.seek(request={"subscription": sub, "snapshot": snapshot})
    assert sorted(m.message.data for m in pull_all(clients, sub, 5)) == [f"{i}".encode() for i in range(5)]
    future = timestamp_pb2.Timestamp()
    future.FromSeconds(int(time.time()) + 3600)
    clients.sub.seek(request={"subscription": sub, "time": future})
    assert nothing_left(clients, sub)
    clients.sub.seek(request={"subscription": sub, "time": timestamp_pb2.Timestamp(seconds=0)})
    assert len(pull_all(clients, sub, 5)) == 5
    mask = field_mask_pb2.FieldMask(paths=["labels"])
    with pytest.raises(gexc.InvalidArgument):  # neither labels nor expiry are kept to change
        clients.sub.update_snapshot(snapshot=t.Snapshot(name=snapshot, labels={"a": "b"}), update_mask=mask)
    clients.sub.delete_snapshot(snapshot=snapshot)
    with pytest.raises(gexc.NotFound):
        clients.sub.get_snapshot(snapshot=snapshot)


# --- who may call ---------------------------------------------------------------------------------
def test_tokens_roles_and_acls_are_the_rest_apis(
    server: AmsServer, api: Api, project: str, make_clients: Callable[..., Clients]
) -> None:
    topic, sub = names(project)
    admin = make_clients()
    admin.pub.create_topic(name=topic)
    admin.sub.create_subscription(name=sub, topic=topic)
    with pytest.raises(gexc.Unauthenticated):
        make_clients("no-such-token").pub.get_topic(topic=topic)
    publisher = api.new_user(projects=[{"project": project, "roles": ["publisher"]}])
    consumer = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    stranger = api.new_user()
    as_publisher, as_consumer = make_clients(publisher["token"]), make_clients(consumer["token"])
    with pytest.raises(gexc.PermissionDenied):  # not in the topic's ACL
        as_publisher.pub.publish(topic, b"x").result(TIMEOUT)
    topic_name, sub_name = topic.rsplit("/", 1)[1], sub.rsplit("/", 1)[1]
    api.ok("POST", f"/projects/{project}/topics/{topic_name}:modifyAcl", {"authorized_users": [publisher["name"]]})
    as_publisher.pub.publish(topic, b"x").result(TIMEOUT)
    with pytest.raises(gexc.PermissionDenied):  # a publisher may not make subscriptions
        as_publisher.sub.create_subscription(name=names(project)[1], topic=topic)
    with pytest.raises(gexc.PermissionDenied):
        as_consumer.sub.pull(subscription=sub, max_messages=1, timeout=TIMEOUT)
    api.ok("POST", f"/projects/{project}/subscriptions/{sub_name}:modifyAcl", {"authorized_users": [consumer["name"]]})
    assert len(as_consumer.sub.pull(subscription=sub, max_messages=1, timeout=TIMEOUT).received_messages) == 1
    with pytest.raises(gexc.Unauthenticated):  # no role in the project
        make_clients(stranger["token"]).pub.get_topic(topic=topic)
    # the same token as a bearer token and as x-api-key, on a channel of one's own
    with grpc.secure_channel(server.grpc_host, grpc.ssl_channel_credentials()) as channel:
        get = channel.unary_unary(
            "/google.pubsub.v1.Publisher/GetTopic",
            request_serializer=t.GetTopicRequest.serialize,
            response_deserializer=t.Topic.deserialize,
        )
        request = t.GetTopicRequest(topic=topic)
        assert get(request, metadata=[("authorization", f"Bearer {server.token}")]).name == topic
        assert get(request, metadata=[("x-api-key", server.token)]).name == topic
        with pytest.raises(grpc.RpcError) as refused:
            get(request)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_iam_policies_are_the_acls(
    clients: Clients, api: Api, project: str, make_clients: Callable[..., Clients]
) -> None:
    topic, _ = names(project)
    clients.pub.create_topic(name=topic)
    user = api.new_user(projects=[{"project": project, "roles": ["publisher"]}])
    policy = clients.pub.get_iam_policy(request={"resource": topic})
    assert list(policy.bindings) == []
    policy.bindings.add(role="roles/pubsub.publisher", members=[f"user:{user['name']}"])
    clients.pub.set_iam_policy(request={"resource": topic, "policy": policy})
    acl = api.ok("GET", f"/projects/{project}/topics/{topic.rsplit('/', 1)[1]}:acl")
    assert acl["authorized_users"] == [user["name"]]
    policy.bindings.add(role="roles/pubsub.editor", members=[f"user:{user['name']}"])
    with pytest.raises(gexc.InvalidArgument):
        clients.pub.set_iam_policy(request={"resource": topic, "policy": policy})
    asked = ["pubsub.topics.publish", "pubsub.topics.delete"]
    held = make_clients(user["token"]).pub.test_iam_permissions(request={"resource": topic, "permissions": asked})
    assert list(held.permissions) == ["pubsub.topics.publish"]


# --- emulator mode ------------------------------------------------------------------------------
def test_emulator_mode_lets_calls_without_credentials_act_as_its_user(
    make_server: Callable[..., AmsServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PUBSUB_EMULATOR_HOST: Google's client speaks plaintext and sends no credentials (a setting
    of one node: on the embedded backend)."""
    plain = make_server(tls=False)
    api = plain.api()
    project = api.new_project()
    user = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    plain.stop()
    served = make_server(data_dir=plain.data_dir, tls=False, ams_grpc_emulator_user=user["name"])
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", served.grpc_host)
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    try:
        topic, sub = names(project)
        publisher.create_topic(name=topic)
        subscriber.create_subscription(name=sub, topic=topic)
        publisher.publish(topic, b"no credentials").result(TIMEOUT)
        (got,) = subscriber.pull(subscription=sub, max_messages=1, timeout=TIMEOUT).received_messages
        assert got.message.data == b"no credentials"
        with pytest.raises(gexc.Unauthenticated):  # the user's roles, no more: none in another project
            publisher.create_topic(name=f"projects/{served.api().new_project()}/topics/elsewhere")
    finally:
        publisher.stop()
        subscriber.close()


# --- schemas ------------------------------------------------------------------------------------
AVRO = '{"type": "record", "name": "Reading", "fields": [{"name": "site", "type": "string"}]}'
AVRO_2 = (
    '{"type": "record", "name": "Reading", "fields": [{"name": "site", "type": "string"},'
    ' {"name": "value", "type": "long", "default": 0}]}'
)
PROTO = 'syntax = "proto3";\nmessage Reading {\n  string site = 1;\n  int64 value = 2;\n}\n'


@pytest.fixture
def schema_client(server: AmsServer) -> Iterator[Any]:
    from google.pubsub_v1 import SchemaServiceClient

    made = SchemaServiceClient(client_options={"api_endpoint": server.grpc_host, "api_key": server.token})
    yield made
    made.transport.close()


def test_schemas_revisions_and_validated_publishing(clients: Clients, schema_client: Any, project: str) -> None:
    parent = f"projects/{project}"
    avro = schema_client.create_schema(
        parent=parent, schema=t.Schema(type_=t.Schema.Type.AVRO, definition=AVRO), schema_id="readings"
    )
    assert (avro.name, avro.type_, avro.definition) == (f"{parent}/schemas/readings", t.Schema.Type.AVRO, AVRO)
    proto = schema_client.create_schema(
        parent=parent, schema=t.Schema(type_=t.Schema.Type.PROTOCOL_BUFFER, definition=PROTO), schema_id="proto"
    )
    assert proto.type_ == t.Schema.Type.PROTOCOL_BUFFER
    with pytest.raises(gexc.AlreadyExists):
        schema_client.create_schema(parent=parent, schema=avro, schema_id="readings")
    with pytest.raises(gexc.InvalidArgument):
        schema_client.create_schema(
            parent=parent, schema=t.Schema(type_=t.Schema.Type.AVRO, definition="{"), schema_id="broken"
        )
    listed = {s.name for s in schema_client.list_schemas(parent=parent)}
    assert listed == {avro.name, proto.name}

    # revisions: a commit is a new one, a rollback too (with the old content)
    committed = schema_client.commit_schema(
        name=avro.name, schema=t.Schema(type_=t.Schema.Type.AVRO, definition=AVRO_2)
    )
    assert committed.revision_id != avro.revision_id
    revisions = list(schema_client.list_schema_revisions(name=avro.name))
    assert [r.revision_id for r in revisions] == [committed.revision_id, avro.revision_id]
    rolled = schema_client.rollback_schema(name=avro.name, revision_id=avro.revision_id)
    assert rolled.definition == AVRO
    assert rolled.revision_id not in (avro.revision_id, committed.revision_id)
    schema_client.delete_schema_revision(request={"name": f"{avro.name}@{committed.revision_id}"})
    assert len(list(schema_client.list_schema_revisions(name=avro.name))) == 2

    # messages checked against a schema, alone and on publish (all or none)
    def validate(name: str, message: bytes, encoding: Any) -> None:
        request = {"parent": parent, "name": name, "message": message, "encoding": encoding}
        schema_client.validate_message(request=request)

    validate(avro.name, b'{"site": "GRNET"}', t.Encoding.JSON)
    with pytest.raises(gexc.InvalidArgument):
        validate(avro.name, b'{"x": 1}', t.Encoding.JSON)
    binary = b"\n\x05GRNET\x10\x07"  # site = "GRNET", value = 7
    validate(proto.name, binary, t.Encoding.BINARY)
    topic, _ = names(project)
    settings = t.SchemaSettings(schema=proto.name, encoding=t.Encoding.BINARY)
    made = clients.pub.create_topic(request={"name": topic, "schema_settings": settings})
    assert made.schema_settings.schema == proto.name
    assert made.schema_settings.encoding == t.Encoding.BINARY
    clients.pub.publish(topic, binary).result(TIMEOUT)
    with pytest.raises(gexc.InvalidArgument):
        clients.pub.publish(topic, b"\xff\xff not protobuf").result(TIMEOUT)
    # UpdateTopic: its schema settings change (here: detached), nothing else
    detach = field_mask_pb2.FieldMask(paths=["schema_settings"])
    updated = clients.pub.update_topic(topic=t.Topic(name=topic), update_mask=detach)
    assert not updated.schema_settings.schema
    clients.pub.publish(topic, b"\xff\xff not protobuf, and no schema").result(TIMEOUT)
    labels = field_mask_pb2.FieldMask(paths=["labels"])
    with pytest.raises(gexc.InvalidArgument):
        clients.pub.update_topic(topic=t.Topic(name=topic, labels={"a": "b"}), update_mask=labels)
    clients.pub.delete_topic(topic=topic)
    schema_client.delete_schema(name=proto.name)
    with pytest.raises(gexc.NotFound):
        schema_client.get_schema(name=proto.name)


def test_each_call_is_counted_by_rpc_and_status(clients: Clients, api: Api, project: str) -> None:
    topic, _ = names(project)
    clients.pub.create_topic(name=topic)
    clients.pub.publish(topic, b"counted").result(TIMEOUT)
    with pytest.raises(gexc.NotFound):
        clients.pub.get_topic(topic=f"projects/{project}/topics/missing")
    samples = api.scrape()
    count = "ams_grpc_call_duration_seconds_count"
    assert (sample(samples, count, method="Publish", code="OK") or 0) >= 1
    assert (sample(samples, count, method="GetTopic", code="NOT_FOUND") or 0) >= 1
    assert sample(samples, "ams_grpc_streams_open") is not None
