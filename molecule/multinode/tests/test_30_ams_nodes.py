"""Three AMS nodes behind haproxy, with a client publishing and pulling the whole time:

- the node whose push worker delivers a push subscription is killed (podman kill: the host is lost):
  haproxy takes it out, only the client's requests in flight on it may fail (counted), another node's
  push worker takes the subscription over and the endpoint gets every message, nothing answered 200
  is lost;
- a node is stopped gracefully (systemctl stop ams): not one request fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import requests
from multinode import (
    GROUPS,
    INTERNAL_CA,
    PROJECT,
    Api,
    Receiver,
    Traffic,
    check_nothing_lost,
    haproxy_servers,
    host,
    kill,
    node_url,
    push_owner,
    push_subscription,
    report,
    start,
    unb64,
    unique,
    wait_until,
)

NODES = GROUPS["ams"]


def all_up() -> bool:
    return haproxy_servers() == dict.fromkeys(NODES, "UP")


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    return client


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_haproxy_balances_over_the_three_nodes(api):
    wait_until(all_up, "all AMS nodes UP in haproxy")
    for node in NODES:  # each node on its own address
        assert requests.get(node_url(node) + "/status", timeout=10, verify=str(INTERNAL_CA)).status_code == 200
    # round robin: six calls reach every node, and each one records its own sample under its name: a
    # worker's (the node's with -w0, -w1, ...: docs/production.md, "A process per core")
    for _ in range(2 * len(NODES)):
        metrics = api.call("GET", "/metrics")["metrics"]
    names = {m["resource_name"] for m in metrics if m["resource_type"] == "ams_node"}
    assert {re.sub(r"-w\d+$", "", name) for name in names} == set(NODES), names


def owners_of(sub: str) -> list[str]:
    """The nodes whose log says they took ``sub``'s leases (consume_owner: 'owner: holding P.S')."""
    held = []
    for node in NODES:
        log = "journalctl -u ams --since -30min --no-pager -o cat"
        out = host(node).run(f"{log} | grep -F 'owner: holding' | grep -cF '.{sub}'")
        if out.stdout.strip() not in ("", "0"):
            held.append(node)
    return held


def test_one_node_owns_a_pull_subscription_and_the_others_forward_to_it(api):
    """The production inventory runs consume_owner: consumers on every node share one subscription,
    each pull is served by its one owner (the other nodes forward), and no message goes twice."""
    wait_until(all_up, "all AMS nodes UP in haproxy")
    topic, sub = unique("ot"), unique("os")
    api.topic(topic)
    api.subscription(sub, topic, ack_deadline=600)
    payloads = [unique("m") for _ in range(30)]
    api.publish(topic, payloads)
    got: list[str] = []
    for node in NODES:  # one node after the other, each spoken to directly
        body = {"maxMessages": "10", "returnImmediately": "true"}
        answer = Api(node_url(node)).call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:pull", body)
        got += [unb64(m["message"]["data"]) for m in answer["receivedMessages"]]
    assert sorted(got) == sorted(payloads)  # each node's consumer got ten others: the leases are shared
    assert len(owners_of(sub)) == 1, owners_of(sub)


@pytest.mark.timeout(900)
def test_killing_a_node_fails_only_its_requests_in_flight_and_push_moves(api, receiver):
    wait_until(all_up, "all AMS nodes UP in haproxy")
    topic, live, audit, pushed = unique("nt"), unique("nl"), unique("na"), unique("np")
    api.topic(topic)
    api.subscription(live, topic)
    api.subscription(audit, topic, ack_deadline=600)
    push_subscription(api, pushed, topic, receiver)
    owner = wait_until(lambda: push_owner(api, pushed), "a push worker owning the subscription")

    # one message a request, ten a second: the push endpoint gets them one per POST, so the stream
    # stays one it can take on a loaded machine, and the test can ask for every one of them
    with Traffic(api, topic, live, batch=1, pause=0.1) as traffic:
        time.sleep(5)
        killed = kill(owner)
        wait_until(lambda: haproxy_servers().get(owner) == "DOWN", f"haproxy marking {owner} DOWN", every=0.2)
        marked_down = time.monotonic() - killed
        new_owner = wait_until(
            lambda: (o := push_owner(api, pushed)) not in (None, owner) and o, "another node's push worker", every=0.5
        )
        taken_over = time.monotonic() - killed
        time.sleep(5)
        start(owner)
        wait_until(lambda: haproxy_servers().get(owner) == "UP", f"{owner} UP again in haproxy", timeout=180)
        back_up = time.monotonic() - killed
        time.sleep(3)

    summary = traffic.summary()
    # the client runs two threads, one request each at a time: at most those two were on the node
    assert len(traffic.failures) <= 2, summary
    outcome = check_nothing_lost(api, traffic, live, audit)
    try:
        wait_until(lambda: all(receiver.counts()[p] >= 1 for p in traffic.published), "every message pushed", 300)
    except AssertionError:
        unpushed = [p for p in traffic.published if receiver.counts()[p] == 0]
        status = api.call("GET", f"/projects/{PROJECT}/subscriptions/{pushed}").get("pushStatus")
        raise AssertionError(
            f"{len(unpushed)} of {len(traffic.published)} never pushed; pushStatus: {status}"
        ) from None
    pushed_twice = sum(1 for n in receiver.counts().values() if n > 1)
    report(
        "ams_node_killed",
        {**{k: v for k, v in summary.items()}, **outcome, "killed": owner, "push_new_owner": new_owner,
         "haproxy_down_after_s": round(marked_down, 1), "push_taken_over_after_s": round(taken_over, 1),
         "node_up_again_after_s": round(back_up, 1), "pushed_more_than_once": pushed_twice},
    )  # fmt: skip


@pytest.mark.timeout(600)
def test_a_graceful_stop_fails_no_request(api):
    wait_until(all_up, "all AMS nodes UP in haproxy")
    node = NODES[1]
    topic, live, audit = unique("gt"), unique("gl"), unique("ga")
    api.topic(topic)
    api.subscription(live, topic)
    api.subscription(audit, topic, ack_deadline=600)
    with Traffic(api, topic, live) as traffic:
        time.sleep(5)
        stopped = host(node).run("systemctl stop ams")
        assert stopped.rc == 0, stopped.stderr
        wait_until(lambda: haproxy_servers().get(node) == "DOWN", f"haproxy marking {node} DOWN")
        time.sleep(5)
        assert host(node).run("systemctl start ams").rc == 0
        wait_until(lambda: haproxy_servers().get(node) == "UP", f"{node} UP again")
        time.sleep(3)
    summary = traffic.summary()
    assert traffic.failures == [], summary
    outcome = check_nothing_lost(api, traffic, live, audit)
    report("ams_node_graceful_stop", {**summary, **outcome, "stopped": node})
