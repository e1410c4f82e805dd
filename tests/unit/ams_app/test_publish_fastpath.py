"""The publish route's fast path (ams_app/api/fastpath.py), in-process on the embedded backend: it
answers a publish as the Flask route does, byte for byte, counts it in the request metrics, and
leaves every other request, refused ones included, to the app, which answers it once."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import Client

from ams_app.api.fastpath import PublishFastPath
from ams_app.app import create_app
from ams_app.backends.errors import BackendUnavailable
from ams_app.service.base import topic_key
from ams_app.settings import Settings

SERVICE = "service-token"
PUBLISH = "/v1/projects/p1/topics/t1:publish"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def one(text: str = "hello") -> dict[str, Any]:
    return {"messages": [{"data": b64(text), "attributes": {"k": "v"}}]}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    made = create_app(
        Settings(
            data_dir=str(tmp_path_factory.mktemp("fastpath") / "data"), service_token=SERVICE, max_request_bytes=4096
        )
    )
    api = Client(made)
    headers = {"x-api-key": SERVICE}
    assert api.post("/v1/projects/p1", json={}, headers=headers).status_code == 200
    for topic in ("t1", "t2", "shaped"):
        assert api.put(f"/v1/projects/p1/topics/{topic}", headers=headers).status_code == 200
    schema = {"type": "json", "schema": {"type": "object", "required": ["n"]}}
    assert api.post("/v1/projects/p1/schemas/s1", json=schema, headers=headers).status_code == 200
    attach = {"schema": "projects/p1/schemas/s1"}
    assert api.post("/v1/projects/p1/topics/shaped:attachSchema", json=attach, headers=headers).status_code == 200
    yield made
    made.extensions["ams"].close()


@pytest.fixture
def fast(app: Flask) -> Client:
    """Requests through the app as it serves them: the fast path first."""
    assert isinstance(app.wsgi_app, PublishFastPath)
    return Client(app)


@pytest.fixture
def flask_only(app: Flask) -> Client:
    """The same app without the fast path: the Flask route alone."""
    layer = app.wsgi_app
    assert isinstance(layer, PublishFastPath)
    return Client(layer.app)


def new_user(app: Flask, name: str, roles: list[str]) -> str:
    """A member of p1 with ``roles``; its token."""
    r = Client(app).post(
        f"/v1/users/{name}", json={"projects": [{"project": "p1", "roles": roles}]}, headers={"x-api-key": SERVICE}
    )
    assert r.status_code == 200, r.text
    return str(r.json["token"])


def log_end(app: Flask, topic: str = "t1") -> int:
    """The offset the topic's next message will have."""
    svc = app.extensions["ams"]
    return int(svc.log.bounds(topic_key(svc.project("p1"), topic))[1])


def answered(client: Client, path: str = PUBLISH, body: Any = None, raw: bytes | None = None, **headers: str) -> Any:
    data = raw if raw is not None else json.dumps(body if body is not None else one()).encode()
    return client.post(path, data=data, headers={"content-type": "application/json", **headers})


def same_answer(a: Any, b: Any) -> None:
    """Status, headers and body alike; message ids are the log's next offsets, so only their count."""
    assert (a.status, list(a.headers.items())[: len(b.headers)]) == (b.status, list(b.headers.items()))
    if a.status_code == 200:
        assert len(a.json["messageIds"]) == len(b.json["messageIds"])
        assert list(a.json) == list(b.json) == ["messageIds"]
    else:
        assert a.data == b.data


def test_a_publish_is_answered_as_the_flask_route_answers_it(fast: Client, flask_only: Client, app: Flask) -> None:
    by_fast = answered(fast, **{"x-api-key": SERVICE})
    by_flask = answered(flask_only, **{"x-api-key": SERVICE})
    assert by_fast.status_code == 200, by_fast.text
    same_answer(by_fast, by_flask)
    assert int(by_flask.json["messageIds"][0]) == int(by_fast.json["messageIds"][0]) + 1
    # the token in the query string, as argo-ams-library sends it
    by_key = answered(fast, PUBLISH + f"?key={SERVICE}")
    same_answer(by_key, by_flask)


def test_what_it_published_is_pulled_whole(fast: Client, app: Flask) -> None:
    headers = {"x-api-key": SERVICE}
    sub = {"topic": "projects/p1/topics/t1"}
    assert fast.put("/v1/projects/p1/subscriptions/whole", json=sub, headers=headers).status_code == 200
    ids = answered(fast, body={"messages": [{"data": b64("a")}, {"attributes": {"only": "attributes"}}]}, **headers)
    pulled = fast.post("/v1/projects/p1/subscriptions/whole:pull", json={"maxMessages": "10"}, headers=headers)
    messages = [m["message"] for m in pulled.json["receivedMessages"]]
    assert [m["messageId"] for m in messages] == ids.json["messageIds"]
    assert [m["data"] for m in messages] == [b64("a"), ""]
    assert messages[1]["attributes"] == {"only": "attributes"}


@pytest.mark.parametrize(
    ("path", "body", "raw", "headers"),
    [
        (PUBLISH, None, None, {}),  # no token
        (PUBLISH, None, None, {"x-api-key": "unknown"}),
        (PUBLISH + "?key=unknown", None, None, {}),
        (PUBLISH + f"?key={SERVICE}&key={SERVICE}", None, None, {}),  # a parameter given twice
        (PUBLISH + f"?key={SERVICE}%20", None, None, {}),  # an escape: Werkzeug's reading
        ("/v1/projects/nope/topics/t1:publish", None, None, {"x-api-key": SERVICE}),
        ("/v1/projects/p1/topics/nope:publish", None, None, {"x-api-key": SERVICE}),
        ("/v1/projects/p1/topics/b%C3%A4d:publish", None, None, {"x-api-key": SERVICE}),
        ("/v1/projects/p1/topics/t1:publish/", None, None, {"x-api-key": SERVICE}),
        ("/v1/projects/p1/topics/t1:publishx", None, None, {"x-api-key": SERVICE}),
        (PUBLISH, None, b"", {"x-api-key": SERVICE}),
        (PUBLISH, None, b"{not json", {"x-api-key": SERVICE}),
        (PUBLISH, None, b'{"messages": [{"data": "\\ud800"}]}', {"x-api-key": SERVICE}),  # a lone surrogate
        (PUBLISH, {"messages": "no"}, None, {"x-api-key": SERVICE}),
        (PUBLISH, {"messages": [{"data": "!!"}]}, None, {"x-api-key": SERVICE}),
        (PUBLISH, None, b'{"messages": [{"data": "' + b"QUFB" * 2000 + b'"}]}', {"x-api-key": SERVICE}),  # > 4096
        ("/v1/projects/p1/topics/shaped:publish", {"messages": [{"data": b64("{}")}]}, None, {"x-api-key": SERVICE}),
    ],
)
def test_a_refused_publish_gets_the_routes_own_answer_and_nothing_is_kept(
    fast: Client, flask_only: Client, app: Flask, path: str, body: Any, raw: bytes | None, headers: dict[str, str]
) -> None:
    before = log_end(app)
    by_fast = answered(fast, path, body, raw, **headers)
    by_flask = answered(flask_only, path, body, raw, **headers)
    assert by_fast.status_code >= 400, by_fast.text
    same_answer(by_fast, by_flask)
    assert by_fast.json["error"]["code"] == by_fast.status_code
    assert log_end(app) == before


def test_roles_and_the_topics_acl_are_the_routes(fast: Client, flask_only: Client, app: Flask) -> None:
    consumer = new_user(app, "fp-consumer", ["consumer"])
    publisher = new_user(app, "fp-publisher", ["publisher"])
    acl = {"authorized_users": ["fp-publisher"]}  # a publisher publishes where a topic's ACL names it
    r = fast.post("/v1/projects/p1/topics/t2:modifyAcl", json=acl, headers={"x-api-key": SERVICE})
    assert r.status_code == 200, r.text
    t2 = "/v1/projects/p1/topics/t2:publish"
    for client in (fast, flask_only):
        assert answered(client, t2, **{"x-api-key": consumer}).status_code == 403
        assert answered(client, t2, **{"x-api-key": publisher}).status_code == 200
    before = log_end(app)
    by_fast = answered(fast, **{"x-api-key": publisher})  # t1's ACL does not name it
    assert by_fast.status_code == 403
    same_answer(by_fast, answered(flask_only, **{"x-api-key": publisher}))
    assert log_end(app) == before


def test_what_the_fast_path_leaves_is_published_once_by_the_app(fast: Client, flask_only: Client, app: Flask) -> None:
    for path in (PUBLISH + f"?key={SERVICE}&pretty=true", PUBLISH + f"?key={SERVICE.replace('-', '%2D')}"):
        before = log_end(app)
        by_fast = answered(fast, path, {"messages": [{"data": b64("x")}, {"data": b64("y")}]})
        assert by_fast.status_code == 200, by_fast.text
        assert [int(i) for i in by_fast.json["messageIds"]] == [before, before + 1]
        assert log_end(app) == before + 2
    # an empty list is no refusal: an empty answer, from either
    same_answer(
        answered(fast, body={"messages": []}, **{"x-api-key": SERVICE}),
        answered(flask_only, body={"messages": []}, **{"x-api-key": SERVICE}),
    )


def test_a_schema_refusal_is_answered_here_as_the_route_answers_it(fast: Client, flask_only: Client) -> None:
    path = "/v1/projects/p1/topics/shaped:publish"
    good = {"messages": [{"data": b64('{"n": 1}')}]}
    assert answered(fast, path, good, **{"x-api-key": SERVICE}).status_code == 200
    bad = {"messages": [{"data": b64('{"n": 1}')}, {"data": b64('{"m": 1}')}]}
    by_fast = answered(fast, path, bad, **{"x-api-key": SERVICE})
    assert by_fast.status_code == 400
    same_answer(by_fast, answered(flask_only, path, bad, **{"x-api-key": SERVICE}))


def test_a_backend_failure_is_the_routes_503_and_not_tried_again(
    fast: Client, flask_only: Client, app: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = app.extensions["ams"]
    calls: list[str] = []

    def failing(key: str, messages: list[Any]) -> list[Any]:
        calls.append(key)
        raise BackendUnavailable("the broker is away")

    monkeypatch.setattr(svc.log, "append", failing)
    by_fast = answered(fast, **{"x-api-key": SERVICE})
    assert len(calls) == 1  # answered here, not handed to the app to publish again
    assert by_fast.status_code == 503
    same_answer(by_fast, answered(flask_only, **{"x-api-key": SERVICE}))


def test_fast_publishes_are_in_the_request_metrics(fast: Client, app: Flask) -> None:
    registry = app.extensions["ams"].telemetry.registry

    def count(status_class: str) -> float:
        labels = {"route": "topics:publish", "method": "POST", "status_class": status_class}
        return registry.get_sample_value("ams_http_request_duration_seconds_count", labels) or 0.0

    ok_before, refused_before = count("2xx"), count("4xx")
    assert answered(fast, **{"x-api-key": SERVICE}).status_code == 200
    assert answered(fast, **{"x-api-key": "unknown"}).status_code == 401  # the app's, counted once
    assert (count("2xx"), count("4xx")) == (ok_before + 1, refused_before + 1)
    assert registry.get_sample_value("ams_http_requests_in_flight") == 0


def test_other_requests_are_the_apps(fast: Client) -> None:
    headers = {"x-api-key": SERVICE}
    assert fast.get("/v1/projects/p1/topics/t1", headers=headers).json["name"] == "/projects/p1/topics/t1"
    r = fast.get(PUBLISH, headers=headers)  # the route is POST only
    assert r.status_code == 405
    assert "POST" in r.headers["Allow"]
