"""One owner per pull subscription (consume_owner) on three kafka-backend nodes (tools/cluster.py):
real Kafka, ZooKeeper and the MongoDB-wire server, each node spoken to directly over HTTP.

The semantics are those of a single node: consumers on different nodes get different messages,
acks are cumulative within a pull and may go to any node, a late ack is 408 and its messages come
again. And what ownership adds: an owner killed mid-lease loses no answered ack (its unacked
leases come again from the next owner, and a request meanwhile waits for it rather than failing),
and an owner cut off from ZooKeeper (SIGSTOP past its session) does not hand out leases from its
stale memory once another node owns the subscription."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.conftest import require_backend
from tests.helpers import (
    ClusterNode,
    b64,
    drop_database,
    load_tool,
    prometheus_samples,
    sample,
    service_settings,
    unique,
)

pytestmark = pytest.mark.slow

NODES = 3
SESSION_SECONDS = 4.0
cluster_tool = load_tool("cluster")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    require_backend("kafka")  # outside CI a missing service skips; under CI=true it fails
    database = "ams_test_owner_" + uuid.uuid4().hex[:10]
    env = {
        "AMS_CONSUME_OWNER": "true",
        "AMS_CONSUME_SESSION_SECONDS": str(SESSION_SECONDS),
        "AMS_GRPC_EMULATOR_USER": GRPC_USER,  # Google's clients in emulator mode (the nodes are on loopback)
    }
    try:
        yield cluster_tool.start_cluster(nodes=NODES, database=database, env=env)
    finally:
        try:
            cluster_tool.stop_cluster()
        finally:
            drop_database(database)


@pytest.fixture(scope="module")
def nodes(cluster: Any) -> list[ClusterNode]:
    return [ClusterNode(node.url, cluster.token) for node in cluster.nodes]


@pytest.fixture(scope="module")
def project(nodes: list[ClusterNode]) -> str:
    name = unique("owner")
    nodes[0].ok("POST", f"/projects/{name}", {"description": "consume_owner"})
    return name


@pytest.fixture
def zk(cluster: Any) -> Iterator[Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=service_settings()["AMS_ZOOKEEPER_HOSTS"])
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def make_subscription(nodes: list[ClusterNode], project: str, count: int, deadline: int = 600) -> tuple[str, list[str]]:
    topic, sub = unique("t"), unique("s")
    nodes[0].ok("PUT", f"/projects/{project}/topics/{topic}")
    nodes[1].ok(
        "PUT",
        f"/projects/{project}/subscriptions/{sub}",
        {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": deadline},
    )
    payloads = [f"m{i}" for i in range(count)]
    nodes[2].ok(
        "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64(p)} for p in payloads]}
    )
    return sub, payloads


def _received(body: Any) -> tuple[list[str], list[str]]:
    received = body["receivedMessages"]
    return [r["ackId"] for r in received], [base64.b64decode(r["message"]["data"]).decode() for r in received]


def pull(node: ClusterNode, project: str, sub: str, count: int) -> tuple[list[str], list[str]]:
    """(ackIds, payloads) of one pull that returns at once."""
    path = f"/projects/{project}/subscriptions/{sub}:pull"
    return _received(node.ok("POST", path, {"maxMessages": count, "returnImmediately": True}))


def pull_when_ready(node: ClusterNode, project: str, sub: str, count: int, timeout: float = 30) -> list[str]:
    """The payloads of the first pull that is not 503 (ownership moving), within ``timeout``."""
    path = f"/projects/{project}/subscriptions/{sub}:pull"
    deadline = time.monotonic() + timeout
    while True:
        r = node.request("POST", path, {"maxMessages": count, "returnImmediately": True})
        if r.status_code != 503 or time.monotonic() > deadline:
            assert r.status_code == 200, r.text
            return _received(r.json())[1]
        time.sleep(0.3)


def ack(node: ClusterNode, project: str, sub: str, ack_id: str) -> requests.Response:
    return node.request("POST", f"/projects/{project}/subscriptions/{sub}:acknowledge", {"ackIds": [ack_id]})


def page_of(node: ClusterNode) -> dict[Any, float]:
    """The node's Prometheus page, its samples."""
    r = node.session.get(node.url.removesuffix("/v1") + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    return prometheus_samples(r.text)


def owner_of(zk: Any, cluster: Any, sub: str) -> int | None:
    """The number (1-based) of the node whose claim holds ``sub``, from ZooKeeper itself."""
    from kazoo.exceptions import NoNodeError

    root = f"/ams-consume/{cluster.database}/owners"
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return None
    for child in children:
        if child.endswith(f".{sub}"):
            with contextlib.suppress(NoNodeError):
                data, _ = zk.get(f"{root}/{child}")
                url = json.loads(data)["url"]
                return next(n for n, node in enumerate(cluster.nodes, 1) if node.url.rstrip("/") == url)
    return None


def test_consumers_on_different_nodes_get_different_messages_and_ack_anywhere(nodes, project):
    sub, payloads = make_subscription(nodes, project, 30)
    got: list[str] = []
    acks: list[str] = []
    for node in nodes:  # one pull per node, each through or at the owner
        ids, data = pull(node, project, sub, 10)
        assert len(data) == 10
        got += data
        acks.append(ids[-1])
    assert sorted(got) == sorted(payloads)  # nobody got a message twice, nothing is missing
    for i, ack_id in enumerate(acks):  # cumulative, and to a node other than the one that pulled
        assert ack(nodes[(i + 1) % NODES], project, sub, ack_id).status_code == 200
    offsets = nodes[2].ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")
    assert offsets["current"] == offsets["max"] == 30
    assert pull(nodes[0], project, sub, 10) == ([], [])


def test_a_late_ack_is_408_and_the_messages_come_again(nodes, project):
    sub, payloads = make_subscription(nodes, project, 5, deadline=1)
    ids, data = pull(nodes[0], project, sub, 5)
    assert data == payloads
    time.sleep(2.5)  # whole seconds past the deadline
    r = ack(nodes[1], project, sub, ids[-1])
    assert r.status_code == 408, r.text
    assert r.json()["error"]["status"] == "TIMEOUT"
    _, again = pull(nodes[2], project, sub, 5)
    assert again == payloads


def test_an_owner_killed_mid_lease_loses_no_answered_ack(nodes, project, cluster, zk):
    sub, payloads = make_subscription(nodes, project, 30)
    ids, first = pull(nodes[0], project, sub, 10)
    assert ack(nodes[1], project, sub, ids[-1]).status_code == 200  # answered: it is in the store
    _, leased = pull(nodes[2], project, sub, 10)  # leased, never acknowledged
    assert first == payloads[:10]
    assert leased == payloads[10:20]
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    cluster_tool.kill_node(owner)
    try:
        other = nodes[owner % NODES]  # a surviving node
        # no 503 while the dead owner's claim outlives it: the pull waits for its session to end
        # and is then served by the next owner
        _, after = pull(other, project, sub, 20)
        # the lost lease comes again (at-least-once); what was acknowledged never does
        assert after == payloads[10:30]
        assert owner_of(zk, cluster, sub) not in (None, owner)
    finally:
        cluster_tool.start_node(owner, wait_lb=False)


def test_an_owner_stopped_gracefully_hands_its_leases_on(nodes, project, cluster, zk):
    """A rolling upgrade stops each node in turn: acks for what it leased must not answer 409."""
    sub, payloads = make_subscription(nodes, project, 30)
    ids, first = pull(nodes[0], project, sub, 10)
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    assert first == payloads[:10]
    cluster_tool.stop_node(owner)  # SIGTERM: it drains, writes its cursor and ends its session
    try:
        other = nodes[owner % NODES]
        r = ack(other, project, sub, ids[-1])  # the lease outlived its owner
        assert r.status_code == 200, r.text
        _, after = pull(other, project, sub, 20)
        assert after == payloads[10:30]  # nothing acknowledged comes again
    finally:
        cluster_tool.start_node(owner, wait_lb=False)


def test_an_owner_cut_off_past_its_session_hands_out_no_lease(nodes, project, cluster, zk):
    sub, payloads = make_subscription(nodes, project, 30)
    _, first = pull(nodes[0], project, sub, 10)
    assert first == payloads[:10]
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    pid = cluster_tool.cluster_info().nodes[owner - 1].pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # paused: its memory still says it owns the subscription
    try:
        other = nodes[owner % NODES]
        deadline = time.monotonic() + 5 * SESSION_SECONDS
        while owner_of(zk, cluster, sub) == owner:  # ZooKeeper expires the paused node's session
            assert time.monotonic() < deadline, "the paused owner's claim outlived its session"
            time.sleep(0.2)
        _, again = pull(other, project, sub, 10)  # the new owner starts from the store
        _, second = pull(other, project, sub, 10)
        assert again == payloads[:10]  # the lost lease, delivered again
        assert second == payloads[10:20]
    finally:
        os.kill(pid, signal.SIGCONT)
    # the former owner's memory has m0-m9 leased and would hand out m10-m19 a second time; it may
    # answer 503 while it learns that its session is gone, then it forwards to the new owner
    third = pull_when_ready(nodes[owner - 1], project, sub, 10)
    assert third == payloads[20:30]
    assert owner_of(zk, cluster, sub) != owner


def test_a_forwarded_request_is_checked_by_the_owner_as_by_any_node(nodes, project, cluster, zk):
    sub, _ = make_subscription(nodes, project, 3)
    pull(nodes[0], project, sub, 1)  # somebody owns it now
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    other = nodes[owner % NODES]
    path = f"/projects/{project}/subscriptions/{sub}:pull"
    stranger = requests.post(other.url + path, json={"maxMessages": 1}, headers={"x-api-key": "nope"}, timeout=30)
    assert stranger.status_code == 401, stranger.text
    bad = other.request("POST", f"/projects/{project}/subscriptions/{sub}:acknowledge", {"ackIds": ["x"]})
    assert bad.status_code == 400, bad.text
    assert bad.json()["error"]["message"] == "Invalid ack id"
    assert other.request("POST", f"/projects/{project}/subscriptions/nosuch:pull", {}).status_code == 404


def test_a_body_too_large_for_a_forward_is_413(nodes, project, cluster, zk):
    sub, _ = make_subscription(nodes, project, 1)
    pull(nodes[0], project, sub, 1)
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    other = nodes[owner % NODES]
    huge = {"ackIds": ["x" * (11 * 1024 * 1024)]}  # over max_request_bytes (10 MiB)
    r = other.request("POST", f"/projects/{project}/subscriptions/{sub}:acknowledge", huge)
    assert r.status_code == 413, r.text[:200]
    assert r.json()["error"]["message"] == "Request body is too large"


def test_the_owner_reports_its_subscriptions_and_leases(nodes, project, cluster, zk):
    """``ams_consume_owned_subscriptions`` and ``ams_consume_leases_in_flight`` (docs/monitoring.md):
    the owner's page counts its leases until they are acknowledged; the service-wide backlog is the
    same on every node."""
    sub, _ = make_subscription(nodes, project, 20)
    ids, _ = pull(nodes[0], project, sub, 5)
    _, _ = pull(nodes[1], project, sub, 5)
    owner = owner_of(zk, cluster, sub)
    assert owner is not None

    owner_page = page_of(nodes[owner - 1])
    assert (sample(owner_page, "ams_consume_owned_subscriptions") or 0) >= 1
    assert (sample(owner_page, "ams_consume_leases_in_flight") or 0) >= 2
    # the owner writes its cursor behind: every node's scrape sees the backlog of the store's cursor
    for node in nodes:
        assert sample(page_of(node), "ams_subscription_backlog_messages", project=project, subscription=sub) == 20
    assert ack(nodes[2], project, sub, ids[-1]).status_code == 200
    assert (sample(page_of(nodes[owner - 1]), "ams_consume_leases_in_flight") or 0) <= (
        sample(owner_page, "ams_consume_leases_in_flight") or 0
    ) - 1


# --- per-message delivery over the three nodes (docs/delivery.md) ----------------------------------
def test_four_consumers_with_nacks_poison_and_200_ordering_keys_lose_nothing_and_keep_order(nodes, project):
    """Four consumers, each on a node of its own (one shares), pull one subscription with ordering,
    a retry policy and a dead-letter topic. They nack at random (early attempts only) and always
    nack the poison messages. Every other message is acknowledged; each key's messages go in
    publish order; the dead-letter topic receives exactly the poison messages."""
    keys, per_key, poison_count = 200, 5, 10
    topic, dead, sub, watcher = unique("t"), unique("dead"), unique("s"), unique("w")
    for name in (topic, dead):
        nodes[0].ok("PUT", f"/projects/{project}/topics/{name}")
    nodes[1].ok("PUT", f"/projects/{project}/subscriptions/{watcher}", {"topic": f"projects/{project}/topics/{dead}"})
    nodes[2].ok(
        "PUT",
        f"/projects/{project}/subscriptions/{sub}",
        {
            "topic": f"projects/{project}/topics/{topic}",
            "ackDeadlineSeconds": 30,
            "enableMessageOrdering": True,
            "retryPolicy": {"minimumBackoff": "0s", "maximumBackoff": "0.2s"},
            "deadLetterPolicy": {"deadLetterTopic": f"projects/{project}/topics/{dead}", "maxDeliveryAttempts": 5},
        },
    )
    messages = [
        {"data": b64(f"{k}/{i}"), "orderingKey": f"k{k}", "attributes": {"seq": str(i)}}
        for i in range(per_key)
        for k in range(keys)
    ]
    poison = [
        {"data": b64(f"poison{p}"), "attributes": {"poison": "1"}, **({"orderingKey": f"k{p}"} if p % 2 else {})}
        for p in range(poison_count)
    ]
    batch = messages[:500] + poison + messages[500:]
    for start in range(0, len(batch), 100):
        nodes[start // 100 % NODES].ok(
            "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": batch[start : start + 100]}
        )
    wanted = {f"{k}/{i}" for k in range(keys) for i in range(per_key)}
    lock = threading.Lock()
    acked: set[str] = set()
    delivered: dict[str, list[int]] = {}  # key -> seq of each delivery, in the order pulls answered
    errors: list[str] = []
    done = threading.Event()

    def consumer(index: int) -> None:
        node = nodes[index % NODES]
        rng = random.Random(index)
        path = f"/projects/{project}/subscriptions/{sub}"
        while not done.is_set():
            r = node.request("POST", path + ":pull", {"maxMessages": 50, "returnImmediately": True})
            if r.status_code != 200:
                errors.append(f"pull {r.status_code} {r.text[:200]}")
                return
            received = r.json()["receivedMessages"]
            if not received:
                time.sleep(0.05)
                continue
            nacks, acks = [], []
            with lock:
                for m in received:
                    text = base64.b64decode(m["message"]["data"]).decode()
                    if m["message"].get("attributes", {}).get("poison"):
                        nacks.append(m["ackId"])
                        continue
                    key, seq = text.split("/")
                    delivered.setdefault(key, []).append(int(seq))
                    if m["deliveryAttempt"] < 3 and rng.random() < 0.2:
                        nacks.append(m["ackId"])
                    else:
                        acks.append((m["ackId"], text))
            if nacks:
                body = {"ackIds": nacks, "ackDeadlineSeconds": 0}
                r = node.request("POST", path + ":modifyAckDeadline", body)
                if r.status_code != 200:
                    errors.append(f"nack {r.status_code} {r.text[:200]}")
            if acks:
                r = node.request("POST", path + ":acknowledge", {"ackIds": [a for a, _ in acks]})
                if r.status_code != 200:
                    errors.append(f"ack {r.status_code} {r.text[:200]}")
                    return
                with lock:
                    acked.update(text for _, text in acks)

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    moved: list[dict[str, Any]] = []
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and not errors:
            with lock:
                finished = acked >= wanted
            if finished and len(moved) >= poison_count:
                break
            got = nodes[0].ok(
                "POST",
                f"/projects/{project}/subscriptions/{watcher}:pull",
                {"maxMessages": 100, "returnImmediately": True},
            )["receivedMessages"]
            moved += got
            if got:
                nodes[0].ok(
                    "POST",
                    f"/projects/{project}/subscriptions/{watcher}:acknowledge",
                    {"ackIds": [m["ackId"] for m in got]},
                )
            time.sleep(0.2)
    finally:
        done.set()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    assert acked == wanted, f"{len(wanted - acked)} messages never acknowledged"
    for key, seqs in delivered.items():  # in publish order; a message given back comes again first
        assert seqs == sorted(seqs), (key, seqs)
    texts = sorted(base64.b64decode(m["message"]["data"]).decode() for m in moved)
    assert texts == sorted(f"poison{p}" for p in range(poison_count))
    assert {m["message"]["attributes"]["CloudPubSubDeadLetterSourceDeliveryCount"] for m in moved} == {"5"}
    offsets = nodes[1].ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")
    assert offsets["current"] == offsets["max"] == len(batch)


def test_exactly_once_holds_over_an_owner_killed_mid_stream(nodes, project, cluster, zk):
    """After a kill -9 of the owner: what was acknowledged never comes again, what was out stays
    with its consumer (its ack ids still work at the next owner) and nobody else gets it."""
    topic, sub = unique("t"), unique("s")
    nodes[0].ok("PUT", f"/projects/{project}/topics/{topic}")
    nodes[1].ok(
        "PUT",
        f"/projects/{project}/subscriptions/{sub}",
        {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": 600, "enableExactlyOnceDelivery": True},
    )
    payloads = [f"m{i}" for i in range(60)]
    nodes[2].ok(
        "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64(p)} for p in payloads]}
    )
    ids, first = pull(nodes[0], project, sub, 20)
    assert first == payloads[:20]
    path = f"/projects/{project}/subscriptions/{sub}:acknowledge"
    nodes[1].ok("POST", path, {"ackIds": ids[:10]})  # answered: durable
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    cluster_tool.kill_node(owner)
    try:
        other = nodes[owner % NODES]
        _, after = pull(other, project, sub, 60)  # waits for the next owner
        assert after == payloads[20:60]  # neither the acknowledged nor the outstanding ones
        late = other.request("POST", path, {"ackIds": ids[10:]})  # the lease outlived its owner
        assert late.status_code == 200, late.text
        again = other.request("POST", path, {"ackIds": ids[:1]})  # acknowledged before the kill
        assert again.status_code == 400
        assert set(again.json()["error"]["ackIdErrors"]) == {ids[0]}
        assert pull(other, project, sub, 60) == ([], [])
    finally:
        cluster_tool.start_node(owner, wait_lb=False)


def test_filters_snapshots_seek_and_metrics_over_the_nodes(nodes, project, cluster, zk):
    """A filtered subscription consumed through every node; a snapshot taken at one node, a seek
    made at another (forwarded to the owner), the figures asked of a third."""
    topic, sub = unique("t"), unique("s")
    nodes[0].ok("PUT", f"/projects/{project}/topics/{topic}", {"messageRetentionDuration": "86400s"})
    nodes[1].ok(
        "PUT",
        f"/projects/{project}/subscriptions/{sub}",
        {"topic": f"projects/{project}/topics/{topic}", "filter": 'hasPrefix(attributes.site, "gr")'},
    )
    sites = ["grnet", "cern", "grid", "cnaf"] * 10
    messages = [{"data": b64(f"{i}/{site}"), "attributes": {"site": site}} for i, site in enumerate(sites)]
    nodes[2].ok("POST", f"/projects/{project}/topics/{topic}:publish", {"messages": messages})
    wanted = sorted(f"{i}/{site}" for i, site in enumerate(sites) if site.startswith("gr"))
    path = f"/projects/{project}/subscriptions/{sub}"
    got: list[str] = []
    for round_ in range(30):  # a pull may answer fewer than it may: what one read found to match
        ids, data = pull(nodes[round_ % NODES], project, sub, 5)
        got += data
        if ids:
            nodes[(round_ + 1) % NODES].ok("POST", path + ":acknowledge", {"ackIds": ids})
        if not ids and len(got) >= len(wanted):
            break
    assert sorted(got) == wanted
    snapshot = f"projects/{project}/snapshots/{unique('snap')}"
    taken = nodes[2].ok("PUT", "/" + snapshot, {"subscription": f"projects/{project}/subscriptions/{sub}"})
    assert taken["name"] == snapshot
    assert pull(nodes[1], project, sub, 5) == ([], [])
    nodes[0].ok("POST", path + ":seek", {"time": "2000-01-01T00:00:00Z"})
    again: list[str] = []
    for round_ in range(30):
        ids, data = pull(nodes[(round_ + 2) % NODES], project, sub, 10)
        again += data
        if ids:
            nodes[round_ % NODES].ok("POST", path + ":acknowledge", {"ackIds": ids})
        if not ids and len(again) >= len(wanted):
            break
    assert sorted(again) == wanted  # replayed from the start, the filter still applied
    nodes[1].ok("POST", path + ":seek", {"snapshot": snapshot})  # everything acknowledged: nothing comes
    assert pull(nodes[2], project, sub, 10) == ([], [])
    owner = owner_of(zk, cluster, sub)
    assert owner is not None
    other = nodes[owner % NODES]
    shown = other.ok("GET", path + ":metrics")["metrics"]
    first = {
        m["labels"]["attempt"]: m["timeseries"][0]["value"] for m in shown if m["metric"] == "subscription.deliveries"
    }
    assert first["1"] == 2 * len(wanted)  # each delivery counted once, whichever node served it


# --- Google's Pub/Sub client over the nodes (docs/pubsub.md, "Over several nodes") -------------
GRPC_USER = "grpc-emulator-user"


@pytest.fixture
def grpc_clients(nodes: list[ClusterNode], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``make(n)``: Google's publisher and subscriber clients on node ``n``'s gRPC port, in emulator
    mode (the nodes run with grpc_emulator_user; the user is a service admin)."""
    from google.cloud import pubsub_v1

    if nodes[0].request("GET", f"/users/{GRPC_USER}").status_code == 404:
        nodes[0].ok("POST", f"/users/{GRPC_USER}", {"service_roles": ["service_admin"]})
    made: list[Any] = []

    def make(n: int) -> tuple[Any, Any]:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", f"127.0.0.1:{cluster_tool.node_grpc_port(n)}")
        pair = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
        made.append(pair)
        return pair

    yield make
    for publisher, subscriber in made:
        publisher.stop()
        subscriber.close()


def test_streaming_pulls_on_every_node_share_a_subscription_with_google_clients(project, grpc_clients, cluster, zk):
    """Streams on all three nodes (two of them not the owner) share one subscription: every message
    is delivered and acknowledged once; acks made through each stream's own node reach the owner."""
    publisher, first = grpc_clients(1)
    topic, sub = f"projects/{project}/topics/{unique('t')}", f"projects/{project}/subscriptions/{unique('s')}"
    publisher.create_topic(name=topic)
    first.create_subscription(name=sub, topic=topic, ack_deadline_seconds=60)
    futures = [publisher.publish(topic, f"m{i}".encode()) for i in range(600)]
    [f.result(60) for f in futures]
    seen: list[bytes] = []
    lock = threading.Lock()

    def callback(message: Any) -> None:
        with lock:
            seen.append(message.data)
        message.ack()

    streams = [grpc_clients(n)[1].subscribe(sub, callback) for n in (1, 2, 3)]
    deadline = time.monotonic() + 60
    while len(set(seen)) < 600 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)  # late duplicates, if any, would come now
    for stream in streams:
        stream.cancel()
        stream.result(timeout=30)
    assert sorted(set(seen)) == sorted(f"m{i}".encode() for i in range(600))
    assert len(seen) == 600, f"{len(seen) - 600} delivered twice"
    assert owner_of(zk, cluster, sub.rsplit("/", 1)[1]) is not None
    assert not first.pull(subscription=sub, max_messages=10, timeout=60).received_messages


def test_exactly_once_over_a_stream_at_a_node_that_is_not_the_owner(project, grpc_clients, cluster, zk, nodes):
    """A stream on a node that does not own the subscription: every ack future succeeds (acks pass
    on to the owner), and nothing acknowledged comes again. The stream and its acknowledgements are
    passed on whole to the owner's gRPC API (ams_app/pubsub/relay.py): the owner serves them."""
    publisher, subscriber = grpc_clients(1)
    topic, sub = f"projects/{project}/topics/{unique('t')}", f"projects/{project}/subscriptions/{unique('s')}"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, "enable_exactly_once_delivery": True})
    subscriber.pull(subscription=sub, max_messages=1, timeout=60)  # a first pull: node 1 owns it
    owner = owner_of(zk, cluster, sub.rsplit("/", 1)[1])
    assert owner is not None
    [f.result(60) for f in [publisher.publish(topic, f"m{i}".encode()) for i in range(100)]]
    elsewhere = grpc_clients(owner % NODES + 1)[1]
    outcomes: dict[bytes, list[Any]] = {}
    lock = threading.Lock()

    def callback(message: Any) -> None:
        result = message.ack_with_response().result(timeout=60)
        with lock:
            outcomes.setdefault(message.data, []).append(result)

    acks = "ams_grpc_call_duration_seconds_count"
    acks_before = sample(page_of(nodes[owner - 1]), acks, method="Acknowledge", code="OK") or 0
    stream = elsewhere.subscribe(sub, callback)
    deadline = time.monotonic() + 60
    while len(outcomes) < 100 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # a redelivery, if any, would come now
    served = page_of(nodes[owner - 1])
    assert sample(served, "ams_grpc_streams_open") == 1
    assert (sample(served, acks, method="Acknowledge", code="OK") or 0) > acks_before
    stream.cancel()
    stream.result(timeout=30)
    from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeStatus

    assert sorted(outcomes) == sorted(f"m{i}".encode() for i in range(100))
    assert all(results == [AcknowledgeStatus.SUCCESS] for results in outcomes.values()), outcomes
    # the owner's refusal comes back whole through the other node: status, message and ErrorInfo
    from google.api_core import exceptions

    stale = f"{sub}:0.1"  # acknowledged already
    with pytest.raises(exceptions.InvalidArgument) as refused:
        elsewhere.acknowledge(subscription=sub, ack_ids=[stale], timeout=60)
    assert refused.value.reason == "EXACTLY_ONCE_ACKID_FAILURE"
    assert refused.value.metadata == {stale: "PERMANENT_FAILURE_INVALID_ACK_ID"}


def test_a_stream_outlives_a_kill_of_the_owner_and_loses_nothing(project, grpc_clients, cluster, zk, nodes):
    """A stream on a node that is not the owner, on an exactly-once subscription; the owner is
    killed (-9) mid-stream. Every message is delivered, every one is acknowledged in the store in
    the end, and none whose ack future succeeded comes again.

    An ack the owner stored just before it died is never answered: the client's retry reaches the
    next owner, which refuses the ack id (acknowledged already, docs/delivery.md) and, rightly,
    never delivers the message again. So the store's cursor, not the futures, says whether each
    message was acknowledged."""
    from google.cloud.pubsub_v1.subscriber.exceptions import AcknowledgeError, AcknowledgeStatus

    publisher, subscriber = grpc_clients(1)
    topic, sub = f"projects/{project}/topics/{unique('t')}", f"projects/{project}/subscriptions/{unique('s')}"
    publisher.create_topic(name=topic)
    subscriber.create_subscription(request={"name": sub, "topic": topic, "enable_exactly_once_delivery": True})
    subscriber.pull(subscription=sub, max_messages=1, timeout=60)  # node 1 owns it
    owner = owner_of(zk, cluster, sub.rsplit("/", 1)[1])
    assert owner is not None
    [f.result(60) for f in [publisher.publish(topic, f"m{i}".encode()) for i in range(300)]]
    acked: set[bytes] = set()
    delivered: set[bytes] = set()
    after_ack: list[bytes] = []
    lock = threading.Lock()

    def callback(message: Any) -> None:
        with lock:
            delivered.add(message.data)
            if message.data in acked:
                after_ack.append(message.data)
        time.sleep(0.01)
        try:
            if message.ack_with_response().result(timeout=120) == AcknowledgeStatus.SUCCESS:
                with lock:
                    acked.add(message.data)
        except AcknowledgeError:
            pass  # stale with the owner: it comes again under a new one, or the owner had stored it

    path = f"/projects/{project}/subscriptions/{sub.rsplit('/', 1)[1]}:offsets"
    other = nodes[owner % NODES]  # the stream's node, which stays up

    def stored() -> int:
        """Up to where the store holds every message acknowledged (-1 while it cannot say)."""
        r = other.request("GET", path)
        return int(r.json()["current"]) if r.status_code == 200 else -1

    stream = grpc_clients(owner % NODES + 1)[1].subscribe(sub, callback)
    try:
        deadline = time.monotonic() + 60
        while len(acked) < 100 and time.monotonic() < deadline:
            time.sleep(0.05)
        cluster_tool.kill_node(owner)
        deadline = time.monotonic() + 120
        while len(acked) < 300 and time.monotonic() < deadline:
            if len(delivered) == 300 and stored() == 300:
                break
            time.sleep(0.2)
        time.sleep(2)
        ended = stream.exception(timeout=0) if stream.done() else None  # a stream the client gave up
    finally:
        stream.cancel()
        with contextlib.suppress(Exception):
            stream.result(timeout=30)
        cluster_tool.start_node(owner, wait_lb=False)
    every = {f"m{i}".encode() for i in range(300)}
    assert not every - delivered, f"{len(every - delivered)} never delivered; the stream ended with {ended!r}"
    assert after_ack == []
    deadline = time.monotonic() + 30
    while stored() < 300 and time.monotonic() < deadline:
        time.sleep(0.5)
    offsets = other.ok("GET", path)
    unanswered = len(every - acked)  # acks stored but never answered, if the cursor is whole
    assert offsets["current"] == offsets["max"] == 300, (offsets, f"{unanswered} acks failed; {ended!r}")
