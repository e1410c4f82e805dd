"""The production backend's faults under traffic (docs/production.md "Backend outages"): three
kafka-backend nodes behind haproxy (tools/cluster.py, as `make cluster-up`, but on the
compare-and-swap consume path: consume_owner off, see CLUSTER_ENV), a client publishing
and a client pulling and acknowledging through haproxy the whole time, and one of Kafka, the
MongoDB-wire server (FerretDB) or ZooKeeper stopped for 20 s, then started again.

What must hold, for each:
- during the outage every request is answered: 200, or 503 with the JSON error envelope (no 5xx
  of another kind, no reset); none waits past the moment its node finds the backend down (a few
  seconds), and once found every refusal is immediate and names what is down: haproxy sends the
  requests to the live nodes (ams_nodes_alive) instead of answering a bare 503 itself;
- ``/v1/status`` on every node names what is down;
- what does not need the missing service goes on: publishing while the metadata store is down,
  everything while ZooKeeper is;
- every message whose publish was answered 200 is delivered afterwards (at least once): handed to
  the consumer by a pull answered 200. An acknowledgement in flight when the store goes may be
  stored and still answered 503 (the store took the write, the answer never came back): the client
  cannot tell, the server does not deliver it again, and the message was delivered all the same;
- the nodes recover by themselves, with no restart: publishing and pulling work again soon after
  the service is back.

The figures (requests, failures, recovery seconds) go to .cache/faults-results.json and are
recorded in docs/production.md."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.conftest import require_backend
from tests.helpers import ROOT, drop_database, load_services_tool, load_tool, unique

pytestmark = pytest.mark.slow

services = load_services_tool()
cluster_tool = load_tool("cluster")

NODES = 3
OUTAGE_SECONDS = 20
#: what a client waits at most for one answer; the server's own deadlines are shorter
CLIENT_TIMEOUT = 30.0
#: how long a node may take to find a backend down: a health check every 2 s, a ping timeout of 5 s
DETECT_SECONDS = 8.0
#: once the outage is found, a request answered later than this hung instead of failing fast: a hang
#: lasts at least the ping timeout (5 s); a fast failure is the one re-ping (at most 1 s) and the
#: call, which took 2.05 s on the two cores while other work ran beside the suite
FAST_SECONDS = 3.0
RESULTS = ROOT / ".cache" / "faults-results.json"
#: what /v1/status says about each service when it is down
NAMED = {"kafka": "Kafka", "ferretdb": "metadata store", "zookeeper": "ZooKeeper"}


@dataclass
class Call:
    kind: str
    started: float
    seconds: float
    status: int  # 0: no answer (timeout, reset)
    body: str


@dataclass
class Traffic:
    """A publisher, a consumer and a status poller, each in its own thread, through haproxy."""

    info: Any
    project: str
    calls: list[Call] = field(default_factory=list)
    published: set[str] = field(default_factory=set)
    delivered: set[str] = field(default_factory=set)  # handed out by a pull answered 200
    received: set[str] = field(default_factory=set)  # and acknowledged with an answer of 200
    statuses: list[tuple[float, str, int, str]] = field(default_factory=list)  # (t, node, status, body)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def session(self) -> requests.Session:
        s = requests.Session()
        s.headers["x-api-key"] = self.info.token
        s.verify = str(self.info.ca_file)
        s.trust_env = False
        return s

    def call(self, s: requests.Session, kind: str, method: str, path: str, body: Any = None) -> Call:
        started = time.monotonic()
        try:
            r = s.request(method, self.info.url + path, json=body, timeout=CLIENT_TIMEOUT)
            status, text = r.status_code, r.text
        except requests.RequestException as exc:
            status, text = 0, repr(exc)
        call = Call(kind, started, time.monotonic() - started, status, text)
        with self.lock:
            self.calls.append(call)
        return call

    def publisher(self) -> None:
        s = self.session()
        while not self.stop.is_set():
            ids = [uuid.uuid4().hex for _ in range(5)]
            body = {"messages": [{"data": base64.b64encode(i.encode()).decode()} for i in ids]}
            call = self.call(s, "publish", "POST", f"/v1/projects/{self.project}/topics/t:publish", body)
            if call.status == 200:
                with self.lock:
                    self.published.update(ids)
            time.sleep(0.05)

    def pull_once(self, s: requests.Session) -> Call:
        path = f"/v1/projects/{self.project}/subscriptions/s"
        call = self.call(s, "pull", "POST", f"{path}:pull", {"maxMessages": "100", "returnImmediately": "true"})
        if call.status != 200:
            return call
        received = json.loads(call.body).get("receivedMessages", [])
        ids = {base64.b64decode(m["message"]["data"]).decode() for m in received}
        with self.lock:
            self.delivered.update(ids)
        if received:
            ack = self.call(s, "ack", "POST", f"{path}:acknowledge", {"ackIds": [received[-1]["ackId"]]})
            if ack.status == 200:
                with self.lock:
                    self.received.update(ids)
        return call

    def consumer(self) -> None:
        s = self.session()
        while not self.stop.is_set():
            self.pull_once(s)
            time.sleep(0.05)

    def poller(self) -> None:
        sessions = {node.name: requests.Session() for node in self.info.nodes}
        while not self.stop.is_set():
            for node in self.info.nodes:
                try:
                    r = sessions[node.name].get(f"{node.url}/v1/status", timeout=5)
                    entry = (time.monotonic(), node.name, r.status_code, r.text)
                except requests.RequestException as exc:
                    entry = (time.monotonic(), node.name, 0, repr(exc))
                with self.lock:
                    self.statuses.append(entry)
            time.sleep(0.5)

    def __enter__(self) -> Traffic:
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self.publisher, self.consumer, self.poller)]
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(CLIENT_TIMEOUT + 5)


#: The compare-and-swap consume path, whose figures docs/production.md records: consuming goes on
#: while ZooKeeper is down. With consume_owner (the cluster's default) an owner that cannot confirm
#: its ZooKeeper session hands out no lease, so pulls and acks would answer 503 meanwhile.
CLUSTER_ENV = {"AMS_CONSUME_OWNER": "false"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    require_backend("kafka")  # outside CI a missing service skips; under CI=true it fails
    database = "ams_test_faults_" + uuid.uuid4().hex[:10]
    try:
        yield cluster_tool.start_cluster(nodes=NODES, database=database, env=CLUSTER_ENV)
    finally:
        try:
            cluster_tool.stop_cluster()
        finally:
            for name in ("zookeeper", "ferretdb", "kafka"):  # whatever a failed test left stopped
                services.start_service(name)
            drop_database(database)


def works(traffic: Traffic) -> bool:
    """One publish and one pull, both answered 200, through haproxy."""
    s = traffic.session()
    body = {"messages": [{"data": base64.b64encode(b"probe").decode()}]}
    published = traffic.call(s, "probe", "POST", f"/v1/projects/{traffic.project}/topics/p:publish", body)
    pulled = traffic.call(
        s, "probe", "POST", f"/v1/projects/{traffic.project}/subscriptions/ps:pull", {"returnImmediately": "true"}
    )
    return published.status == 200 and pulled.status == 200


def message(body: str) -> str:
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:80]


def slowest(calls: list[Call]) -> str:
    """The slowest of ``calls``, told as kind, status, seconds and answer."""
    c = max(calls, key=lambda c: c.seconds, default=None)
    return "" if c is None else f"{c.kind} {c.status} {c.seconds:.2f}s {message(c.body)}"


def record(service: str, figures: dict[str, Any]) -> None:
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[service] = figures
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("service", ["kafka", "ferretdb", "zookeeper"])
def test_an_outage_fails_fast_loses_nothing_and_heals_itself(cluster: Any, service: str) -> None:
    project = unique("faults")
    setup = Traffic(cluster, project)
    s = setup.session()
    for method, path, body in (
        ("POST", f"/v1/projects/{project}", {"description": "faults"}),
        ("PUT", f"/v1/projects/{project}/topics/t", None),
        ("PUT", f"/v1/projects/{project}/topics/p", None),
        ("PUT", f"/v1/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"}),
        ("PUT", f"/v1/projects/{project}/subscriptions/ps", {"topic": f"projects/{project}/topics/p"}),
    ):
        r = s.request(method, cluster.url + path, json=body, timeout=CLIENT_TIMEOUT)
        assert r.status_code == 200, r.text

    with Traffic(cluster, project) as traffic:
        time.sleep(3)
        services.stop_service(service)
        down_at = time.monotonic()  # the process is gone
        time.sleep(OUTAGE_SECONDS)
        restart_at = time.monotonic()  # from here on the service may answer again
        services.start_service(service)
        up_at = time.monotonic()
        while not works(traffic) and time.monotonic() < up_at + 120:
            time.sleep(0.5)
        recovered_after = time.monotonic() - up_at
        time.sleep(3)
    drain_until = time.monotonic() + 60
    while traffic.published - traffic.delivered and time.monotonic() < drain_until:
        if traffic.pull_once(traffic.session()).status != 200:
            time.sleep(0.5)

    during = [c for c in traffic.calls if down_at <= c.started <= up_at]
    # found down and surely still gone: a call that starts after restart_at may meet a broker that is
    # starting, which answers the ping before it leads its partitions, and wait on it (a CI run saw a
    # publish answered "503 Backend Error" after 3.54 s there); those are bound by the outage's limit
    found = [c for c in during if down_at + DETECT_SECONDS <= c.started <= restart_at]
    starting = [c for c in during if c.started > restart_at]
    failed = [c for c in traffic.calls if c.status != 200 and c.kind != "probe"]
    figures = {
        "requests": len(traffic.calls),
        "during_outage": len(during),
        "failed": len(failed),
        "failed_by_answer": dict(Counter(f"{c.status} {message(c.body)}" for c in failed).most_common()),
        "slowest_during_outage_s": round(max((c.seconds for c in during), default=0.0), 2),
        "slowest_once_found_s": round(max((c.seconds for c in found), default=0.0), 2),
        "slowest_once_found": slowest(found),
        "slowest_while_starting_s": round(max((c.seconds for c in starting), default=0.0), 2),
        "published": len(traffic.published),
        "lost": len(traffic.published - traffic.delivered),
        "delivered_ack_unanswered": len(traffic.delivered - traffic.received),
        "recovered_after_s": round(recovered_after, 1),
        "status_during_outage": sorted(
            {
                f"{st} {body[:120]}"
                for t, _n, st, body in traffic.statuses
                if down_at + DETECT_SECONDS <= t <= restart_at
            }
        ),
    }
    record(service, figures)
    print(json.dumps(figures, indent=2))
    samples = [f"{c.kind} {c.status} {c.seconds:.1f}s {c.body[:200]}" for c in failed[:10]]

    for c in failed:
        assert c.status == 503, samples
        assert json.loads(c.body)["error"]["code"] == 503, samples
    # in flight when the backend went: answered when the node finds it down, not at a timeout
    assert figures["slowest_during_outage_s"] <= DETECT_SECONDS + FAST_SECONDS, figures
    assert figures["slowest_once_found_s"] <= FAST_SECONDS, figures
    assert figures["lost"] == 0, figures
    assert recovered_after < 120, figures
    # /v1/status on every node names what is down (ZooKeeper: a warning, the node serves on)
    named = [body for t, _n, st, body in traffic.statuses if down_at + DETECT_SECONDS <= t <= restart_at]
    assert named, figures
    assert all(NAMED[service] in body for body in named), figures
    # once found, and while the service is still gone, the refusals come from the nodes (haproxy falls
    # back to the live ones) and name it. Not after restart_at: a broker that is starting answers the
    # health check's ping before it leads its partitions, and a publish meanwhile is told Kafka's own
    # "503 Backend Error" (ams_app/service/guard.py), which is right (checked as 503 above)
    found_failed = [c for c in found if c.status != 200]
    assert all(NAMED[service].lower() in message(c.body).lower() for c in found_failed), figures
    published_meanwhile = [c for c in found if c.kind == "publish" and c.status == 200]
    if service == "kafka":
        assert found_failed, figures  # neither publishing nor pulling can work without the broker
    elif service == "ferretdb":  # publishing goes on, on the metadata cached on every node
        assert published_meanwhile, figures
        assert found_failed, figures  # pulls need the cursors in the metadata store
    else:  # ZooKeeper: nothing changed metadata meanwhile, so nothing failed
        assert not failed, figures
