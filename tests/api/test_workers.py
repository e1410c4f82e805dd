"""``ams serve --workers 2`` on backend kafka, over real sockets (docs/production.md, "A process per
core"): the two workers share the node's port and gRPC port, each also listens on its own, and each
is a node of its own for the subscription owners. A subscription one worker owns is served through
the other (REST forwarded, gRPC relayed to the owner's own ports); a killed worker is replaced by
the parent; SIGTERM stops the parent and its workers within the parent's bound, with status 0."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import requests
from google.protobuf import empty_pb2
from google.pubsub_v1 import types as t

from tests.conftest import require_backend
from tests.helpers import AmsServer, b64, drop_database, prometheus_samples, service_settings, unique

pytestmark = pytest.mark.slow

NODE = "wtest"
SHUTDOWN_TIMEOUT = 5.0
#: The parent's bound on its workers' stop (ams_app/workers.py, stop_seconds).
STOP_BOUND = 2 * SHUTDOWN_TIMEOUT + 10


def free_block(count: int) -> int:
    """The first of ``count`` consecutive ports free on loopback."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise RuntimeError(f"no {count} consecutive free ports")


class Node:
    """The server and its ports: the shared ones and each worker's own."""

    def __init__(self, server: AmsServer, base: int) -> None:
        self.server = server
        self.shared = f"http://127.0.0.1:{base}"
        self.own = [f"http://127.0.0.1:{base + 1}", f"http://127.0.0.1:{base + 2}"]
        self.shared_grpc = f"127.0.0.1:{base + 3}"
        self.own_grpc = [f"127.0.0.1:{base + 4}", f"127.0.0.1:{base + 5}"]
        self.database = server.env["AMS_MONGO_DATABASE"]
        self.headers = {"x-api-key": server.token}

    def call(self, base: str, method: str, path: str, body: Any = None, ok: int = 200) -> Any:
        """One request on a new connection (the kernel picks the worker of a shared port anew)."""
        r = requests.request(method, f"{base}/v1{path}", json=body, headers=self.headers, timeout=30)
        assert r.status_code == ok, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def build_info(self, base: str) -> dict[str, str]:
        """The labels of ams_build_info on the Prometheus page at ``base``: which worker answered."""
        r = requests.get(f"{base}/metrics", headers=self.headers, timeout=10)
        assert r.status_code == 200, r.text
        return next(dict(labels) for (name, labels) in prometheus_samples(r.text) if name == "ams_build_info")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    require_backend("kafka")  # outside CI a missing service skips; under CI=true it fails
    base = free_block(6)
    data = tmp_path_factory.mktemp("ams-workers") / "data"
    env = {
        "AMS_NODE_NAME": NODE,
        "AMS_WORKER_PORT_BASE": str(base + 1),
        "AMS_WORKER_GRPC_PORT_BASE": str(base + 4),
        "AMS_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT),
        "AMS_CONSUME_SESSION_SECONDS": "4",
        "AMS_PUSH_ENABLED": "false",
    }
    server = AmsServer(data, backend="kafka", listen=("127.0.0.1", base), env=env, args=["--workers", "2"])
    server.grpc_port = base + 3
    server.env["AMS_GRPC_PORT"] = str(base + 3)
    made = Node(server, base)
    try:
        server.start()  # the shared port answers: one worker at least
        deadline = time.monotonic() + 60
        while not all(_answers(url) for url in made.own):
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.2)
        yield made
    finally:
        with contextlib.suppress(Exception):
            server.stop(STOP_BOUND + 10)
        drop_database(made.database)


def _answers(base: str) -> bool:
    try:
        return requests.get(f"{base}/v1/status", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _worker_pids(node: Node) -> list[int]:
    return [int(node.build_info(url)["pid"]) for url in node.own]


def test_both_workers_answer_on_the_shared_port(node: Node) -> None:
    assert [node.build_info(url)["node_name"] for url in node.own] == [f"{NODE}-w0", f"{NODE}-w1"]
    seen = {node.build_info(node.shared)["node_name"] for _ in range(40)}  # a new connection each
    assert seen == {f"{NODE}-w0", f"{NODE}-w1"}
    pids = _worker_pids(node)
    assert node.server.proc is not None
    assert node.server.proc.pid not in pids
    assert len(set(pids)) == 2


def _owner_url(node: Node, project: str, sub: str) -> str | None:
    """The URL in the subscription's claim in ZooKeeper: its owner's own port."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    zk = KazooClient(hosts=service_settings()["AMS_ZOOKEEPER_HOSTS"])
    zk.start(timeout=10)
    try:
        root = f"/ams-consume/{node.database}/owners"
        for child in zk.get_children(root):
            if child.endswith(f".{sub}"):
                with contextlib.suppress(NoNodeError):
                    return str(json.loads(zk.get(f"{root}/{child}")[0])["url"])
        return None
    finally:
        zk.stop()
        zk.close()


def _grpc(node: Node, address: str, method: str, request: Any, answer: Callable[[bytes], Any]) -> Any:
    """One Subscriber call to the gRPC API at ``address``, with the service token as its API key."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(f"/google.pubsub.v1.Subscriber/{method}")
        raw = call(type(request).serialize(request), metadata=(("x-goog-api-key", node.server.token),), timeout=30)
        return answer(raw)


def _grpc_pulls(node: Node, base: str) -> float:
    """The gRPC Pull calls the worker at ``base`` answered, from its Prometheus page."""
    r = requests.get(f"{base}/metrics", headers=node.headers, timeout=10)
    counts = prometheus_samples(r.text)
    return sum(
        value
        for (name, labels), value in counts.items()
        if name == "ams_grpc_call_duration_seconds_count" and ("method", "Pull") in labels
    )


def _new_subscription(node: Node, base: str, prefix: str) -> tuple[str, str, str, str]:
    """A new project with a topic and a subscription to it (60 s ack deadline), made through the
    worker at ``base``: the project's, the topic's and the subscription's names, and its API path."""
    project, topic, sub = unique(prefix), unique("t"), unique("s")
    node.call(base, "POST", f"/projects/{project}", {"description": "workers"})
    node.call(base, "PUT", f"/projects/{project}/topics/{topic}")
    path = f"/projects/{project}/subscriptions/{sub}"
    node.call(base, "PUT", path, {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": 60})
    return project, topic, sub, path


def test_a_subscription_owned_by_one_worker_is_served_through_the_other(node: Node) -> None:
    w0, w1 = node.own
    project, topic, sub, path = _new_subscription(node, w0, "wp")
    # the first request claims the subscription: worker 1 owns it
    assert node.call(w1, "POST", f"{path}:pull", {"maxMessages": 1, "returnImmediately": True}) == {
        "receivedMessages": []
    }
    assert _owner_url(node, project, sub) == w1

    payloads = [f"m{i}" for i in range(5)]
    published = node.call(
        w0, "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64(p)} for p in payloads]}
    )
    assert len(published["messageIds"]) == 5
    # pulled and acknowledged at worker 0, which sends both on to worker 1's own port
    got: list[str] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        body = node.call(w0, "POST", f"{path}:pull", {"maxMessages": 5, "returnImmediately": True})
        received = body.get("receivedMessages", [])
        got += [r["message"]["data"] for r in received]
        if received:
            node.call(w0, "POST", f"{path}:acknowledge", {"ackIds": [r["ackId"] for r in received]})
    assert sorted(got) == sorted(b64(p) for p in payloads)
    assert _owner_url(node, project, sub) == w1  # worker 0 forwarded; it never owned it
    assert node.call(node.shared, "POST", f"{path}:pull", {"maxMessages": 5, "returnImmediately": True}) == {
        "receivedMessages": []
    }

    # the gRPC API: a pull at worker 0's own gRPC port is relayed to worker 1's own gRPC port, and
    # the ack through the shared gRPC port reaches the owner whichever worker takes it
    node.call(w0, "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64("g")}]})
    name = f"projects/{project}/subscriptions/{sub}"
    pulled: list[Any] = []
    deadline = time.monotonic() + 30
    while not pulled and time.monotonic() < deadline:
        request = t.PullRequest(subscription=name, max_messages=5, return_immediately=True)
        pulled = list(_grpc(node, node.own_grpc[0], "Pull", request, t.PullResponse.deserialize).received_messages)
    assert [m.message.data for m in pulled] == [b"g"]
    assert _grpc_pulls(node, w1) >= 1  # the owner answered it: worker 0 relayed it there
    ack = t.AcknowledgeRequest(subscription=name, ack_ids=[m.ack_id for m in pulled])
    _grpc(node, node.shared_grpc, "Acknowledge", ack, empty_pb2.Empty.FromString)
    assert node.call(w1, "POST", f"{path}:pull", {"maxMessages": 5, "returnImmediately": True}) == {
        "receivedMessages": []
    }
    assert _owner_url(node, project, sub) == w1


def test_a_killed_worker_is_replaced_and_serves_again(node: Node) -> None:
    w0, w1 = node.own
    project, topic, sub, path = _new_subscription(node, w0, "wk")
    node.call(w1, "POST", f"{path}:pull", {"maxMessages": 1, "returnImmediately": True})  # worker 1 owns it
    node.call(w0, "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64("k")}]})
    before = _worker_pids(node)
    os.kill(before[1], signal.SIGKILL)
    killed = time.monotonic()
    deadline = killed + 30
    while _answers(w1):  # until its sockets are closed (a connection the kernel had queued at its
        assert time.monotonic() < deadline  # listener of the shared port is reset with them)
        time.sleep(0.05)
    # meanwhile the shared port is served by worker 0; the dead owner's subscription is served
    # there too once ZooKeeper has ended its session: the pull waits for that, it does not fail
    assert node.build_info(node.shared)["node_name"] == f"{NODE}-w0"
    body = node.call(w0, "POST", f"{path}:pull", {"maxMessages": 5, "returnImmediately": True})
    assert [r["message"]["data"] for r in body["receivedMessages"]] == [b64("k")]
    assert _owner_url(node, project, sub) == w0
    # started again only once the claims it held have gone: the session's 4 s and 2 s
    assert "killed by SIGKILL, after" in node.server.log()
    assert "starting it again in 6.0s" in node.server.log()
    while True:
        with contextlib.suppress(requests.RequestException, AssertionError, StopIteration):
            info = node.build_info(node.own[1])
            if int(info["pid"]) not in before:
                break
        assert time.monotonic() < deadline, node.server.log()[-3000:]
        time.sleep(0.2)
    assert info["node_name"] == f"{NODE}-w1"
    assert _worker_pids(node)[0] == before[0]  # the other worker went on
    assert "worker 1 (pid" in node.server.log()
    # the new worker serves: a publish through it, and the subscription through it (forwarded)
    node.call(w1, "POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64("x")}]})
    body = node.call(w1, "POST", f"{path}:pull", {"maxMessages": 5, "returnImmediately": True})
    assert [r["message"]["data"] for r in body["receivedMessages"]] == [b64("x")]


def test_sigterm_stops_the_parent_and_its_workers_with_status_0(node: Node) -> None:
    pids = _worker_pids(node)
    started = time.monotonic()
    assert node.server.stop(STOP_BOUND + 10) == 0
    took = time.monotonic() - started
    assert took < STOP_BOUND, took
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for url in [node.shared, *node.own]:
        assert not _answers(url)
    assert "ams.workers stopped" in node.server.log()


def test_workers_whose_parent_is_killed_stop_by_themselves(tmp_path: Any) -> None:
    """A parent killed (it cannot stop its workers) leaves no worker serving: each sees it gone
    within a second and stops as on SIGTERM."""
    require_backend("kafka")
    base = free_block(3)
    env = {"AMS_WORKER_PORT_BASE": str(base + 1), "AMS_GRPC_PORT": "0", "AMS_PUSH_ENABLED": "false"}
    server = AmsServer(tmp_path / "data", backend="kafka", listen=("127.0.0.1", base), env=env, args=["--workers", "2"])
    own = [f"http://127.0.0.1:{base + 1}", f"http://127.0.0.1:{base + 2}"]
    try:
        server.start()
        deadline = time.monotonic() + 60
        while not all(_answers(url) for url in own):
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.2)
        server.kill()
        deadline = time.monotonic() + 15
        while any(_answers(url) for url in [*own, f"http://127.0.0.1:{base}"]):
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.2)
        log = server.log()
        assert log.count("is gone: stopping") == 2
        deadline = time.monotonic() + 15
        while log.count(" ams stopped") < 2:
            assert time.monotonic() < deadline, log[-3000:]
            time.sleep(0.2)
            log = server.log()
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        drop_database(server.env["AMS_MONGO_DATABASE"])
