"""Publish, pull, acknowledge, ack deadlines, long polls, offsets and replay."""

from __future__ import annotations

import base64
import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers import Api, b64, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

PUBLISH_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$")


def make_sub(api: Api, project: str, topic: str, deadline: int) -> str:
    name = unique("sub")
    body = {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": deadline}
    api.ok("PUT", f"/projects/{project}/subscriptions/{name}", body)
    return name


def texts(received: list[dict]) -> list[str]:
    return [base64.b64decode(m["message"]["data"]).decode() for m in received]


def test_publish_then_pull_returns_the_messages(api: Api, project: str, topic: str, sub: str) -> None:
    ids = api.publish(project, topic, "one", "two", attributes={"site": "GRNET"})
    assert ids == ["0", "1"]
    got = api.pull(project, sub, 10)
    assert [m["ackId"] for m in got] == [f"projects/{project}/subscriptions/{sub}:{i}" for i in ids]
    first = got[0]["message"]
    assert list(first) == ["messageId", "attributes", "data", "publishTime"]
    assert first["messageId"] == "0"
    assert first["attributes"] == {"site": "GRNET"}
    assert first["data"] == b64("one")
    assert PUBLISH_TIME.match(first["publishTime"])
    assert texts(got) == ["one", "two"]


def test_message_ids_are_strictly_increasing_per_topic(api: Api, project: str, topic: str) -> None:
    ids: list[int] = []
    for i in range(5):
        ids += [int(x) for x in api.publish(project, topic, *[f"m{i}-{j}" for j in range(3)])]
    assert ids == list(range(15))


def test_client_message_id_and_publish_time_are_overwritten(api: Api, project: str, topic: str, sub: str) -> None:
    body = {"messages": [{"data": b64("x"), "messageId": "999", "publishTime": "1999-01-01T00:00:00Z"}]}
    assert api.ok("POST", f"/projects/{project}/topics/{topic}:publish", body) == {"messageIds": ["0"]}
    message = api.pull(project, sub)[0]["message"]
    assert message["messageId"] == "0"
    assert message["publishTime"].startswith(str(datetime.now(UTC).year))
    assert "attributes" not in message


def test_empty_publish(api: Api, project: str, topic: str) -> None:
    assert api.ok("POST", f"/projects/{project}/topics/{topic}:publish", {"messages": []}) == {"messageIds": []}


@pytest.mark.parametrize(
    "body",
    [
        {"maxMessages": "3", "returnImmediately": "true"},
        {"maxMessages": 3, "returnImmediately": True},
        {"maxMessages": "3", "returnImmediately": "True"},
    ],
)
def test_pull_accepts_strings_numbers_and_booleans(api: Api, project: str, topic: str, sub: str, body: dict) -> None:
    api.publish(project, topic, *"abcde")
    got = api.ok("POST", f"/projects/{project}/subscriptions/{sub}:pull", body)["receivedMessages"]
    assert texts(got) == ["a", "b", "c"]


def test_pull_defaults_to_one_message(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b")
    got = api.ok("POST", f"/projects/{project}/subscriptions/{sub}:pull", {"returnImmediately": "true"})
    assert texts(got["receivedMessages"]) == ["a"]


def test_return_immediately_on_an_empty_subscription(api: Api, project: str, sub: str) -> None:
    started = time.monotonic()
    assert api.pull(project, sub, immediately=True) == []
    assert time.monotonic() - started < 1.5


def test_long_poll_answers_when_a_message_arrives(api: Api, project: str, topic: str, sub: str) -> None:
    result: dict[str, object] = {}

    def pull() -> None:
        started = time.monotonic()
        result["got"] = api.pull(project, sub, 5, immediately=False)
        result["took"] = time.monotonic() - started

    waiter = threading.Thread(target=pull)
    waiter.start()
    time.sleep(0.5)
    api.publish(project, topic, "late")
    waiter.join(10)
    assert texts(result["got"]) == ["late"]  # type: ignore[arg-type]
    assert result["took"] < 1.9  # type: ignore[operator]  # before the 2 s wait of the test server


def test_long_poll_gives_up_with_an_empty_list(api: Api, project: str, sub: str) -> None:
    started = time.monotonic()
    got = api.ok("POST", f"/projects/{project}/subscriptions/{sub}:pull", {"maxMessages": "1"})
    assert got == {"receivedMessages": []}
    assert 1.5 <= time.monotonic() - started < 6


def test_ack_then_nothing_more(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b")
    got = api.pull(project, sub)
    r = api.ack(project, sub, [m["ackId"] for m in got])
    assert (r.status_code, r.json()) == (200, {})
    assert api.pull(project, sub) == []
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 2


def test_ack_of_the_last_id_acks_the_whole_pull(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b", "c")
    got = api.pull(project, sub)
    assert api.ack(project, sub, [got[-1]["ackId"]]).status_code == 200
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 3


def test_a_second_pull_gets_other_messages_while_the_first_are_leased(
    api: Api, project: str, topic: str, sub: str
) -> None:
    api.publish(project, topic, *"abcd")
    first, second = api.pull(project, sub, 2), api.pull(project, sub, 2)
    assert (texts(first), texts(second)) == (["a", "b"], ["c", "d"])
    assert api.pull(project, sub, 2) == []
    # acking the later pull first is safe: the offset waits for the earlier one
    assert api.ack(project, sub, [second[-1]["ackId"]]).status_code == 200
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 0
    assert api.ack(project, sub, [first[-1]["ackId"]]).status_code == 200
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["current"] == 4


def test_late_ack_is_408_and_the_messages_come_again(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, deadline=1)
    api.publish(project, topic, "a", "b")
    got = api.pull(project, sub)
    time.sleep(2.1)
    r = api.ack(project, sub, [got[-1]["ackId"]])
    assert error_of(r) == {"code": 408, "message": "ack timeout", "status": "TIMEOUT"}
    again = api.pull(project, sub)
    assert texts(again) == ["a", "b"]
    assert api.ack(project, sub, [again[-1]["ackId"]]).status_code == 200


def test_unacked_messages_are_redelivered_after_the_deadline(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic, deadline=1)
    api.publish(project, topic, "a")
    assert texts(api.pull(project, sub)) == ["a"]
    assert api.pull(project, sub) == []
    time.sleep(2.1)
    assert texts(api.pull(project, sub)) == ["a"]


def test_no_ack_pending(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a")
    r = api.ack(project, sub, [f"projects/{project}/subscriptions/{sub}:0"])
    assert error_of(r) == {"code": 409, "message": "no ack pending", "status": "CONFLICT"}


def test_wrong_ack(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "a", "b")
    got = api.pull(project, sub, 1)
    assert api.ack(project, sub, [got[0]["ackId"]]).status_code == 200
    api.pull(project, sub, 1)
    for offset in (0, 7):  # already acknowledged, never delivered
        r = api.ack(project, sub, [f"projects/{project}/subscriptions/{sub}:{offset}"])
        assert error_of(r) == {"code": 400, "message": "wrong ack", "status": "INVALID_ARGUMENT"}


@pytest.mark.parametrize(
    "ack_ids",
    [
        [],
        ["1"],
        ["projects/{p}/subscriptions/other:0"],
        ["projects/other/subscriptions/{s}:0"],
        ["projects/{p}/subscriptions/{s}:x"],
        [5],
        None,
    ],
)
def test_invalid_ack_ids(api: Api, project: str, sub: str, ack_ids: list | None) -> None:
    ids = None if ack_ids is None else [a.format(p=project, s=sub) if isinstance(a, str) else a for a in ack_ids]
    r = api.post(f"/projects/{project}/subscriptions/{sub}:acknowledge", {} if ids is None else {"ackIds": ids})
    assert error_of(r) == {"code": 400, "message": "Invalid ack id", "status": "INVALID_ARGUMENT"}


def test_malformed_ack_body(api: Api, project: str, sub: str) -> None:
    r = api.post(f"/projects/{project}/subscriptions/{sub}:acknowledge", raw="{nope")
    assert error_of(r) == {"code": 400, "message": "Invalid ack parameter", "status": "INVALID_ARGUMENT"}


def test_offsets_and_modify_offset_replay(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, *"abcde")
    got = api.pull(project, sub, 5)
    assert api.ack(project, sub, [got[-1]["ackId"]]).status_code == 200
    path = f"/projects/{project}/subscriptions/{sub}"
    assert api.ok("GET", path + ":offsets") == {"max": 5, "min": 0, "current": 5}
    r = api.post(path + ":modifyOffset", {"offset": 2})
    assert (r.status_code, r.content) == (200, b"")
    assert api.ok("GET", path + ":offsets")["current"] == 2
    assert texts(api.pull(project, sub, 10)) == ["c", "d", "e"]


def test_modify_offset_cancels_pending_leases(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, *"abc")
    api.pull(project, sub, 3)
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyOffset", {"offset": 0})
    assert texts(api.pull(project, sub, 3)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"offset": 99}, "Offset out of bounds"),
        ({"offset": -1}, "Offset out of bounds"),
        ({"offset": "x"}, "Invalid Offset Arguments"),
        ({}, "Invalid Offset Arguments"),
    ],
)
def test_modify_offset_errors_change_nothing(
    api: Api, project: str, topic: str, sub: str, body: dict, message: str
) -> None:
    api.publish(project, topic, "a")
    path = f"/projects/{project}/subscriptions/{sub}"
    before = api.ok("GET", path + ":offsets")
    r = api.post(path + ":modifyOffset", body)
    assert (r.status_code, error_of(r)["message"]) == (400, message)
    assert api.ok("GET", path + ":offsets") == before


def test_time_to_offset_and_replay_by_time(api: Api, project: str, topic: str, sub: str) -> None:
    api.publish(project, topic, "before-1", "before-2")
    time.sleep(0.05)
    middle = datetime.now(UTC)
    time.sleep(0.05)
    api.publish(project, topic, "after-1", "after-2")
    path = f"/projects/{project}/subscriptions/{sub}"
    stamp = middle.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    offset = api.ok("GET", path + ":timeToOffset", params={"time": stamp})
    assert offset == {"offset": 2}
    api.ok("POST", path + ":modifyOffset", offset)
    assert texts(api.pull(project, sub, 10)) == ["after-1", "after-2"]
    early = (middle - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S.000Z")  # the library's whole-second form
    assert api.ok("GET", path + ":timeToOffset", params={"time": early}) == {"offset": 0}


def test_time_to_offset_errors(api: Api, project: str, topic: str, sub: str) -> None:
    path = f"/projects/{project}/subscriptions/{sub}"
    r = api.get(path + ":timeToOffset", params={"time": "yesterday"})
    assert error_of(r) == {"code": 400, "message": "Time is not in valid Zulu format.", "status": "INVALID_ARGUMENT"}
    api.publish(project, topic, "a")
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    r = api.get(path + ":timeToOffset", params={"time": future})
    assert (r.status_code, error_of(r)["message"]) == (
        409,
        "Timestamp is out of bounds for the subscription's topic/partition",
    )
