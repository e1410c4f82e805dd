"""Topics and subscriptions: create, show, list, delete, ack deadline, push config storage."""

from __future__ import annotations

import re

import pytest

from tests.helpers import Api, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

ZULU = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")


def make_sub(api: Api, project: str, topic: str, **extra: object) -> dict[str, object]:
    name = unique("sub")
    return dict(
        api.ok(
            "PUT", f"/projects/{project}/subscriptions/{name}", {"topic": f"projects/{project}/topics/{topic}", **extra}
        )
    )


def short(sub: dict[str, object]) -> str:
    return str(sub["name"]).rsplit("/", 1)[1]


def test_create_topic_returns_the_topic(api: Api, project: str) -> None:
    body = api.ok("PUT", f"/projects/{project}/topics/t1")
    assert list(body) == ["name", "created_on"]
    assert body["name"] == f"/projects/{project}/topics/t1"
    assert ZULU.match(body["created_on"])
    assert api.ok("GET", f"/projects/{project}/topics/t1") == body


def test_create_topic_twice_conflicts(api: Api, project: str, topic: str) -> None:
    r = api.put(f"/projects/{project}/topics/{topic}")
    assert r.status_code == 409
    assert error_of(r) == {"code": 409, "message": "Topic already exists", "status": "ALREADY_EXISTS"}


def test_topic_with_unknown_schema(api: Api, project: str) -> None:
    r = api.put(f"/projects/{project}/topics/x", {"schema": f"projects/{project}/schemas/nope"})
    assert (r.status_code, error_of(r)["message"]) == (404, "Schema doesn't exist")
    r = api.put(f"/projects/{project}/topics/x", {"schema": "nope"})
    assert (r.status_code, error_of(r)["message"]) == (400, "wrong schema name declaration")
    assert api.get(f"/projects/{project}/topics/x").status_code == 404


def test_list_topics_newest_first_with_pages(api: Api, project: str) -> None:
    names = [f"t{i}" for i in range(5)]
    for name in names:
        api.ok("PUT", f"/projects/{project}/topics/{name}")
    everything = api.ok("GET", f"/projects/{project}/topics")
    assert [t["name"].rsplit("/", 1)[1] for t in everything["topics"]] == names[::-1]
    assert (everything["nextPageToken"], everything["totalSize"]) == ("", 5)
    seen: list[str] = []
    token = ""
    while True:
        page = api.ok("GET", f"/projects/{project}/topics", params={"pageSize": 2, "pageToken": token})
        assert page["totalSize"] == 5
        assert len(page["topics"]) <= 2
        seen += [t["name"].rsplit("/", 1)[1] for t in page["topics"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert seen == names[::-1]


@pytest.mark.parametrize(
    ("params", "message"), [({"pageSize": "x"}, "Invalid page size"), ({"pageToken": "@@"}, "Invalid page token")]
)
def test_list_topics_bad_paging(api: Api, project: str, params: dict[str, str], message: str) -> None:
    r = api.get(f"/projects/{project}/topics", params=params)
    assert (r.status_code, error_of(r)["message"]) == (400, message)


def test_delete_topic(api: Api, project: str, topic: str) -> None:
    r = api.delete(f"/projects/{project}/topics/{topic}")
    assert (r.status_code, r.content) == (200, b"")
    r = api.get(f"/projects/{project}/topics/{topic}")
    assert error_of(r) == {"code": 404, "message": "Topic doesn't exist", "status": "NOT_FOUND"}
    assert api.delete(f"/projects/{project}/topics/{topic}").status_code == 404


def test_subscription_shape(api: Api, project: str, topic: str) -> None:
    sub = make_sub(api, project, topic)
    assert list(sub) == ["name", "topic", "pushConfig", "ackDeadlineSeconds", "createdOn"]
    assert sub["topic"] == f"/projects/{project}/topics/{topic}"
    assert sub["ackDeadlineSeconds"] == 10
    assert sub["pushConfig"] == {
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
    assert api.ok("GET", f"/projects/{project}/subscriptions/{short(sub)}") == sub


def test_subscription_starts_at_the_end_of_its_topic(api: Api, project: str, topic: str) -> None:
    api.publish(project, topic, "old-1", "old-2")
    sub = short(make_sub(api, project, topic))
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets") == {"max": 2, "min": 0, "current": 2}
    api.publish(project, topic, "new")
    got = api.pull(project, sub)
    assert [m["message"]["messageId"] for m in got] == ["2"]


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({"topic": "projects/P/topics/T"}, 400, "Invalid Topic name"),
        ({"topic": "/projects/{p}/topics/{t}"}, 400, "Invalid Topic name"),
        ({"topic": "projects/{p}/topics/missing"}, 404, "Topic doesn't exist"),
        ({"topic": 5}, 400, "Invalid Subscription Arguments"),
        (
            {"topic": "projects/{p}/topics/{t}", "ackDeadlineSeconds": 601},
            400,
            "Invalid ackDeadlineSeconds(needs value between 0 and 600) Arguments",
        ),
        (
            {"topic": "projects/{p}/topics/{t}", "ackDeadlineSeconds": "ten"},
            400,
            "Invalid ackDeadlineSeconds(needs value between 0 and 600) Arguments",
        ),
        (
            {"topic": "projects/{p}/topics/{t}", "pushConfig": {"pushEndpoint": "https://x.example"}},
            400,
            "Push configuration type can only be of 'http_endpoint' or 'mattermost'",
        ),
        (
            {
                "topic": "projects/{p}/topics/{t}",
                "pushConfig": {"type": "http_endpoint", "pushEndpoint": "http://x.example"},
            },
            400,
            "Push endpoint should be addressed by a valid https url",
        ),
    ],
)
def test_create_subscription_errors(
    api: Api, project: str, topic: str, body: dict[str, object], code: int, message: str
) -> None:
    body = {k: v.format(p=project, t=topic) if isinstance(v, str) else v for k, v in body.items()}
    r = api.put(f"/projects/{project}/subscriptions/{unique('s')}", body)
    assert (r.status_code, error_of(r)["message"]) == (code, message)


def test_create_subscription_twice_conflicts(api: Api, project: str, topic: str) -> None:
    sub = short(make_sub(api, project, topic))
    r = api.put(f"/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/{topic}"})
    assert error_of(r) == {"code": 409, "message": "Subscription already exists", "status": "ALREADY_EXISTS"}


def test_list_subscriptions_and_by_topic(api: Api, project: str, topic: str) -> None:
    a, b = short(make_sub(api, project, topic)), short(make_sub(api, project, topic))
    listed = api.ok("GET", f"/projects/{project}/subscriptions")
    assert [s["name"] for s in listed["subscriptions"]] == [f"/projects/{project}/subscriptions/{n}" for n in (b, a)]
    assert listed["totalSize"] == 2
    by_topic = api.ok("GET", f"/projects/{project}/topics/{topic}/subscriptions")
    assert by_topic == {"subscriptions": [f"/projects/{project}/subscriptions/{n}" for n in (b, a)]}
    assert api.get(f"/projects/{project}/topics/nope/subscriptions").status_code == 404


def test_modify_ack_deadline(api: Api, project: str, topic: str) -> None:
    sub = short(make_sub(api, project, topic, ackDeadlineSeconds=30))
    path = f"/projects/{project}/subscriptions/{sub}"
    assert api.ok("GET", path)["ackDeadlineSeconds"] == 30
    r = api.post(path + ":modifyAckDeadline", {"ackDeadlineSeconds": 120})
    assert (r.status_code, r.content) == (200, b"")
    assert api.ok("GET", path)["ackDeadlineSeconds"] == 120
    for bad in ({"ackDeadlineSeconds": 601}, {"ackDeadlineSeconds": -1}, {}, {"ackDeadlineSeconds": "x"}):
        r = api.post(path + ":modifyAckDeadline", bad)
        assert r.status_code == 400, bad
        assert error_of(r)["message"] == "Invalid ackDeadlineSeconds(needs value between 0 and 600) Arguments"
    r = api.post(f"/projects/{project}/subscriptions/nope:modifyAckDeadline", {"ackDeadlineSeconds": 5})
    assert r.status_code == 404


def test_push_config_is_stored(api: Api, project: str, topic: str) -> None:
    sub = short(make_sub(api, project, topic))
    path = f"/projects/{project}/subscriptions/{sub}"
    config = {
        "type": "http_endpoint",
        "pushEndpoint": "https://receiver.example/hook",
        "maxMessages": 5,
        "retryPolicy": {"type": "linear", "period": 500},
    }
    r = api.post(path + ":modifyPushConfig", {"pushConfig": config})
    assert (r.status_code, r.content) == (200, b"")
    shown = api.ok("GET", path)["pushConfig"]
    assert shown["type"] == "http_endpoint"
    assert shown["pushEndpoint"] == "https://receiver.example/hook"
    assert shown["maxMessages"] == 5
    assert shown["retryPolicy"] == {"type": "linear", "period": 500}
    assert shown["authorizationHeader"]["type"] == "autogen"
    assert re.fullmatch(r"[0-9a-f]{64}", shown["authorizationHeader"]["value"])
    assert re.fullmatch(r"[0-9a-f]{64}", shown["verificationHash"])
    assert shown["verified"] is False
    # the same endpoint again keeps the hash and the header value
    api.ok(
        "POST",
        path + ":modifyPushConfig",
        {"pushConfig": {"type": "http_endpoint", "pushEndpoint": "https://receiver.example/hook"}},
    )
    again = api.ok("GET", path)["pushConfig"]
    assert again["verificationHash"] == shown["verificationHash"]
    assert again["authorizationHeader"] == shown["authorizationHeader"]
    assert again["maxMessages"] == 5
    # a slowstart policy has no period
    api.ok(
        "POST",
        path + ":modifyPushConfig",
        {
            "pushConfig": {
                "type": "http_endpoint",
                "pushEndpoint": "https://other.example",
                "retryPolicy": {"type": "slowstart"},
            }
        },
    )
    moved = api.ok("GET", path)["pushConfig"]
    assert moved["retryPolicy"] == {"type": "slowstart"}
    assert moved["verificationHash"] != shown["verificationHash"]
    # {} returns to pull mode
    api.ok("POST", path + ":modifyPushConfig", {"pushConfig": {}})
    assert api.ok("GET", path)["pushConfig"]["type"] == ""


def test_push_subscription_is_pulled_only_by_push_workers_and_admins(api: Api, project: str, topic: str) -> None:
    sub = short(
        make_sub(api, project, topic, pushConfig={"type": "mattermost", "mattermostUrl": "https://mm.example/hooks/x"})
    )
    shown = api.ok("GET", f"/projects/{project}/subscriptions/{sub}")["pushConfig"]
    assert (shown["type"], shown["verified"], shown["maxMessages"]) == ("mattermost", True, 1)
    consumer = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    api.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyAcl", {"authorized_users": [consumer["name"]]})
    r = api.as_(consumer["token"]).post(f"/projects/{project}/subscriptions/{sub}:pull", {"returnImmediately": "true"})
    assert r.status_code == 403
    worker = api.new_user(service_roles=["push_worker"])
    api.publish(project, topic, "for the worker")
    got = api.as_(worker["token"]).ok(
        "POST", f"/projects/{project}/subscriptions/{sub}:pull", {"returnImmediately": "true"}
    )
    assert len(got["receivedMessages"]) == 1


def test_delete_subscription(api: Api, project: str, topic: str) -> None:
    sub = short(make_sub(api, project, topic))
    r = api.delete(f"/projects/{project}/subscriptions/{sub}")
    assert (r.status_code, r.headers["Content-Type"].split(";")[0], r.json()) == (200, "application/json", {})
    r = api.delete(f"/projects/{project}/topics/{topic}")  # the others say nothing, and no type
    assert (r.status_code, r.content, r.headers.get("Content-Type")) == (200, b"", None)
    r = api.get(f"/projects/{project}/subscriptions/{sub}")
    assert error_of(r) == {"code": 404, "message": "Subscription doesn't exist", "status": "NOT_FOUND"}


def test_pull_after_its_topic_is_deleted(api: Api, project: str, topic: str) -> None:
    sub = short(make_sub(api, project, topic))
    api.ok("DELETE", f"/projects/{project}/topics/{topic}")
    r = api.post(f"/projects/{project}/subscriptions/{sub}:pull", {"returnImmediately": "true"})
    assert error_of(r) == {"code": 409, "message": "Subscription's topic doesn't exist", "status": "CONFLICT"}


def test_message_ids_continue_when_a_topic_is_created_again(api: Api, project: str, topic: str) -> None:
    assert api.publish(project, topic, "a", "b") == ["0", "1"]
    api.ok("DELETE", f"/projects/{project}/topics/{topic}")
    api.ok("PUT", f"/projects/{project}/topics/{topic}")
    assert api.publish(project, topic, "c") == ["2"]
