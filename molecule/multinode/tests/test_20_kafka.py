"""Three Kafka brokers: AMS topics on three in-sync replicas (min.insync.replicas 2, no unclean leader
election); the loss of the broker that leads a topic while a client publishes and pulls through
haproxy loses nothing answered 200 and duplicates nothing, and the cluster is fully replicated again
once the broker is back."""

from __future__ import annotations

import time
from typing import Any

import pytest
from multinode import (
    GROUPS,
    KAFKA_HEALTH,
    PROJECT,
    Api,
    Traffic,
    check_nothing_lost,
    host,
    kafka_metadata,
    kill,
    report,
    start,
    unique,
    wait_until,
)

BROKERS = GROUPS["kafka"]


def metadata(brokers: list[str] = BROKERS) -> Any:
    return kafka_metadata(brokers)


def fully_replicated() -> bool:
    summary = KAFKA_HEALTH.summarize(metadata())
    return summary["brokers"] == [1, 2, 3] and summary["under_replicated"] == 0 and summary["offline"] == 0


def partition_of(ams_topic: str) -> Any:
    """The partition of the Kafka topic behind an AMS topic ({project uuid}.{topic})."""
    topics = [t for t in metadata().topics if t.name.endswith(f".{ams_topic}")]
    assert len(topics) == 1, [t.name for t in metadata().topics]
    (partition,) = topics[0].partitions
    return partition


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    # the previous test took a broker's host away and back
    wait_until(fully_replicated, "3 brokers and no under-replicated partition", timeout=300)
    # and the ZooKeeper tests moved the controller: until it has told every broker, a new topic's
    # leader may answer "not leader" for longer than a request waits (a 503 that says retry); and
    # a broker whose ZooKeeper session the new leader expires drops out of the cluster up to a
    # session timeout (Kafka's default, 18 s) later, so it must hold across that
    wait_until(lambda: settled(client), "a settled cluster that takes new topics", timeout=420, every=2)
    return client


def settled(client: Api) -> bool:
    if not (fully_replicated() and a_new_topic_serves(client)):
        return False
    time.sleep(20)
    return fully_replicated() and a_new_topic_serves(client)


def a_new_topic_serves(client: Api) -> bool:
    topic = unique("probe")
    if client.request("PUT", f"/projects/{PROJECT}/topics/{topic}").status_code != 200:
        return False
    body = {"topic": f"projects/{PROJECT}/topics/{topic}"}
    return client.request("PUT", f"/projects/{PROJECT}/subscriptions/{unique('probe')}", body).status_code == 200


@pytest.mark.parametrize("broker", BROKERS)
def test_brokers_refuse_unsafe_writes(broker):
    properties = host(broker).file("/etc/kafka/server.properties").content_string
    assert "\nmin.insync.replicas=2\n" in properties
    assert "\nunclean.leader.election.enable=false\n" in properties
    assert "\ndefault.replication.factor=3\n" in properties


def test_an_ams_topic_has_three_in_sync_replicas(api):
    topic = unique("rf")
    api.topic(topic)
    partition = partition_of(topic)
    assert sorted(partition.replicas) == [1, 2, 3]
    assert sorted(partition.isr) == [1, 2, 3]


@pytest.mark.timeout(900)
def test_losing_the_leading_broker_loses_and_duplicates_nothing(api):
    topic, live, audit = unique("bt"), unique("bl"), unique("ba")
    api.topic(topic)
    api.subscription(live, topic)
    api.subscription(audit, topic, ack_deadline=600)  # read once, at the end
    leader_id = partition_of(topic).leader
    victim = BROKERS[leader_id - 1]  # broker.id is the position in the group plus one
    survivors = [b for b in BROKERS if b != victim]

    with Traffic(api, topic, live) as traffic:
        time.sleep(5)
        killed = kill(victim)
        published_before = len(traffic.published)
        wait_until(
            lambda: (p := partition_of_from(topic, survivors)) is not None and p.leader not in (-1, leader_id),
            "a new leader",
            120,
        )
        new_leader = time.monotonic() - killed
        # publishing goes on with two in-sync replicas (min.insync.replicas 2)
        wait_until(lambda: len(traffic.published) > published_before + 50, "publishing on the two brokers left")
        time.sleep(max(0.0, 20 - (time.monotonic() - killed)))
        start(victim)
        restarted = time.monotonic()
        wait_until(fully_replicated, "no under-replicated partition after the broker is back", timeout=300)
        replicated = time.monotonic() - restarted
        time.sleep(3)
    assert len(traffic.published) > 100, traffic.summary()

    outcome = check_nothing_lost(api, traffic, live, audit)
    audit_empty = api.empty_with_backlog  # of the audit subscription's drain, the last
    report(
        "kafka_leader_broker_loss",
        {**{k: v for k, v in traffic.summary().items() if k != "failures"},
         "killed": victim, "new_leader_after_s": round(new_leader, 1),
         "under_replicated_back_to_0_after_restart_s": round(replicated, 1),
         "lost": outcome["lost"], "duplicated_in_log": outcome["written_twice"],
         "empty_pulls_with_backlog": audit_empty,
         "failures": traffic.summary()["failures"][:10]},
    )  # fmt: skip


def partition_of_from(ams_topic: str, brokers: list[str]) -> Any:
    """The topic's partition as the first of ``brokers`` that answers has it; None while it has not."""
    topics = [t for t in metadata(brokers).topics if t.name.endswith(f".{ams_topic}") and t.partitions]
    return topics[0].partitions[0] if topics else None
