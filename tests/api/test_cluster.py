"""A cluster of three kafka-backend nodes behind haproxy (tools/cluster.py), on the compare-and-swap
consume path (consume_owner off): round robin, several consumers on one subscription, and a node
killed with SIGKILL while messages flow."""

from __future__ import annotations

import base64
import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import require_backend
from tests.helpers import b64, drop_database, load_tool, prometheus_samples, unique

pytestmark = pytest.mark.slow

NODES = 3


cluster_tool = load_tool("cluster")


class Client:
    """requests through haproxy, trusting the cluster's CA (not the session's REQUESTS_CA_BUNDLE)."""

    def __init__(self, info: Any) -> None:
        self.base = info.url
        self.session = requests.Session()
        self.ca = str(info.ca_file)
        self.session.headers["x-api-key"] = info.token

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30) -> requests.Response:
        # verify per request: a Session's verify loses to REQUESTS_CA_BUNDLE, which the session
        # fixture tls_files points at another CA
        return self.session.request(method, self.base + path, json=body, timeout=timeout, verify=self.ca)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        r = self.request(method, path, body)
        assert r.status_code == 200, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def close(self) -> None:
        self.session.close()


#: The compare-and-swap consume path, which these tests were written and measured for (the node
#: kill below drains through it, and acks there reach the store whichever node handed out the
#: lease); the owner path, the cluster's default, has its own three-node tests in test_consume_owner.py.
CLUSTER_ENV = {"AMS_CONSUME_OWNER": "false"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    require_backend("kafka")  # outside CI a missing service skips; under CI=true it fails
    database = "ams_test_cluster_" + uuid.uuid4().hex[:10]
    try:
        info = cluster_tool.start_cluster(nodes=NODES, database=database, env=CLUSTER_ENV)
        assert info.database == database
        assert [n.name for n in info.nodes] == [f"node{n}" for n in range(1, NODES + 1)]
        yield info
    finally:
        try:
            cluster_tool.stop_cluster()
        finally:
            drop_database(database)


@pytest.fixture
def client(cluster: Any) -> Iterator[Client]:
    c = Client(cluster)
    yield c
    c.close()


@pytest.fixture
def project(client: Client) -> Iterator[str]:
    name = unique("cluster")
    client.ok("POST", f"/v1/projects/{name}", {"description": "cluster test"})
    yield name
    with contextlib.suppress(requests.RequestException):  # removes its Kafka topics too
        client.request("DELETE", f"/v1/projects/{name}")


def serving_node(client: Client) -> str:
    """The name of the node that answered: its Prometheus page names it (``ams_build_info``)."""
    r = client.request("GET", "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    names = [
        name
        for (metric, labels) in prometheus_samples(r.text)
        if metric == "ams_build_info"
        for key, name in labels
        if key == "node_name"
    ]
    assert len(names) == 1, r.text[:500]
    return names[0]


def node_log_tail(info: Any, lines: int = 30) -> str:
    out = []
    for node in info.nodes:
        text = node.log.read_text(errors="replace") if node.log.exists() else ""
        out.append(f"--- {node.log}\n" + "\n".join(text.splitlines()[-lines:]))
    return "\n".join(out)


# ------------------------------------------------------------------------------ round robin ---
def test_requests_are_spread_round_robin_over_the_nodes(cluster: Any, client: Client) -> None:
    names = [serving_node(client) for _ in range(3 * NODES)]
    expected = {f"node{n}" for n in range(1, NODES + 1)}
    assert set(names) == expected, names
    assert Counter(names) == dict.fromkeys(expected, 3), names  # one client, in turn: equal shares
    for i in range(len(names) - NODES + 1):
        assert len(set(names[i : i + NODES])) == NODES, f"not in turn: {names}"

    # each node stores its sample in the shared MongoDB when it answers /v1/metrics: after one call
    # per node, in turn, the answer lists every node
    for _ in range(NODES):
        metrics = client.ok("GET", "/v1/metrics")["metrics"]
    listed = {m["resource_name"] for m in metrics if m["metric"] == "ams_node.cpu_usage"}
    assert expected <= listed, listed


# ------------------------------------------------------------------ haproxy's Prometheus page ---
def test_haproxy_exporter_reports_the_process_the_backend_and_every_node(cluster: Any, client: Client) -> None:
    """haproxy's built-in exporter (the frontend ams_https_prometheus, as the haproxy role writes it)
    answers a scrape with the process, the AMS backend and one UP series per node."""
    client.ok("GET", "/v1/status")  # a request through ams_https, answered by a node of ams_nodes
    r = requests.get(f"http://{cluster_tool.HOST}:{cluster_tool.HAPROXY_PROMETHEUS_PORT}/metrics", timeout=10)
    assert r.status_code == 200, r.text[:500]
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers
    samples = [s for family in text_string_to_metric_families(r.text) for s in family.samples]

    def values(name: str, **labels: str) -> dict[str, float]:
        """{server or proxy: value} of the samples of ``name`` that carry ``labels``."""
        return {
            s.labels.get("server", s.labels.get("proxy", "")): s.value
            for s in samples
            if s.name == name and labels.items() <= s.labels.items()
        }

    started = values("haproxy_process_start_time_seconds")
    assert list(started) == [""], started  # the process: no labels
    assert 0 < started[""] <= time.time(), started
    nodes = {f"node{n}": 1.0 for n in range(1, NODES + 1)}
    # haproxy 2.6 names the state in a label: one series per node and state, 1 for the current one
    assert values("haproxy_server_status", proxy="ams_nodes", state="UP") == nodes
    assert values("haproxy_backend_status", proxy="ams_nodes", state="UP") == {"ams_nodes": 1.0}
    assert values("haproxy_backend_active_servers", proxy="ams_nodes") == {"ams_nodes": float(NODES)}
    assert values("haproxy_backend_http_responses_total", proxy="ams_nodes", code="2xx")["ams_nodes"] >= 1


# ------------------------------------------------------------------- many consumers, one sub ---
def test_consumers_on_one_subscription_get_every_message_once(cluster: Any, client: Client, project: str) -> None:
    total, batch, consumers = 400, 10, 4
    client.ok("PUT", f"/v1/projects/{project}/topics/t")
    client.ok(
        "PUT",
        f"/v1/projects/{project}/subscriptions/s",
        {"topic": f"projects/{project}/topics/t", "ackDeadlineSeconds": 60},
    )
    published: dict[int, str] = {}
    deliveries: list[tuple[int, str, int]] = []  # (message id, payload, consumer)
    errors: list[str] = []
    lock = threading.Lock()
    publishing_done = threading.Event()
    started = time.monotonic()
    give_up = started + 50  # well inside the 60 s ack deadline: any second delivery is a duplicate

    def publisher(worker: int, count: int) -> None:
        c = Client(cluster)
        try:
            for first in range(0, count, batch):
                payloads = [f"w{worker}-m{i}" for i in range(first, min(first + batch, count))]
                r = c.request(
                    "POST",
                    f"/v1/projects/{project}/topics/t:publish",
                    {"messages": [{"data": b64(p)} for p in payloads]},
                )
                if r.status_code != 200:
                    with lock:
                        errors.append(f"publish: {r.status_code} {r.text}")
                    return
                with lock:
                    for mid, payload in zip(r.json()["messageIds"], payloads, strict=True):
                        published[int(mid)] = payload
        except Exception as exc:  # reported by the test, never as an unhandled thread exception
            with lock:
                errors.append(f"publisher {worker}: {exc!r}")
        finally:
            c.close()

    def consumer(index: int) -> None:
        c = Client(cluster)
        immediately = "true" if index % 2 else "false"  # half of them long-poll
        try:
            while time.monotonic() < give_up:
                with lock:
                    if publishing_done.is_set() and len({d[0] for d in deliveries}) >= total:
                        return
                r = c.request(
                    "POST",
                    f"/v1/projects/{project}/subscriptions/s:pull",
                    {"maxMessages": "10", "returnImmediately": immediately},
                )
                if r.status_code != 200:
                    with lock:
                        errors.append(f"pull: {r.status_code} {r.text}")
                    return
                got = r.json()["receivedMessages"]
                if not got:
                    time.sleep(0.05)
                    continue
                with lock:
                    for m in got:
                        payload = base64.b64decode(m["message"]["data"]).decode()
                        deliveries.append((int(m["message"]["messageId"]), payload, index))
                a = c.request(
                    "POST", f"/v1/projects/{project}/subscriptions/s:acknowledge", {"ackIds": [got[-1]["ackId"]]}
                )
                if a.status_code != 200:
                    with lock:
                        errors.append(f"ack: {a.status_code} {a.text}")
                    return
        except Exception as exc:
            with lock:
                errors.append(f"consumer {index}: {exc!r}")
        finally:
            c.close()

    pubs = [threading.Thread(target=publisher, args=(w, total // 2)) for w in range(2)]
    cons = [threading.Thread(target=consumer, args=(i,)) for i in range(consumers)]
    for t in cons + pubs:
        t.start()
    for t in pubs:
        t.join(60)
    publishing_done.set()
    for t in cons:
        t.join(70)
    elapsed = time.monotonic() - started
    assert not any(t.is_alive() for t in pubs + cons), "a client thread is still running"
    assert not errors, f"{errors[:5]}\n{node_log_tail(cluster)}"

    assert sorted(published) == list(range(total))
    counts = Counter(mid for mid, _, _ in deliveries)
    twice = sorted(mid for mid, n in counts.items() if n > 1)
    assert not twice, f"delivered more than once within the ack deadline ({elapsed:.1f}s): {twice[:20]}"
    assert set(counts) == set(published), f"missing: {sorted(set(published) - set(counts))[:20]}"
    for mid, payload, _ in deliveries:
        assert published[mid] == payload, mid
    assert len({who for _, _, who in deliveries}) > 1, "one consumer got everything"
    assert elapsed < 55, f"took {elapsed:.1f}s, too close to the ack deadline to tell duplicates"
    offsets = client.ok("GET", f"/v1/projects/{project}/subscriptions/s:offsets")
    assert offsets == {"min": 0, "max": total, "current": total}


# ---------------------------------------------------------------------- SIGKILL of a node ---
RETRY_STATUSES = (502, 503, 504)


#: Seconds each publisher of the mid-traffic test waits between its requests of 5 messages.
PUBLISH_PAUSE = 0.03


def test_node_killed_mid_traffic_loses_nothing_acknowledged(cluster: Any, client: Client, project: str) -> None:
    client.ok("PUT", f"/v1/projects/{project}/topics/t")
    client.ok(
        "PUT",
        f"/v1/projects/{project}/subscriptions/s",
        {"topic": f"projects/{project}/topics/t", "ackDeadlineSeconds": 3},
    )
    acknowledged: set[str] = set()
    received: set[str] = set()
    retried = Counter[str]()
    errors: list[str] = []
    lock = threading.Lock()
    stop_publishing = threading.Event()
    stop_consuming = threading.Event()

    def retrying(c: Client, what: str, path: str, body: Any, until: float) -> requests.Response | None:
        """POST until the answer is not a connection error or a proxy/unavailable status."""
        while time.monotonic() < until:
            try:
                r = c.request("POST", path, body, timeout=15)
            except requests.RequestException:
                r = None
            if r is not None and r.status_code not in RETRY_STATUSES:
                return r
            with lock:
                retried[what] += 1
            time.sleep(0.1)
        return None

    def publisher(worker: int) -> None:
        c = Client(cluster)
        try:
            n = 0
            while not stop_publishing.is_set():
                payloads = [f"w{worker}-b{n}-m{i}" for i in range(5)]
                body = {"messages": [{"data": b64(p)} for p in payloads]}
                r = retrying(c, "publish", f"/v1/projects/{project}/topics/t:publish", body, time.monotonic() + 30)
                if r is None or r.status_code != 200:
                    with lock:
                        errors.append(f"publish gave up: {None if r is None else (r.status_code, r.text)}")
                    return
                with lock:
                    acknowledged.update(payloads)
                n += 1
                # paced (about 500 messages a second in all at most): what is published must drain
                # within the deadline below through the compare-and-swap consume path, which takes
                # about 150 a second here; unpaced, a run could publish more than that can drain
                time.sleep(PUBLISH_PAUSE)
        except Exception as exc:
            with lock:
                errors.append(f"publisher {worker}: {exc!r}")
        finally:
            c.close()

    def consumer(index: int) -> None:
        c = Client(cluster)
        try:
            while not stop_consuming.is_set():
                r = retrying(
                    c,
                    "pull",
                    f"/v1/projects/{project}/subscriptions/s:pull",
                    {"maxMessages": "20", "returnImmediately": "true"},
                    time.monotonic() + 30,
                )
                if r is None or r.status_code != 200:
                    with lock:
                        errors.append(f"pull gave up: {None if r is None else (r.status_code, r.text)}")
                    return
                got = r.json()["receivedMessages"]
                if not got:
                    time.sleep(0.1)
                    continue
                with lock:
                    received.update(base64.b64decode(m["message"]["data"]).decode() for m in got)
                a = retrying(
                    c,
                    "ack",
                    f"/v1/projects/{project}/subscriptions/s:acknowledge",
                    {"ackIds": [got[-1]["ackId"]]},
                    time.monotonic() + 30,
                )
                # 200; or, for a retried ack whose first try got through, 400 wrong ack; or 408 when
                # the retries outlived the lease (the messages come again): all fine for the test
                if a is None or a.status_code not in (200, 400, 408):
                    with lock:
                        errors.append(f"ack: {None if a is None else (a.status_code, a.text)}")
                    return
        except Exception as exc:
            with lock:
                errors.append(f"consumer {index}: {exc!r}")
        finally:
            c.close()

    pubs = [threading.Thread(target=publisher, args=(w,)) for w in range(3)]
    cons = [threading.Thread(target=consumer, args=(i,)) for i in range(3)]
    killed = False
    try:
        for t in pubs + cons:
            t.start()
        time.sleep(3.0)
        with lock:
            before_kill = len(acknowledged)
        cluster_tool.kill_node(2)
        killed = True
        time.sleep(5.0)  # publishing and consuming go on with two nodes
        stop_publishing.set()
        for t in pubs:
            t.join(45)
        # drain: leased-but-unacknowledged messages come again after the 3 s ack deadline
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if acknowledged <= received:
                    break
            time.sleep(0.25)
        time.sleep(1.0)
    finally:
        stop_publishing.set()
        stop_consuming.set()
        for t in pubs + cons:
            t.join(45)
    assert not any(t.is_alive() for t in pubs + cons), "a client thread is still running"
    assert not errors, f"{errors[:5]}\n{node_log_tail(cluster)}"
    assert killed
    assert before_kill > 20, f"the publishers did not get going before the kill ({before_kill})"
    with lock:
        after_kill = len(acknowledged) - before_kill
    assert after_kill > 20, f"publishing did not go on with two nodes ({after_kill} after the kill)"
    lost = acknowledged - received
    assert not lost, f"{len(lost)} acknowledged messages never received, e.g. {sorted(lost)[:10]}; retries {retried}"

    # the killed node comes back and serves again, directly and through haproxy
    node = cluster_tool.start_node(2)
    assert node.pid is not None
    assert requests.get(f"{node.url}/v1/status", timeout=5).status_code == 200
    names = {serving_node(client) for _ in range(3 * NODES)}
    assert "node2" in names, names
    for _ in range(NODES):  # a publish and a pull through each node in turn
        ids = client.ok("POST", f"/v1/projects/{project}/topics/t:publish", {"messages": [{"data": b64("after")}]})
        assert ids["messageIds"]
    offsets = client.ok("GET", f"/v1/projects/{project}/subscriptions/s:offsets")
    assert offsets["max"] >= len(acknowledged) + NODES
