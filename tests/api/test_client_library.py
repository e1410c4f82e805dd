"""The official Python client, argo-ams-library 1.0.0, against the real server over HTTPS.

Every call goes through ``ArgoMessagingService`` unchanged: the library verifies TLS with the test CA
(REQUESTS_CA_BUNDLE, set by the ``tls_files`` fixture) and sends the token in ``x-api-key``. The
assertions are on what the library returns, so they pin both the JSON the server sends and the way
the library reads it (docs/compatibility.md).
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from argo_ams_library import (
    AmsMessage,
    AmsServiceException,
    AmsSubscription,
    AmsTimeoutException,
    AmsTopic,
    AmsUser,
    AmsUserProject,
    ArgoMessagingService,
)
from argo_ams_library.amsuser import AmsUserPage

from tests.helpers import AmsServer, Api, unique

TOKEN_RE = re.compile(r"^[0-9a-f]{64}$")
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
SECONDS_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
PUBLISH_TIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{9}Z$")

#: What a pull subscription's ``pushConfig`` looks like: every key, all at the zero value.
PULL_PUSH_CONFIG = {
    "type": "",
    "pushEndpoint": "",
    "maxMessages": 0,
    "authorizationHeader": {},
    "retryPolicy": {},
    "verificationHash": "",
    "verified": False,
    "mattermostUrl": "",
    "mattermostUsername": "",
    "mattermostChannel": "",
    "base64Decode": False,
}


# ------------------------------------------------------------------------------ helpers ------
def client(server: AmsServer, project: str = "", token: str | None = None) -> ArgoMessagingService:
    """A fresh library client (fresh topic/subscription caches) for ``project``."""
    tok = server.token if token is None else token
    return ArgoMessagingService(endpoint=server.host, token=tok, project=project)


def utc_now() -> datetime:
    """Naive UTC now: the library formats ``timestamp.isoformat()[:-3] + "Z"``, which only works naive."""
    return datetime.now(UTC).replace(tzinfo=None)


def member(api: Api, project: str, *roles: str) -> dict[str, Any]:
    """A new user with ``roles`` in ``project`` (arranged with the raw API)."""
    return api.new_user(projects=[{"project": project, "roles": list(roles)}], email="m@example.org")


def ids_of(pulled: list[tuple[str, AmsMessage]]) -> list[str]:
    return [msg.get_msgid() for _, msg in pulled]


def data_of(pulled: list[tuple[str, AmsMessage]]) -> list[bytes]:
    return [msg.get_data() for _, msg in pulled]


def consecutive(first: str, n: int) -> list[str]:
    return [str(int(first) + i) for i in range(n)]


def publish_texts(ams: ArgoMessagingService, topic: str, *texts: str) -> list[str]:
    """Publish one message per text in a single request; return the ids, checked to be consecutive."""
    result = ams.publish(topic, [AmsMessage(data=t) for t in texts])
    assert set(result) == {"messageIds"}, result
    ids = result["messageIds"]
    assert len(ids) == len(texts)
    assert ids == consecutive(ids[0], len(texts)), ids
    return list(ids)


def assert_service_error(exc: AmsServiceException, code: int, route: str, message: str, status: str) -> None:
    assert exc.code == code, exc.msg
    assert exc.msg == f"While trying the [{route}]: {message}"
    assert exc.status == status


@pytest.fixture
def ams(server: AmsServer, project: str) -> ArgoMessagingService:
    """The library with the service token, working in a project of this test's own."""
    return client(server, project)


@pytest.fixture
def topic(ams: ArgoMessagingService) -> str:
    name = unique("topic")
    ams.create_topic(name)
    return name


@pytest.fixture
def sub(ams: ArgoMessagingService, topic: str) -> str:
    """A pull subscription on ``topic`` with a generous ack deadline."""
    name = unique("sub")
    ams.create_sub(name, topic, ackdeadline=60)
    return name


# ------------------------------------------------------------------------------- topics ------
def test_topic_lifecycle(server: AmsServer, ams: ArgoMessagingService, project: str) -> None:
    first, second = unique("ta"), unique("tb")

    created = ams.create_topic(first)
    assert set(created) == {"name", "created_on"}
    assert created["name"] == f"/projects/{project}/topics/{first}"
    assert SECONDS_RE.match(created["created_on"]), created
    obj = ams.create_topic(second, retobj=True)
    assert isinstance(obj, AmsTopic)
    assert (obj.name, obj.fullname) == (second, f"/projects/{project}/topics/{second}")

    assert ams.get_topic(first) == created
    assert ams.has_topic(first) is True
    assert ams.has_topic("no-such-topic") is False

    listed = ams.list_topics()
    assert [t["name"] for t in listed["topics"]] == [  # newest first
        f"/projects/{project}/topics/{second}",
        f"/projects/{project}/topics/{first}",
    ]
    assert listed["topics"][1] == created
    assert listed["nextPageToken"] == ""
    assert listed["totalSize"] == 2

    fresh = client(server, project)
    assert sorted(t.name for t in fresh.iter_topics()) == sorted([first, second])

    assert ams.delete_topic(first) == {}
    assert ams.has_topic(first) is False
    assert [t["name"] for t in ams.list_topics()["topics"]] == [f"/projects/{project}/topics/{second}"]
    with pytest.raises(AmsServiceException) as err:
        ams.delete_topic(first)
    assert_service_error(err.value, 404, "topic_delete", "Topic doesn't exist", "NOT_FOUND")


def test_create_topic_twice_is_409(ams: ArgoMessagingService, topic: str) -> None:
    with pytest.raises(AmsServiceException) as err:
        ams.create_topic(topic)
    assert_service_error(err.value, 409, "topic_create", "Topic already exists", "ALREADY_EXISTS")


def test_get_missing_topic_is_404(ams: ArgoMessagingService) -> None:
    with pytest.raises(AmsServiceException) as err:
        ams.get_topic("no-such-topic")
    assert_service_error(err.value, 404, "topic_get", "Topic doesn't exist", "NOT_FOUND")


def test_topic_acl(api: Api, ams: ArgoMessagingService, project: str, topic: str) -> None:
    alice = member(api, project, "publisher")["name"]
    bob = member(api, project, "publisher")["name"]

    assert ams.getacl_topic(topic) == {"authorized_users": []}
    assert ams.modifyacl_topic(topic, [alice, bob]) is True
    assert sorted(ams.getacl_topic(topic)["authorized_users"]) == sorted([alice, bob])
    assert sorted(ams.topics[f"/projects/{project}/topics/{topic}"].acls) == sorted([alice, bob])

    assert ams.modifyacl_topic(topic, [bob]) is True  # replaces the whole list
    assert ams.getacl_topic(topic) == {"authorized_users": [bob]}

    with pytest.raises(AmsServiceException) as err:
        ams.modifyacl_topic(topic, [bob, "nobody-at-all"])
    unknown = "User(s): nobody-at-all do not exist"
    assert_service_error(err.value, 404, "topic_modifyacl", unknown, "NOT_FOUND")
    assert ams.getacl_topic(topic) == {"authorized_users": [bob]}  # unchanged

    assert ams.modifyacl_topic(topic, []) is True
    assert ams.getacl_topic(topic) == {"authorized_users": []}


# ------------------------------------------------------------------------------ publish ------
def test_publish_single_and_list_ids_are_consecutive(ams: ArgoMessagingService, topic: str) -> None:
    one = ams.publish(topic, AmsMessage(data="first", attributes={"kind": "single"}))
    assert set(one) == {"messageIds"}
    assert len(one["messageIds"]) == 1
    first = one["messageIds"][0]
    assert re.fullmatch(r"0|[1-9][0-9]*", first), first

    batch = ams.publish(
        topic,
        [
            AmsMessage(data="second", attributes={"n": "2"}),
            AmsMessage(data="third"),
            AmsMessage(attributes={"only": "attributes"}),
        ],
    )
    assert batch == {"messageIds": consecutive(str(int(first) + 1), 3)}

    # plain dicts (already base64) are accepted by the library as well
    again = ams.publish(topic, [{"data": "Zm91cnRo"}])
    assert again == {"messageIds": [str(int(first) + 4)]}


def test_message_ids_never_reused_after_topic_recreate(ams: ArgoMessagingService, topic: str) -> None:
    before = publish_texts(ams, topic, "a", "b")
    ams.delete_topic(topic)
    ams.create_topic(topic)
    after = publish_texts(ams, topic, "c")
    assert int(after[0]) > int(before[-1])


# ------------------------------------------------------------------------ subscriptions ------
def test_subscription_create_get_list_iter_delete(
    server: AmsServer, ams: ArgoMessagingService, project: str, topic: str
) -> None:
    first, second = unique("sa"), unique("sb")
    created = ams.create_sub(first, topic, ackdeadline=30)
    assert set(created) == {"name", "topic", "pushConfig", "ackDeadlineSeconds", "createdOn"}
    assert created["name"] == f"/projects/{project}/subscriptions/{first}"
    assert created["topic"] == f"/projects/{project}/topics/{topic}"
    assert created["ackDeadlineSeconds"] == 30
    assert created["pushConfig"] == PULL_PUSH_CONFIG
    assert SECONDS_RE.match(created["createdOn"]), created

    obj = ams.create_sub(second, topic, retobj=True)  # library default ackdeadline=10
    assert isinstance(obj, AmsSubscription)
    assert (obj.name, obj.fullname) == (second, f"/projects/{project}/subscriptions/{second}")
    assert (obj.ackdeadline, obj.push_endpoint, obj.topic.name) == (10, "", topic)

    assert ams.get_sub(first) == created
    assert ams.has_sub(first) is True
    assert ams.has_sub("no-such-sub") is False
    with pytest.raises(AmsServiceException) as err:
        ams.get_sub("no-such-sub")
    assert_service_error(err.value, 404, "sub_get", "Subscription doesn't exist", "NOT_FOUND")

    listed = ams.list_subs()
    assert [s["name"] for s in listed["subscriptions"]] == [  # newest first
        f"/projects/{project}/subscriptions/{second}",
        f"/projects/{project}/subscriptions/{first}",
    ]
    assert listed["subscriptions"][1] == created
    assert listed["nextPageToken"] == ""
    assert listed["totalSize"] == 2

    fresh = client(server, project)
    subs = {s.name: s for s in fresh.iter_subs(topic=topic)}
    assert set(subs) == {first, second}
    assert (subs[first].ackdeadline, subs[second].ackdeadline) == (30, 10)
    other = unique("other")
    fresh.create_topic(other)
    assert list(fresh.iter_subs(topic=other)) == []

    assert ams.delete_sub(first) == {}
    assert ams.has_sub(first) is False
    remaining = ams.list_subs()["subscriptions"]
    assert [s["name"] for s in remaining] == [f"/projects/{project}/subscriptions/{second}"]


def test_create_sub_on_missing_topic_is_404(ams: ArgoMessagingService) -> None:
    with pytest.raises(AmsServiceException) as err:
        ams.create_sub(unique("sub"), "no-such-topic")
    assert_service_error(err.value, 404, "topic_get", "Topic doesn't exist", "NOT_FOUND")


def test_create_sub_twice_is_409(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    with pytest.raises(AmsServiceException) as err:
        ams.create_sub(sub, topic)
    assert_service_error(err.value, 409, "sub_create", "Subscription already exists", "ALREADY_EXISTS")


def test_subscription_acl(api: Api, ams: ArgoMessagingService, project: str, sub: str) -> None:
    carol = member(api, project, "consumer")["name"]
    dave = member(api, project, "consumer")["name"]

    assert ams.getacl_sub(sub) == {"authorized_users": []}
    assert ams.modifyacl_sub(sub, [carol, dave]) is True
    assert sorted(ams.getacl_sub(sub)["authorized_users"]) == sorted([carol, dave])
    assert ams.modifyacl_sub(sub, [dave]) is True
    assert ams.getacl_sub(sub) == {"authorized_users": [dave]}
    assert ams.subs[f"/projects/{project}/subscriptions/{sub}"].acls == [dave]
    assert ams.modifyacl_sub(sub, []) is True
    assert ams.getacl_sub(sub) == {"authorized_users": []}


# --------------------------------------------------------------------------- pull and ack ----
def test_pull_exact_messages_then_ack(ams: ArgoMessagingService, project: str, topic: str, sub: str) -> None:
    text = "héllo wörld ✓"
    before = utc_now() - timedelta(seconds=1)
    ids = ams.publish(
        topic,
        [
            AmsMessage(data=text, attributes={"colour": "blue", "size": "L"}),
            AmsMessage(data=b"\x00\x01\xfe\xff"),
        ],
    )["messageIds"]
    after = utc_now() + timedelta(seconds=1)

    pulled = ams.pull_sub(sub, num=10, return_immediately=True)
    assert len(pulled) == 2
    (ack1, msg1), (ack2, msg2) = pulled
    assert ack1 == f"projects/{project}/subscriptions/{sub}:{ids[0]}"
    assert ack2 == f"projects/{project}/subscriptions/{sub}:{ids[1]}"
    assert isinstance(msg1, AmsMessage)
    assert msg1.get_data() == text.encode()
    assert msg1.get_attr() == {"colour": "blue", "size": "L"}
    assert msg1.get_msgid() == ids[0]
    assert msg2.get_data() == b"\x00\x01\xfe\xff"
    assert not msg2.get_attr()  # no attributes published: absent (or empty) in the pull
    assert msg2.get_msgid() == ids[1]
    for msg in (msg1, msg2):
        published = msg.get_publishtime()
        assert PUBLISH_TIME_RE.match(published), published
        assert before <= datetime.strptime(published[:19], "%Y-%m-%dT%H:%M:%S") <= after
    assert msg1.get_publishtime() <= msg2.get_publishtime()

    assert ams.ack_sub(sub, [ack1, ack2]) is True
    assert ams.pull_sub(sub, num=10, return_immediately=True) == []


def test_pull_one_by_default_and_ack_covers_earlier_of_same_pull(
    ams: ArgoMessagingService, topic: str, sub: str
) -> None:
    ids = publish_texts(ams, topic, "m0", "m1", "m2")

    one = ams.pull_sub(sub, return_immediately=True)  # library default num=1
    assert ids_of(one) == ids[:1]
    assert ams.ack_sub(sub, [one[0][0]]) is True

    two = ams.pull_sub(sub, num=5, return_immediately=True)
    assert ids_of(two) == ids[1:]
    assert data_of(two) == [b"m1", b"m2"]
    assert ams.ack_sub(sub, [two[-1][0]]) is True  # the last id acknowledges the whole pull
    assert ams.pull_sub(sub, num=5, return_immediately=True) == []


def test_attribute_only_message_round_trip(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    ids = ams.publish(topic, AmsMessage(attributes={"k": "v", "empty": ""}))["messageIds"]
    [(ack_id, msg)] = ams.pull_sub(sub, num=5, return_immediately=True)
    assert msg.get_msgid() == ids[0]
    assert msg.get_attr() == {"k": "v", "empty": ""}
    assert msg.dict().get("data", "") == ""
    assert ams.ack_sub(sub, [ack_id]) is True


def test_second_pull_leases_the_next_messages(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    ids = publish_texts(ams, topic, "a", "b", "c", "d")

    first = ams.pull_sub(sub, num=2, return_immediately=True)
    second = ams.pull_sub(sub, num=2, return_immediately=True)
    assert ids_of(first) == ids[:2]
    assert ids_of(second) == ids[2:]
    assert ams.pull_sub(sub, num=2, return_immediately=True) == []  # all leased

    # out of order across pulls is safe
    assert ams.ack_sub(sub, [second[-1][0]]) is True
    assert ams.ack_sub(sub, [first[-1][0]]) is True
    assert ams.pull_sub(sub, num=10, return_immediately=True) == []
    assert ams.getoffsets_sub(sub, "current") == int(ids[-1]) + 1


def test_pullack_sub(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    ids = publish_texts(ams, topic, "x", "y", "z")
    messages = ams.pullack_sub(sub, num=3, return_immediately=True)
    assert [m.get_msgid() for m in messages] == ids
    assert [m.get_data() for m in messages] == [b"x", b"y", b"z"]
    assert ams.pull_sub(sub, num=3, return_immediately=True) == []
    assert ams.pullack_sub(sub, num=3, return_immediately=True) == []


def test_late_ack_is_408_and_redelivered(ams: ArgoMessagingService, project: str, topic: str) -> None:
    name = unique("short")
    assert ams.create_sub(name, topic, ackdeadline=1)["ackDeadlineSeconds"] == 1
    ids = publish_texts(ams, topic, "late-1", "late-2")

    pulled = ams.pull_sub(name, num=10, return_immediately=True)
    assert ids_of(pulled) == ids
    time.sleep(2.5)
    with pytest.raises(AmsTimeoutException) as err:
        ams.ack_sub(name, [pulled[-1][0]])
    assert_service_error(err.value, 408, "sub_ack", "ack timeout", "TIMEOUT")

    again = ams.pull_sub(name, num=10, return_immediately=True)
    assert ids_of(again) == ids
    assert data_of(again) == [b"late-1", b"late-2"]
    assert [a for a, _ in again] == [f"projects/{project}/subscriptions/{name}:{i}" for i in ids]
    assert ams.ack_sub(name, [again[-1][0]]) is True
    assert ams.pull_sub(name, num=10, return_immediately=True) == []


def test_ack_errors(ams: ArgoMessagingService, project: str, topic: str, sub: str) -> None:
    ids = publish_texts(ams, topic, "one", "two")
    ack_of = f"projects/{project}/subscriptions/{sub}:{{}}".format

    with pytest.raises(AmsServiceException) as err:  # nothing pulled: nothing pending
        ams.ack_sub(sub, [ack_of(ids[0])])
    assert_service_error(err.value, 409, "sub_ack", "no ack pending", "CONFLICT")

    [(first, _)] = ams.pull_sub(sub, num=1, return_immediately=True)
    assert ams.ack_sub(sub, [first]) is True
    [(second, _)] = ams.pull_sub(sub, num=1, return_immediately=True)

    with pytest.raises(AmsServiceException) as err:  # already acknowledged
        ams.ack_sub(sub, [first])
    assert_service_error(err.value, 400, "sub_ack", "wrong ack", "INVALID_ARGUMENT")
    with pytest.raises(AmsServiceException) as err:  # never delivered
        ams.ack_sub(sub, [ack_of(int(ids[1]) + 100)])
    assert_service_error(err.value, 400, "sub_ack", "wrong ack", "INVALID_ARGUMENT")
    with pytest.raises(AmsServiceException) as err:
        ams.ack_sub(sub, ["not-an-ack-id"])
    assert_service_error(err.value, 400, "sub_ack", "Invalid ack id", "INVALID_ARGUMENT")

    assert ams.ack_sub(sub, [second]) is True  # the pending lease survived the bad acks


def test_long_poll_on_empty_subscription_waits(ams: ArgoMessagingService, sub: str) -> None:
    started = time.monotonic()
    assert ams.pull_sub(sub, num=5, return_immediately=False) == []
    waited = time.monotonic() - started
    assert 1.5 <= waited < 10, waited  # AMS_PULL_WAIT_SECONDS=2 in tests

    started = time.monotonic()
    assert ams.pull_sub(sub, num=5, return_immediately=True) == []
    assert time.monotonic() - started < 1.5


def test_long_poll_pull_returns_when_a_message_arrives(
    server: AmsServer, ams: ArgoMessagingService, project: str, topic: str, sub: str
) -> None:
    consumer = client(server, project)  # its own client: the library keeps pull options per instance
    with ThreadPoolExecutor(max_workers=1) as pool:
        started = time.monotonic()
        waiting = pool.submit(consumer.pull_sub, sub, 5, False)
        time.sleep(0.4)
        assert not waiting.done()
        t0 = time.monotonic()
        # other requests are not blocked by the waiting pull
        assert ams.get_topic(topic)["name"] == f"/projects/{project}/topics/{topic}"
        assert time.monotonic() - t0 < 1.0
        ids = publish_texts(ams, topic, "wake-up")
        pulled = waiting.result(timeout=10)
        elapsed = time.monotonic() - started
    assert ids_of(pulled) == ids
    assert data_of(pulled) == [b"wake-up"]
    assert elapsed < 1.8, elapsed  # answered on arrival, not at the end of the 2 s wait
    assert consumer.ack_sub(sub, [pulled[0][0]]) is True


# ------------------------------------------------------------------------------ offsets ------
def test_offsets_and_replay_by_offset(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    ids = publish_texts(ams, topic, "o0", "o1", "o2", "o3", "o4")
    first, end = int(ids[0]), int(ids[-1]) + 1

    assert ams.getoffsets_sub(sub) == {"max": end, "min": first, "current": first}
    assert ams.getoffsets_sub(sub, "max") == end
    assert ams.getoffsets_sub(sub, "min") == first
    assert ams.getoffsets_sub(sub, "current") == first
    with pytest.raises(AmsServiceException) as err:  # checked by the library itself
        ams.getoffsets_sub(sub, "newest")
    assert err.value.msg == "While trying the [sub_offsets]: 'newest' is not valid offset position"

    assert len(ams.pullack_sub(sub, num=10, return_immediately=True)) == 5
    assert ams.getoffsets_sub(sub) == {"max": end, "min": first, "current": end}

    assert ams.modifyoffset_sub(sub, ids[2]) == {}  # the library converts "N" to int
    assert ams.getoffsets_sub(sub, "current") == first + 2
    replay = ams.pull_sub(sub, num=10, return_immediately=True)
    assert ids_of(replay) == ids[2:]
    assert data_of(replay) == [b"o2", b"o3", b"o4"]
    assert ams.ack_sub(sub, [replay[-1][0]]) is True
    assert ams.getoffsets_sub(sub, "current") == end

    with pytest.raises(AmsServiceException) as err:
        ams.modifyoffset_sub(sub, end + 5)
    assert_service_error(err.value, 400, "sub_mod_offset", "Offset out of bounds", "INVALID_ARGUMENT")
    assert ams.getoffsets_sub(sub, "current") == end  # nothing changed

    assert ams.modifyoffset_sub(sub, first) == {}  # back to the very beginning
    assert ids_of(ams.pull_sub(sub, num=10, return_immediately=True)) == ids


def test_modify_offset_cancels_pending_lease(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    ids = publish_texts(ams, topic, "p0", "p1", "p2")
    pulled = ams.pull_sub(sub, num=3, return_immediately=True)
    assert ids_of(pulled) == ids
    assert ams.modifyoffset_sub(sub, int(ids[1])) == {}
    again = ams.pull_sub(sub, num=3, return_immediately=True)
    assert ids_of(again) == ids[1:]
    assert ams.ack_sub(sub, [again[-1][0]]) is True


def test_time_to_offset_and_replay_by_timestamp(ams: ArgoMessagingService, topic: str, sub: str) -> None:
    sent_urls: list[str] = []

    def record(response: Any, *args: Any, **kwargs: Any) -> None:
        sent_urls.append(response.url)

    early = publish_texts(ams, topic, "early-1", "early-2")
    time.sleep(0.05)
    with_micro = utc_now()
    if with_micro.microsecond == 0:  # vanishingly rare; keep this case the "with microseconds" one
        with_micro = with_micro.replace(microsecond=1000)
    time.sleep(0.05)
    middle = publish_texts(ams, topic, "middle-1", "middle-2")

    # a whole second strictly after "middle" and strictly before "late"
    whole = (utc_now() + timedelta(seconds=1)).replace(microsecond=0)
    time.sleep(max(0.0, (whole - utc_now()).total_seconds()) + 0.05)
    late = publish_texts(ams, topic, "late-1", "late-2")

    assert ams.time_to_offset_sub(sub, with_micro, hooks={"response": record}) == int(middle[0])
    assert sent_urls[-1].endswith("time=" + with_micro.isoformat()[:-3] + "Z"), sent_urls

    assert whole.microsecond == 0
    assert ams.time_to_offset_sub(sub, whole, hooks={"response": record}) == int(late[0])
    # the library sends "YYYY-MM-DD HH:MM:SS.000Z" with a space in this case
    assert sent_urls[-1].endswith("time=" + whole.strftime("%Y-%m-%d%%20%H:%M:%S.000Z")), sent_urls

    assert ams.time_to_offset_sub(sub, utc_now() - timedelta(days=1)) == int(early[0])

    # replay by timestamp: exactly the messages published after that time
    assert len(ams.pullack_sub(sub, num=10, return_immediately=True)) == 6
    assert ams.modifyoffset_sub(sub, ams.time_to_offset_sub(sub, with_micro)) == {}
    replay = ams.pull_sub(sub, num=10, return_immediately=True)
    assert ids_of(replay) == middle + late
    assert data_of(replay) == [b"middle-1", b"middle-2", b"late-1", b"late-2"]
    assert ams.ack_sub(sub, [replay[-1][0]]) is True

    assert ams.modifyoffset_sub(sub, ams.time_to_offset_sub(sub, whole)) == {}
    replay = ams.pull_sub(sub, num=10, return_immediately=True)
    assert ids_of(replay) == late
    assert data_of(replay) == [b"late-1", b"late-2"]
    assert ams.ack_sub(sub, [replay[-1][0]]) is True

    with pytest.raises(AmsServiceException) as err:  # after the last message
        ams.time_to_offset_sub(sub, utc_now() + timedelta(hours=1))
    assert_service_error(
        err.value,
        409,
        "sub_timeToOffset",
        "Timestamp is out of bounds for the subscription's topic/partition",
        "CONFLICT",
    )


# -------------------------------------------------------------------------------- users ------
def test_user_create_and_lookups(server: AmsServer, ams: ArgoMessagingService, project: str) -> None:
    name = unique("user")
    created = ams.create_user(
        AmsUser(
            name=name,
            email="ada@example.org",
            firstname="Ada",
            lastname="Lovelace",
            organization="Analytical",
            description="first programmer",
            projects=[AmsUserProject(project=project, roles=["consumer", "publisher"])],
        )
    )
    assert isinstance(created, AmsUser)
    assert created.name == name
    assert UUID_RE.match(created.uuid), created.uuid
    assert TOKEN_RE.match(created.token), created.token
    assert (created.email, created.firstname, created.lastname) == ("ada@example.org", "Ada", "Lovelace")
    assert (created.organization, created.description) == ("Analytical", "first programmer")
    assert created.service_roles == []
    assert created.created_by == ""  # created with the service token: no creator
    assert SECONDS_RE.match(created.created_on)
    assert SECONDS_RE.match(created.modified_on)
    assert len(created.projects) == 1
    assert created.projects[0].project == project
    assert sorted(created.projects[0].roles) == ["consumer", "publisher"]
    assert (created.projects[0].topics, created.projects[0].subscriptions) == ([], [])

    def same(user: AmsUser) -> None:
        assert (user.name, user.uuid, user.token, user.email) == (
            name,
            created.uuid,
            created.token,
            created.email,
        )
        assert [(p.project, sorted(p.roles)) for p in user.projects] == [(project, ["consumer", "publisher"])]

    same(ams.get_user(name))
    same(ams.get_user_by_token(created.token))
    same(ams.get_user_by_uuid(created.uuid))
    same(client(server, token=created.token).get_user_profile())

    with pytest.raises(AmsServiceException) as err:
        ams.create_user(AmsUser(name=name))
    assert_service_error(err.value, 409, "user_create", "User already exists", "ALREADY_EXISTS")
    chef = AmsUser(name=unique("user"), projects=[AmsUserProject(project=project, roles=["chef"])])
    with pytest.raises(AmsServiceException) as err:
        ams.create_user(chef)
    assert_service_error(err.value, 400, "user_create", "invalid role: chef", "INVALID_ARGUMENT")


def test_user_lookups_of_missing_users_are_404(ams: ArgoMessagingService) -> None:
    missing = unique("ghost")
    with pytest.raises(AmsServiceException) as err:
        ams.get_user(missing)
    assert_service_error(err.value, 404, "user_get", "User doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        ams.get_user_by_token("0" * 64)
    assert_service_error(err.value, 404, "user_get_by_token", "User doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        ams.get_user_by_uuid("00000000-0000-4000-8000-000000000000")
    assert_service_error(err.value, 404, "user_get_by_uuid", "User doesn't exist", "NOT_FOUND")
    # compatibility.md: update, refresh and delete of an unknown user answer 404 (not the first user)
    with pytest.raises(AmsServiceException) as err:
        ams.update_user(missing, first_name="X", service_roles=[], projects=[])
    assert_service_error(err.value, 404, "user_update", "User doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        ams.refresh_user_token(missing)
    assert_service_error(err.value, 404, "user_refresh_token", "User doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        ams.delete_user(missing)
    assert_service_error(err.value, 404, "user_delete", "User doesn't exist", "NOT_FOUND")


def test_update_user(api: Api, ams: ArgoMessagingService, project: str) -> None:
    name = unique("user")
    projects = [AmsUserProject(project, ["consumer"])]
    ams.create_user(AmsUser(name=name, email="old@example.org", projects=projects))
    other = api.new_project()

    # update_user needs both service_roles and projects (len(None) raises TypeError)
    updated = ams.update_user(
        name,
        first_name="Grace",
        last_name="Hopper",
        organization="Navy",
        description="compilers",
        email="new@example.org",
        service_roles=["metrics_viewer"],
        projects=[AmsUserProject(project, ["project_admin"]), AmsUserProject(other, ["publisher"])],
    )
    assert isinstance(updated, AmsUser)
    assert (updated.name, updated.firstname, updated.lastname) == (name, "Grace", "Hopper")
    assert (updated.organization, updated.description, updated.email) == (
        "Navy",
        "compilers",
        "new@example.org",
    )
    assert updated.service_roles == ["metrics_viewer"]
    assert sorted((p.project, p.roles) for p in updated.projects) == sorted(
        [(project, ["project_admin"]), (other, ["publisher"])]
    )
    fetched = ams.get_user(name)
    assert (fetched.firstname, fetched.email, fetched.service_roles) == (
        "Grace",
        "new@example.org",
        ["metrics_viewer"],
    )
    assert sorted(p.project for p in fetched.projects) == sorted([project, other])

    # empty lists are not sent by the library: roles and projects stay as they are
    kept = ams.update_user(name, description="still", service_roles=[], projects=[])
    assert (kept.description, kept.service_roles) == ("still", ["metrics_viewer"])
    assert sorted(p.project for p in kept.projects) == sorted([project, other])

    renamed = unique("renamed")
    assert ams.update_user(name, username=renamed, service_roles=[], projects=[]).name == renamed
    assert ams.get_user(renamed).uuid == updated.uuid
    with pytest.raises(AmsServiceException) as err:
        ams.get_user(name)
    assert err.value.code == 404


def test_refresh_user_token(server: AmsServer, ams: ArgoMessagingService, api: Api, project: str) -> None:
    user = member(api, project, "consumer")
    old = user["token"]
    assert client(server, token=old).get_user_profile().name == user["name"]

    refreshed = ams.refresh_user_token(user["name"])
    assert isinstance(refreshed, AmsUser)
    assert refreshed.name == user["name"]
    assert refreshed.uuid == user["uuid"]
    assert TOKEN_RE.match(refreshed.token)
    assert refreshed.token != old
    assert ams.get_user(user["name"]).token == refreshed.token

    assert client(server, token=refreshed.token).get_user_profile().name == user["name"]
    with pytest.raises(AmsServiceException) as err:
        client(server, token=old).get_user_profile()
    assert_service_error(err.value, 401, "user_get_profile", "Unauthorized", "UNAUTHORIZED")
    with pytest.raises(AmsServiceException) as err:
        client(server, project, token=old).list_topics()
    assert err.value.code == 401


def test_list_users_pages(ams: ArgoMessagingService, project: str) -> None:
    names = [unique("lu") for _ in range(3)]
    for name in names:
        ams.create_user(
            AmsUser(name=name, email=f"{name}@example.org", projects=[AmsUserProject(project, ["consumer"])])
        )

    everyone = ams.list_users()
    assert isinstance(everyone, AmsUserPage)
    assert everyone.next_page_token == ""
    assert everyone.total_size == len(everyone.users)
    # newest first; details=True (sent as "True") includes the projects
    assert [u.name for u in everyone.users[:3]] == names[::-1]
    assert [(p.project, p.roles) for p in everyone.users[0].projects] == [(project, ["consumer"])]
    assert TOKEN_RE.match(everyone.users[0].token)

    seen: list[str] = []
    page = ams.list_users(page_size=2)
    assert [u.name for u in page.users] == names[::-1][:2]
    pages = 0
    while True:
        pages += 1
        assert len(page.users) <= 2
        assert page.total_size == everyone.total_size
        seen += [u.name for u in page.users]
        if not page.next_page_token:
            break
        assert pages < 1000
        page = ams.list_users(page_size=2, next_page_token=page.next_page_token)
    assert seen == [u.name for u in everyone.users]
    assert pages == (everyone.total_size + 1) // 2


def test_delete_user(server: AmsServer, ams: ArgoMessagingService, api: Api, topic: str) -> None:
    user = member(api, ams.project, "publisher")
    ams.modifyacl_topic(topic, [user["name"]])

    assert ams.delete_user(user["name"]) is None
    with pytest.raises(AmsServiceException) as err:
        ams.get_user(user["name"])
    assert_service_error(err.value, 404, "user_get", "User doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        client(server, token=user["token"]).get_user_profile()
    assert err.value.code == 401
    assert ams.getacl_topic(topic) == {"authorized_users": []}  # removed from every ACL


# ----------------------------------------------------------------------------- projects ------
def test_project_create_get_update_delete(ams: ArgoMessagingService) -> None:
    name = unique("proj")
    created = ams.create_project(name, "a project")
    assert set(created) == {"name", "description", "created_on", "modified_on"}
    assert (created["name"], created["description"]) == (name, "a project")
    assert SECONDS_RE.match(created["created_on"])
    assert SECONDS_RE.match(created["modified_on"])
    assert ams.get_project(name) == created

    with pytest.raises(AmsServiceException) as err:
        ams.create_project(name, "again")
    assert_service_error(err.value, 409, "project_create", "Project already exists", "ALREADY_EXISTS")

    updated = ams.update_project(name, description="changed")
    assert (updated["name"], updated["description"], updated["created_on"]) == (
        name,
        "changed",
        created["created_on"],
    )
    assert ams.get_project(name)["description"] == "changed"

    new_name = unique("proj")
    renamed = ams.update_project(name, updated_name=new_name)
    assert (renamed["name"], renamed["description"]) == (new_name, "changed")
    assert ams.get_project(new_name)["name"] == new_name
    with pytest.raises(AmsServiceException) as err:
        ams.get_project(name)
    assert_service_error(err.value, 404, "project_get", "project doesn't exist", "NOT_FOUND")

    assert ams.delete_project(new_name) == {}
    with pytest.raises(AmsServiceException) as err:
        ams.get_project(new_name)
    assert_service_error(err.value, 404, "project_get", "project doesn't exist", "NOT_FOUND")
    with pytest.raises(AmsServiceException) as err:
        ams.delete_project(new_name)
    assert err.value.code == 404


def test_delete_project_cascades(server: AmsServer, ams: ArgoMessagingService) -> None:
    name = unique("proj")
    ams.create_project(name, "short-lived")
    inside = client(server, name)
    inside.create_topic("t")
    inside.create_sub("s", "t")
    user = ams.create_user(AmsUser(name=unique("user"), projects=[AmsUserProject(name, ["consumer"])]))

    ams.delete_project(name)
    assert ams.get_user(user.name).projects == []
    ams.create_project(name, "reborn")
    assert client(server, name).list_topics()["topics"] == []
    assert client(server, name).list_subs()["subscriptions"] == []


def test_project_members(ams: ArgoMessagingService, project: str) -> None:
    name = unique("member")
    ams.create_user(AmsUser(name=name, email="member@example.org"))

    added = ams.add_project_member(name, project, roles=["consumer"])
    assert isinstance(added, AmsUser)
    assert added.name == name
    assert [(p.project, p.roles) for p in added.projects] == [(project, ["consumer"])]
    with pytest.raises(AmsServiceException) as err:
        ams.add_project_member(name, project, roles=["publisher"])
    already = "User is already a member of the project"
    assert_service_error(err.value, 409, "project_add_member", already, "CONFLICT")

    got = ams.get_project_member(name, project)
    assert (got.name, got.uuid) == (name, added.uuid)
    assert [(p.project, p.roles) for p in got.projects] == [(project, ["consumer"])]

    # project defaults to the client's project
    born = unique("born")
    created = ams.create_project_member(born, roles=["publisher"], email="born@example.org")
    assert created.name == born
    assert created.email == "born@example.org"
    assert TOKEN_RE.match(created.token)
    assert [(p.project, p.roles) for p in created.projects] == [(project, ["publisher"])]
    assert ams.get_project_member(born).uuid == created.uuid
    with pytest.raises(AmsServiceException) as err:
        ams.create_project_member(born, roles=["publisher"])
    assert_service_error(err.value, 409, "project_create_member", "User already exists", "ALREADY_EXISTS")

    assert ams.remove_project_member(name, project) == {}
    with pytest.raises(AmsServiceException) as err:
        ams.get_project_member(name, project)
    assert_service_error(err.value, 404, "project_get_member", "User doesn't exist", "NOT_FOUND")
    assert ams.get_user(name).projects == []

    with pytest.raises(AmsServiceException) as err:
        ams.add_project_member(unique("ghost"), project, roles=["consumer"])
    assert_service_error(err.value, 404, "project_add_member", "User doesn't exist", "NOT_FOUND")


# -------------------------------------------------------------------------------- roles ------
def test_publisher_can_publish_but_not_create_subscriptions(
    server: AmsServer, api: Api, ams: ArgoMessagingService, project: str, topic: str, sub: str
) -> None:
    user = member(api, project, "publisher")
    pub = client(server, project, token=user["token"])

    with pytest.raises(AmsServiceException) as err:  # not yet in the topic's ACL
        pub.publish(topic, AmsMessage(data="denied"))
    assert_service_error(err.value, 403, "topic_publish", "Access to this resource is forbidden", "FORBIDDEN")

    ams.modifyacl_topic(topic, [user["name"]])
    assert pub.get_topic(topic)["name"] == f"/projects/{project}/topics/{topic}"
    ids = pub.publish(topic, [AmsMessage(data="from publisher", attributes={"by": "pub"})])["messageIds"]
    assert [t["name"] for t in pub.list_topics()["topics"]] == [f"/projects/{project}/topics/{topic}"]

    with pytest.raises(AmsServiceException) as err:
        pub.create_sub(unique("sub"), topic)
    assert_service_error(err.value, 403, "sub_create", "Access to this resource is forbidden", "FORBIDDEN")
    with pytest.raises(AmsServiceException) as err:
        pub.pull_sub(sub, return_immediately=True)
    assert err.value.code == 403

    pulled = ams.pull_sub(sub, num=5, return_immediately=True)
    assert ids_of(pulled) == ids
    assert pulled[0][1].get_attr() == {"by": "pub"}


def test_consumer_can_pull_and_ack(
    server: AmsServer, api: Api, ams: ArgoMessagingService, project: str, topic: str, sub: str
) -> None:
    user = member(api, project, "consumer")
    con = client(server, project, token=user["token"])
    ids = publish_texts(ams, topic, "c1", "c2")

    with pytest.raises(AmsServiceException) as err:  # not yet in the subscription's ACL
        con.pull_sub(sub, num=5, return_immediately=True)
    assert_service_error(err.value, 403, "sub_pull", "Access to this resource is forbidden", "FORBIDDEN")

    ams.modifyacl_sub(sub, [user["name"]])
    assert con.get_sub(sub)["name"] == f"/projects/{project}/subscriptions/{sub}"
    pulled = con.pull_sub(sub, num=5, return_immediately=True)
    assert ids_of(pulled) == ids
    assert data_of(pulled) == [b"c1", b"c2"]
    assert con.ack_sub(sub, [pulled[-1][0]]) is True
    assert con.getoffsets_sub(sub, "current") == int(ids[-1]) + 1
    assert con.pull_sub(sub, num=5, return_immediately=True) == []

    ids = publish_texts(ams, topic, "c3")
    assert [m.get_data() for m in con.pullack_sub(sub, num=5, return_immediately=True)] == [b"c3"]

    with pytest.raises(AmsServiceException) as err:
        con.publish(topic, AmsMessage(data="consumers do not publish"))
    assert_service_error(err.value, 403, "topic_publish", "Access to this resource is forbidden", "FORBIDDEN")
    with pytest.raises(AmsServiceException) as err:
        con.create_topic(unique("topic"))
    assert err.value.code == 403


def test_user_without_role_in_project_is_401(server: AmsServer, api: Api, project: str, topic: str) -> None:
    outsider = api.new_user()
    with pytest.raises(AmsServiceException) as err:
        client(server, project, token=outsider["token"]).get_topic(topic)
    assert_service_error(err.value, 401, "topic_get", "Unauthorized", "UNAUTHORIZED")


# ------------------------------------------------------------------------ status, version ----
def test_status(ams: ArgoMessagingService) -> None:
    status = ams.status()
    # the server's own in-process push worker serves (it registers within a moment of start)
    assert status["status"] == "ok", status
    assert [s["status"] for s in status["push_servers"]] == ["SERVING"], status


def test_version(server: AmsServer, ams: ArgoMessagingService, api: Api) -> None:
    required = {"build_time", "golang", "compiler", "os", "architecture"}
    optional = {"distro", "hostname"}

    admin_view = ams.version()
    assert required | {"release"} <= set(admin_view) <= required | {"release"} | optional, admin_view
    assert all(isinstance(v, str) for v in admin_view.values())
    assert admin_view["release"]

    plain = client(server, token=member(api, api.new_project(), "consumer")["token"]).version()
    assert required <= set(plain) <= required | optional, plain
    assert {k: v for k, v in plain.items()} == {k: v for k, v in admin_view.items() if k != "release"}


# ------------------------------------------------------------------ metrics (issue 3) --------
def test_library_metrics_calls(
    server: AmsServer, api: Api, project: str, ams: ArgoMessagingService, topic: str
) -> None:
    publish_texts(ams, topic, "a", "b", "c")
    today = utc_now()
    operational = ams.metrics()
    assert {m["metric"] for m in operational["metrics"]} >= {"ams_node.cpu_usage", "ams_node.memory_usage"}
    # a three-day window: the messages are in it even if the run crosses midnight
    report = ams.va_metrics(
        projects=[project], start_date=today - timedelta(days=1), end_date=today + timedelta(days=1)
    )
    assert report["projects_metrics"]["projects"] == [
        {
            "project": project,
            "message_count": 3,
            "average_daily_messages": 1.0,
            "topics_count": 1,
            "subscriptions_count": 0,
            "users_count": 0,
        }
    ]
    with pytest.raises(AmsServiceException) as err:
        ams.va_metrics(projects=["no-such-project-x"])
    assert err.value.code == 404
    admin = member(api, project, "project_admin")
    usage = client(server, project, admin["token"]).usage_report(start_date=today - timedelta(days=1), end_date=today)
    (row,) = usage["va_metrics"]["projects_metrics"]["projects"]
    assert (row["project"], row["message_count"], row["average_daily_messages"], row["users_count"]) == (
        project,
        3,
        1.5,
        1,
    )
    assert usage["operational_metrics"]["metrics"]
