"""Per-message delivery through the API (docs/delivery.md): nack and per-message deadlines, retry
backoff, dead-letter topics, filters, ordering keys, exactly-once; and what a plain subscription
keeps from the original. On both backends."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.helpers import Api, b64, error_of, sample, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)


def make_sub(api: Api, project: str, topic: str, **fields: Any) -> str:
    name = unique("sub")
    api.ok(
        "PUT", f"/projects/{project}/subscriptions/{name}", {"topic": f"projects/{project}/topics/{topic}", **fields}
    )
    return name


def publish(api: Api, project: str, topic: str, *messages: dict[str, Any]) -> list[str]:
    body = {
        "messages": [{"data": b64(m.get("text", "x")), **{k: v for k, v in m.items() if k != "text"}} for m in messages]
    }
    return list(api.ok("POST", f"/projects/{project}/topics/{topic}:publish", body)["messageIds"])


def text(received: dict[str, Any]) -> str:
    return base64.b64decode(received["message"]["data"]).decode()


def modack(api: Api, project: str, sub: str, ack_ids: list[str], seconds: int) -> Any:
    body = {"ackIds": ack_ids, "ackDeadlineSeconds": seconds}
    return api.post(f"/projects/{project}/subscriptions/{sub}:modifyAckDeadline", body)


def sub_view(api: Api, project: str, sub: str) -> dict[str, Any]:
    return dict(api.ok("GET", f"/projects/{project}/subscriptions/{sub}"))


# --- what a plain subscription keeps, and the regressions found from outside ----------------------
def test_a_nack_with_ack_ids_gives_the_message_back_and_leaves_the_subscription_deadline(
    api: Api, project: str, topic: str
) -> None:
    sub = make_sub(api, project, topic, ackDeadlineSeconds=120)
    api.publish(project, topic, "a", "b", "c")
    got = api.pull(project, sub, 3)
    assert modack(api, project, sub, [got[1]["ackId"]], 0).status_code == 200
    assert sub_view(api, project, sub)["ackDeadlineSeconds"] == 120
    again = api.pull(project, sub, 3)
    assert [text(m) for m in again] == ["b"]  # at once, not after the deadline
    # the cumulative ack of the last id still takes the earlier message of its pull, not the nacked one
    assert api.ack(project, sub, [got[2]["ackId"]]).status_code == 200
    assert api.ack(project, sub, [again[0]["ackId"]]).status_code == 200
    offsets = api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")
    assert offsets["current"] == 3


def test_a_deadline_change_with_ack_ids_extends_those_leases_only(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, ackDeadlineSeconds=1)
    api.publish(project, topic, "a", "b")
    got = api.pull(project, sub, 2)
    assert modack(api, project, sub, [got[0]["ackId"]], 60).status_code == 200
    time.sleep(2.2)  # the server's clock: b's lease of one second runs out, a's was moved to a minute
    assert [text(m) for m in api.pull(project, sub, 2)] == ["b"]
    assert sub_view(api, project, sub)["ackDeadlineSeconds"] == 1


def test_a_subscription_deadline_of_zero_is_the_default_on_create_and_on_change(
    api: Api, project: str, topic: str, sub: str
) -> None:
    path = f"/projects/{project}/subscriptions/{sub}:modifyAckDeadline"
    api.ok("POST", path, {"ackDeadlineSeconds": 30})
    assert sub_view(api, project, sub)["ackDeadlineSeconds"] == 30
    api.ok("POST", path, {"ackDeadlineSeconds": 0})
    assert sub_view(api, project, sub)["ackDeadlineSeconds"] == 10
    assert sub_view(api, project, make_sub(api, project, topic, ackDeadlineSeconds=0))["ackDeadlineSeconds"] == 10


def test_a_plain_subscription_shows_none_of_the_new_fields(api: Api, project: str, sub: str) -> None:
    assert set(sub_view(api, project, sub)) == {"name", "topic", "pushConfig", "ackDeadlineSeconds", "createdOn"}


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"messageRetentionDuration": "3600s"}, "messageRetentionDuration is a topic's"),
        ({"filter": 'attributes.a = "1" OR'}, "Invalid filter: "),
        ({"retryPolicy": {"minimumBackoff": "700s"}}, "retryPolicy needs"),
        ({"deadLetterPolicy": {"deadLetterTopic": "projects/x/topics/y"}}, "must be in the subscription's project"),
    ],
)
def test_what_the_server_cannot_honour_is_refused_not_dropped(
    api: Api, project: str, topic: str, fields: dict[str, Any], says: str
) -> None:
    body = {"topic": f"projects/{project}/topics/{topic}", **fields}
    r = api.put(f"/projects/{project}/subscriptions/{unique('sub')}", body)
    assert r.status_code == 400
    assert says in error_of(r)["message"]


def test_a_topic_keeps_its_own_retention(api: Api, project: str) -> None:
    name = unique("topic")
    shown = api.ok("PUT", f"/projects/{project}/topics/{name}", {"messageRetentionDuration": "3600s"})
    assert shown["messageRetentionDuration"] == "3600s"
    assert api.ok("GET", f"/projects/{project}/topics/{name}")["messageRetentionDuration"] == "3600s"
    r = api.put(f"/projects/{project}/topics/{unique('topic')}", {"messageRetentionDuration": "60s"})
    assert r.status_code == 400
    assert "messageRetentionDuration must be" in error_of(r)["message"]
    plain = api.ok("PUT", f"/projects/{project}/topics/{unique('topic')}")
    assert "messageRetentionDuration" not in plain


def test_a_dead_letter_topic_must_exist(api: Api, project: str, topic: str) -> None:
    body = {
        "topic": f"projects/{project}/topics/{topic}",
        "deadLetterPolicy": {"deadLetterTopic": f"projects/{project}/topics/nope"},
    }
    r = api.put(f"/projects/{project}/subscriptions/{unique('sub')}", body)
    assert r.status_code == 404


# --- per-message acks, retries and dead letters ---------------------------------------------------
def test_per_message_acks_do_not_undo_a_nack(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, retryPolicy={"minimumBackoff": "0s", "maximumBackoff": "1s"})
    view = sub_view(api, project, sub)
    assert view["retryPolicy"] == {"minimumBackoff": "0s", "maximumBackoff": "1s"}
    api.publish(project, topic, *[f"m{i}" for i in range(6)])
    got = api.pull(project, sub, 6)
    assert all(m["ackId"].endswith(".1") for m in got)  # the delivery's attempt
    assert modack(api, project, sub, [got[3]["ackId"]], 0).status_code == 200
    assert api.ack(project, sub, [got[5]["ackId"]]).status_code == 200  # its own message only
    again = api.pull(project, sub, 6)
    assert [text(m) for m in again] == ["m3"]
    assert again[0]["ackId"].endswith(":3.2")
    assert (
        api.ack(project, sub, [m["ackId"] for m in got[:3]] + [got[4]["ackId"], again[0]["ackId"]]).status_code == 200
    )
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 6


def test_a_nacked_message_waits_for_its_backoff(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, retryPolicy={"minimumBackoff": "2s", "maximumBackoff": "10s"})
    api.publish(project, topic, "slow")
    first = api.pull(project, sub)
    modack(api, project, sub, [first[0]["ackId"]], 0)
    assert api.pull(project, sub) == []
    time.sleep(2.1)  # the server's clock
    assert [text(m) for m in api.pull(project, sub)] == ["slow"]


def test_a_poison_message_goes_to_the_dead_letter_topic_after_its_attempts(api: Api, project: str, topic: str) -> None:
    dead = unique("dead")
    api.ok("PUT", f"/projects/{project}/topics/{dead}")
    watcher = make_sub(api, project, dead)
    policy = {"deadLetterTopic": f"projects/{project}/topics/{dead}", "maxDeliveryAttempts": 5}
    sub = make_sub(api, project, topic, deadLetterPolicy=policy)
    assert sub_view(api, project, sub)["deadLetterPolicy"] == policy
    api.publish(project, topic, "poison", "fine", attributes={"kind": "test"})
    attempts = []
    for _ in range(5):
        got = {text(m): m for m in api.pull(project, sub, 2)}
        attempts.append(got["poison"]["deliveryAttempt"])
        poison_published = got["poison"]["message"]["publishTime"]
        if "fine" in got:
            api.ack(project, sub, [got["fine"]["ackId"]])
        modack(api, project, sub, [got["poison"]["ackId"]], 0)
    assert attempts == [1, 2, 3, 4, 5]
    assert api.pull(project, sub, 2) == []  # handed off, never delivered again
    moved = api.pull(project, watcher, 5)
    assert [text(m) for m in moved] == ["poison"]
    assert moved[0]["message"]["attributes"] == {
        "kind": "test",
        "CloudPubSubDeadLetterSourceSubscription": sub,
        "CloudPubSubDeadLetterSourceSubscriptionProject": project,
        "CloudPubSubDeadLetterSourceDeliveryCount": "5",
        "CloudPubSubDeadLetterSourceTopicPublishTime": poison_published,
    }
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 2
    r = api.delete(f"/projects/{project}/topics/{dead}")
    assert r.status_code == 409
    assert sub in error_of(r)["message"]
    api.ok("DELETE", f"/projects/{project}/subscriptions/{sub}")
    api.ok("DELETE", f"/projects/{project}/topics/{dead}")


# --- filters ---------------------------------------------------------------------------------------
def test_a_filter_delivers_the_matching_messages_and_acknowledges_the_others(
    api: Api, project: str, topic: str
) -> None:
    sub = make_sub(api, project, topic, filter='attributes.site = "GRNET" AND NOT attributes:test')
    assert sub_view(api, project, sub)["filter"] == 'attributes.site = "GRNET" AND NOT attributes:test'
    publish(
        api,
        project,
        topic,
        {"text": "a", "attributes": {"site": "CERN"}},
        {"text": "b", "attributes": {"site": "GRNET"}},
        {"text": "c", "attributes": {"site": "GRNET", "test": "1"}},
        {"text": "d"},
        {"text": "e", "attributes": {"site": "GRNET"}},
    )
    got = api.pull(project, sub, 10)
    assert [text(m) for m in got] == ["b", "e"]
    api.ack(project, sub, [m["ackId"] for m in got])
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 5


def test_a_pull_reads_past_many_messages_the_filter_turns_away(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, filter="attributes:wanted")
    publish(api, project, topic, *[{"text": f"skip{i}", "attributes": {"other": "1"}} for i in range(900)])
    publish(api, project, topic, {"text": "needle", "attributes": {"wanted": "1"}})
    got = api.pull(project, sub, 10)  # returnImmediately: still found, past nine hundred others
    assert [text(m) for m in got] == ["needle"]


def test_a_malformed_filter_says_where_it_fails(api: Api, project: str, topic: str) -> None:
    body = {
        "topic": f"projects/{project}/topics/{topic}",
        "filter": 'attributes.a = "1" AND attributes.b = "2" OR attributes:c',
    }
    r = api.put(f"/projects/{project}/subscriptions/{unique('sub')}", body)
    assert r.status_code == 400
    message = error_of(r)["message"]
    assert message.startswith("Invalid filter: AND and OR cannot be mixed without parentheses")
    assert message.endswith("at position 42")


# --- ordering keys ---------------------------------------------------------------------------------
def test_ordering_keys_deliver_each_key_in_order_one_at_a_time(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, enableMessageOrdering=True)
    assert sub_view(api, project, sub)["enableMessageOrdering"] is True
    publish(
        api,
        project,
        topic,
        {"text": "a1", "orderingKey": "a"},
        {"text": "a2", "orderingKey": "a"},
        {"text": "b1", "orderingKey": "b"},
        {"text": "free"},
        {"text": "a3", "orderingKey": "a"},
    )
    first = api.pull(project, sub, 10)
    assert [text(m) for m in first] == ["a1", "b1", "free"]
    assert first[0]["message"]["orderingKey"] == "a"
    assert "orderingKey" not in first[2]["message"]
    assert api.pull(project, sub, 10) == []  # a and b are out
    modack(api, project, sub, [first[0]["ackId"]], 0)  # a1 back: a2 must not overtake it
    again = api.pull(project, sub, 10)
    assert [text(m) for m in again] == ["a1"]
    api.ack(project, sub, [again[0]["ackId"]])
    assert [text(m) for m in api.pull(project, sub, 10)] == ["a2"]


# --- exactly-once ----------------------------------------------------------------------------------
def test_exactly_once_takes_only_the_newest_ack_id_and_names_the_ones_it_refused(
    api: Api, project: str, topic: str
) -> None:
    sub = make_sub(api, project, topic, enableExactlyOnceDelivery=True)
    assert sub_view(api, project, sub)["enableExactlyOnceDelivery"] is True
    api.publish(project, topic, "x", "y")
    got = api.pull(project, sub, 2)
    modack(api, project, sub, [got[0]["ackId"]], 0)
    again = api.pull(project, sub, 2)
    assert [m["ackId"].rsplit(":", 1)[1] for m in again] == ["0.2"]
    r = api.ack(project, sub, [got[0]["ackId"], got[1]["ackId"]])
    assert r.status_code == 400
    body = r.json()["error"]
    assert body["status"] == "INVALID_ARGUMENT"
    assert set(body["ackIdErrors"]) == {got[0]["ackId"]}  # the stale one; y was taken
    assert api.ack(project, sub, [again[0]["ackId"]]).status_code == 200
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 2
    r = api.ack(project, sub, [again[0]["ackId"]])  # acknowledged already: said so
    assert r.status_code == 400
    assert set(r.json()["error"]["ackIdErrors"]) == {again[0]["ackId"]}


def test_per_message_fields_are_for_pull_subscriptions(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, enableMessageOrdering=True)
    push = {"pushConfig": {"type": "mattermost", "mattermostUrl": "https://mattermost.example.org/hooks/x"}}
    r = api.post(f"/projects/{project}/subscriptions/{sub}:modifyPushConfig", push)
    assert r.status_code == 400
    assert "pull subscriptions only" in error_of(r)["message"]


# --- metrics ---------------------------------------------------------------------------------------
def test_metrics_show_undelivered_messages_deliveries_by_attempt_and_dead_letters(
    api: Api, project: str, topic: str
) -> None:
    dead = unique("dead")
    api.ok("PUT", f"/projects/{project}/topics/{dead}")
    policy = {"deadLetterTopic": f"projects/{project}/topics/{dead}", "maxDeliveryAttempts": 5}
    sub = make_sub(api, project, topic, deadLetterPolicy=policy)
    api.publish(project, topic, "poison", "a", "b", "c")
    for _ in range(5):
        got = api.pull(project, sub, 1)
        assert text(got[0]) == "poison"
        modack(api, project, sub, [got[0]["ackId"]], 0)
    got = api.pull(project, sub, 1)
    assert [text(m) for m in got] == ["a"]  # and the poison is handed off
    # an acknowledgement is written through: the figures every node reads from the store are current
    assert api.ack(project, sub, [got[0]["ackId"]]).status_code == 200

    def figures() -> dict[tuple[str, str], int | float]:
        found = api.ok("GET", f"/projects/{project}/subscriptions/{sub}:metrics")["metrics"]
        return {(m["metric"], m.get("labels", {}).get("attempt", "")): m["timeseries"][0]["value"] for m in found}

    shown = figures()
    assert shown[("subscription.undelivered_messages", "")] == 2  # b and c
    assert shown[("subscription.oldest_unacked_message_age", "")] >= 0
    attempts = {bucket: shown[("subscription.deliveries", bucket)] for bucket in ("1", "2", "3", "4", "5+")}
    assert attempts == {"1": 2, "2": 1, "3": 1, "4": 1, "5+": 1}
    assert shown[("subscription.dead_lettered_messages", "")] == 1
    plain = make_sub(api, project, topic)
    names = {m["metric"] for m in api.ok("GET", f"/projects/{project}/subscriptions/{plain}:metrics")["metrics"]}
    assert "subscription.deliveries" not in names
    assert "subscription.undelivered_messages" in names
    page = api.scrape()
    labels = {"project": project, "subscription": sub}
    assert sample(page, "ams_subscription_dead_lettered_messages_total", **labels) == 1
    assert sample(page, "ams_subscription_deliveries_total", attempt="5+", **labels) == 1
    assert sample(page, "ams_subscription_undelivered_messages", **labels) == 2


# --- snapshots and seek ----------------------------------------------------------------------------
def test_a_snapshot_taken_before_a_risky_deploy_brings_the_messages_back(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, retainAckedMessages=True)
    assert sub_view(api, project, sub)["retainAckedMessages"] is True
    api.publish(project, topic, "a", "b", "c", "d")
    first = api.pull(project, sub, 1)
    api.ack(project, sub, [first[0]["ackId"]])  # a is done before the snapshot
    snap = unique("snap")
    made = api.ok(
        "PUT", f"/projects/{project}/snapshots/{snap}", {"subscription": f"projects/{project}/subscriptions/{sub}"}
    )
    assert made["name"] == f"projects/{project}/snapshots/{snap}"
    assert made["topic"] == f"projects/{project}/topics/{topic}"
    assert made["subscription"] == f"projects/{project}/subscriptions/{sub}"
    assert api.ok("GET", f"/projects/{project}/snapshots/{snap}") == made
    listed = api.ok("GET", f"/projects/{project}/snapshots")
    assert listed["snapshots"] == [made]
    assert listed["totalSize"] == 1
    # the deploy goes wrong: b, c and d are acknowledged and lost downstream
    rest = api.pull(project, sub, 3)
    api.ack(project, sub, [m["ackId"] for m in rest])
    assert api.pull(project, sub, 3) == []
    assert api.ok("POST", f"/projects/{project}/subscriptions/{sub}:seek", {"snapshot": made["name"]}) == {}
    assert [text(m) for m in api.pull(project, sub, 5)] == ["b", "c", "d"]
    r = api.put(f"/projects/{project}/snapshots/{snap}", {"subscription": f"projects/{project}/subscriptions/{sub}"})
    assert r.status_code == 409
    api.ok("DELETE", f"/projects/{project}/snapshots/{snap}")
    assert api.get(f"/projects/{project}/snapshots/{snap}").status_code == 404
    r = api.post(f"/projects/{project}/subscriptions/{sub}:seek", {"snapshot": made["name"]})
    assert r.status_code == 404


def test_a_snapshot_lives_seven_days_less_the_age_of_its_oldest_message(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic)
    api.publish(project, topic, "old")
    published = api.pull(project, sub)[0]["message"]["publishTime"]
    snap = api.ok(
        "PUT",
        f"/projects/{project}/snapshots/{unique('snap')}",
        {"subscription": f"projects/{project}/subscriptions/{sub}"},
    )
    expire = datetime.fromisoformat(snap["expireTime"].replace("Z", "+00:00"))
    born = datetime.fromisoformat(published[:19] + "+00:00")
    assert timedelta(days=7) - timedelta(seconds=2) <= expire - born <= timedelta(days=7)


def test_seek_to_a_time_replays_acknowledged_messages_and_skips_earlier_ones(
    api: Api, project: str, topic: str
) -> None:
    sub = make_sub(api, project, topic, enableMessageOrdering=True)
    api.publish(project, topic, "before")
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    api.publish(project, topic, "after1", "after2")
    got = api.pull(project, sub, 5)
    api.ack(project, sub, [m["ackId"] for m in got])
    when = middle.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert api.ok("POST", f"/projects/{project}/subscriptions/{sub}:seek", {"time": when}) == {}
    assert [text(m) for m in api.pull(project, sub, 5)] == ["after1", "after2"]
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:seek", {"time": "2000-01-01T00:00:00Z"})
    assert [text(m) for m in api.pull(project, sub, 5)] == ["before", "after1", "after2"]
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:seek", {"time": "2999-01-01T00:00:00Z"})
    assert api.pull(project, sub, 5) == []


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"snapshot": "projects/x/snapshots/y", "time": "2020-01-01T00:00:00Z"},
        {"time": "yesterday"},
        {"snapshot": "snap"},
    ],
)
def test_a_seek_needs_one_good_target(api: Api, project: str, sub: str, body: dict[str, Any]) -> None:
    r = api.post(f"/projects/{project}/subscriptions/{sub}:seek", body)
    assert r.status_code == 400
    error_of(r)


def test_a_snapshot_of_another_topic_is_refused_by_seek(api: Api, project: str, topic: str, sub: str) -> None:
    other_topic = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{other_topic}")
    other = make_sub(api, project, other_topic)
    snap = unique("snap")
    api.ok(
        "PUT", f"/projects/{project}/snapshots/{snap}", {"subscription": f"projects/{project}/subscriptions/{other}"}
    )
    r = api.post(f"/projects/{project}/subscriptions/{sub}:seek", {"snapshot": f"projects/{project}/snapshots/{snap}"})
    assert r.status_code == 400
    assert "another topic" in error_of(r)["message"]
