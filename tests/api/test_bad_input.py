"""Bad input never crashes anything and stores nothing: a clear 4xx in the JSON envelope."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.helpers import AmsServer, Api, b64, error_of, unique


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "Invalid Message Arguments"),
        ("[]", "Invalid Message Arguments"),
        ('{"messages": "x"}', "Invalid Message Arguments"),
        ('{"messages": [1]}', "Invalid Message Arguments"),
        ('{"messages": [{"data": 5}]}', "Invalid Message Arguments"),
        ('{"messages": [{"data": "YQ==", "attributes": [{"key": "k", "value": "v"}]}]}', "Invalid Message Arguments"),
        ('{"messages": [{"data": "YQ==", "attributes": {"k": 1}}]}', "Invalid Message Arguments"),
        ('{"messages": [{"data": "not base64!"}]}', "Message 0 is not in valid base64 encoding"),
        ('{"messages": [{"data": "YQ=="}, {"data": "YQ"}]}', "Message 1 is not in valid base64 encoding"),
        ('{"messages": [{"data": "YQ==="}]}', "Message 0 is not in valid base64 encoding"),
        ('{"messages": [{"data": ""}]}', "Message 0 has neither data nor attributes"),
        ("", "Invalid Message Arguments"),
        ("\xff\xfe", "Invalid Message Arguments"),
    ],
)
def test_bad_publish_bodies(api: Api, project: str, topic: str, sub: str, raw: str, message: str) -> None:
    r = api.post(f"/projects/{project}/topics/{topic}:publish", raw=raw.encode("latin-1"))
    assert r.status_code == 400
    assert error_of(r)["message"] == message
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["max"] == 0


def test_a_bad_message_refuses_the_whole_batch(api: Api, project: str, topic: str, sub: str) -> None:
    body = {"messages": [{"data": b64("fine")}, {"data": "%%%"}]}
    assert api.post(f"/projects/{project}/topics/{topic}:publish", body).status_code == 400
    assert api.pull(project, sub) == []
    assert api.publish(project, topic, "next") == ["0"]


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("{nope", 400),
        ('{"maxMessages": "ten"}', 400),
        ('{"maxMessages": [1]}', 400),
        ('{"returnImmediately": "sometimes"}', 400),
        ('{"returnImmediately": 3}', 400),
        ("[]", 400),
    ],
)
def test_bad_pull_bodies(api: Api, project: str, sub: str, raw: str, status: int) -> None:
    r = api.post(f"/projects/{project}/subscriptions/{sub}:pull", raw=raw)
    assert r.status_code == status
    assert error_of(r) == {"code": 400, "message": "Invalid Pull Parameters Arguments", "status": "INVALID_ARGUMENT"}


@pytest.mark.parametrize(
    ("method", "path", "raw", "message"),
    [
        ("PUT", "/projects/{p}/topics/t-new", "{bad", "Invalid Request Body"),
        ("PUT", "/projects/{p}/topics/t-new", '{"schema": 1}', "Invalid Request Body"),
        ("PUT", "/projects/{p}/subscriptions/s-new", "{bad", "Invalid Subscription Arguments"),
        ("PUT", "/projects/{p}/subscriptions/s-new", '{"topic": ["x"]}', "Invalid Subscription Arguments"),
        (
            "POST",
            "/projects/{p}/subscriptions/{s}:modifyPushConfig",
            '{"pushConfig": 3}',
            "Invalid Subscription Arguments",
        ),
        ("POST", "/projects/{p}/subscriptions/{s}:modifyOffset", "{bad", "Invalid Offset Arguments"),
        ("POST", "/projects/{p}/subscriptions/{s}:modifyOffset", '{"offset": true}', "Invalid Offset Arguments"),
        ("POST", "/projects/{p}/topics/{t}:modifyAcl", "{bad", "Invalid Topic ACL Arguments"),
        ("POST", "/projects/{p}/topics/{t}:modifyAcl", '{"authorized_users": "x"}', "Invalid Topic ACL Arguments"),
        ("POST", "/projects/{p}/subscriptions/{s}:modifyAcl", "{}", "Invalid Subscription ACL Arguments"),
        ("POST", "/projects/new-{p}", "{bad", "Invalid Project Arguments"),
        ("POST", "/projects/new-{p}", "", "Invalid Project Arguments"),
        ("PUT", "/projects/{p}", '{"name": 3}', "Invalid Request Body"),
        ("POST", "/users/new-{p}", '{"email": 3}', "Invalid User Arguments"),
        ("POST", "/users/new-{p}", '{"projects": {"a": 1}}', "Invalid User Arguments"),
        ("POST", "/users/new-{p}", "[1,2]", "Invalid User Arguments"),
    ],
)
def test_bad_bodies_elsewhere(
    api: Api, project: str, topic: str, sub: str, method: str, path: str, raw: str, message: str
) -> None:
    path = path.format(p=project, t=topic, s=sub)
    r = api.request(method, path, raw=raw)
    assert r.status_code == 400, r.text
    assert error_of(r)["message"] == message
    assert api.get(path.split(":")[0]).status_code in (404, 200)


@pytest.mark.parametrize(
    ("path", "var"),
    [
        ("/projects/bad.name/topics/t", "project"),
        ("/projects/bad.name/topics/bad.too", "project"),
        ("/projects/ok/topics/bad%20name", "topic"),
        ("/projects/ok/topics/newline%0A", "topic"),  # "$" alone would let a trailing newline in
        ("/projects/ok/subscriptions/b%C3%A4d", "subscription"),
        ("/users/x.y", "user"),
    ],
)
def test_bad_names_come_first(server: AmsServer, path: str, var: str) -> None:
    r = server.api(token="").get(path)
    assert error_of(r) == {"code": 400, "message": f"Invalid {var} name", "status": "INVALID_ARGUMENT"}


def test_unknown_routes_and_methods_are_json(api: Api, project: str) -> None:
    for path in ("/nope", "/projects", "/projects/", f"/projects/{project}/topics/t:frobnicate"):
        r = api.post(path) if path == "/projects" else api.get(path)
        assert r.status_code in (404, 405), path
        error_of(r)
    r = api.get("/v2/status")
    assert error_of(r)["status"] == "NOT_FOUND"
    r = api.delete("/status")
    assert error_of(r) == {"code": 405, "message": "Method Not Allowed", "status": "METHOD_NOT_ALLOWED"}
    assert "GET" in r.headers["Allow"]


def test_limits_are_enforced(make_server) -> None:  # type: ignore[no-untyped-def]
    srv = make_server(
        ams_max_message_bytes="100",
        ams_max_publish_messages="3",
        ams_max_attributes="2",
        ams_max_request_bytes="4096",
    )
    api = srv.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    path = f"/projects/{project}/topics/t:publish"
    r = api.post(path, {"messages": [{"data": b64("x" * 101)}]})
    assert error_of(r) == {"code": 413, "message": "Message size is too large", "status": "INVALID_ARGUMENT"}
    r = api.post(path, {"messages": [{"data": b64("x")}] * 4})
    assert (r.status_code, error_of(r)["message"]) == (400, "Too many messages in one request (the limit is 3)")
    r = api.post(path, {"messages": [{"data": b64("x"), "attributes": {"a": "1", "b": "2", "c": "3"}}]})
    assert (r.status_code, error_of(r)["message"]) == (400, "Message 0 has too many attributes (the limit is 2)")
    r = api.post(path, raw=b'{"messages": [{"data": "' + b"QUFB" * 2000 + b'"}]}')
    assert error_of(r) == {"code": 413, "message": "Request body is too large", "status": "INVALID_ARGUMENT"}
    assert api.post(path, {"messages": [{"data": b64("x" * 100)}]}).status_code == 200

    # the same bodies sent chunked (no Content-Length): over the limit is 413 too, not a cut body's
    # 400; within it, the whole body arrives
    def chunked(body: bytes) -> Any:
        return (body[i : i + 1000] for i in range(0, len(body), 1000))  # requests sends it chunked

    big = b'{"messages": [{"data": "' + b"QUFB" * 2000 + b'"}]}'
    r = api.post(path, raw=chunked(big))  # type: ignore[arg-type]
    assert r.request.headers.get("Transfer-Encoding") == "chunked"
    assert error_of(r) == {"code": 413, "message": "Request body is too large", "status": "INVALID_ARGUMENT"}
    small = json.dumps({"messages": [{"data": b64("y" * 90)}] * 3}).encode() + b" " * 3000  # 3,4xx bytes
    r = api.post(path, raw=chunked(small))  # type: ignore[arg-type]
    assert r.status_code == 200, r.text
    assert len(r.json()["messageIds"]) == 3
    assert srv.proc.poll() is None


def test_absurdly_deep_json_is_a_bad_body(api: Api, project: str, topic: str) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    r = api.post(f"/projects/{project}/topics/{topic}:publish", raw=deep)
    assert error_of(r) == {"code": 400, "message": "Invalid Message Arguments", "status": "INVALID_ARGUMENT"}


@pytest.mark.parametrize("size", ["99999999999999999999999", "-5", "0"])
def test_any_page_size_lists(api: Api, project: str, topic: str, size: str) -> None:
    listed = api.ok("GET", f"/projects/{project}/topics", params={"pageSize": size})
    assert (len(listed["topics"]), listed["totalSize"], listed["nextPageToken"]) == (1, 1, "")


def test_page_token_out_of_range(api: Api, project: str) -> None:
    token = base64.urlsafe_b64encode(b"99999999999999999999999").decode()
    r = api.get(f"/projects/{project}/topics", params={"pageToken": token})
    assert (r.status_code, error_of(r)["message"]) == (400, "Invalid page token")


@pytest.mark.parametrize(("when", "expected"), [("0001-01-01T00:00:00Z", 200), ("9999-12-31T23:59:59.999Z", 409)])
def test_time_to_offset_at_the_ends_of_time(
    api: Api, project: str, topic: str, sub: str, when: str, expected: int
) -> None:
    api.publish(project, topic, "a")
    r = api.get(f"/projects/{project}/subscriptions/{sub}:timeToOffset", params={"time": when})
    assert r.status_code == expected
    if expected == 200:
        assert r.json() == {"offset": 0}


# ------------------------------------------------------- found by fuzzing (tests/api/test_fuzz.py) --
@pytest.mark.parametrize(
    "query",
    ["/registrations?status=pending&status=accepted", "/projects?pageSize=1&pageSize=2", "/users?key=a&key=b"],
)
def test_a_query_parameter_given_twice_is_refused(api: Api, query: str) -> None:
    """Which of two values would count is a guess: 400 names the parameter instead (it used to
    take the first, silently)."""
    r = api.get(query)
    assert r.status_code == 400, r.text
    name = query.split("?")[1].split("=")[0]
    assert error_of(r) == {
        "code": 400,
        "message": f"Query parameter '{name}' is given more than once",
        "status": "INVALID_ARGUMENT",
    }


@pytest.mark.parametrize(
    "entries",
    [
        [{"project": "elsewhere", "roles": [None]}],
        [{"project": "elsewhere", "roles": "consumer"}],
        [{"project": 5}],
        ["consumer"],
    ],
)
def test_a_member_with_malformed_project_entries_is_refused(api: Api, project: str, entries: Any) -> None:
    """Every entry of ``projects`` must be well formed, not only the one for this project (an
    entry for another project used to pass unread, whatever it held)."""
    name = unique("member")
    r = api.post(f"/projects/{project}/members/{name}", {"projects": [{"project": project}, *entries]})
    assert r.status_code == 400, r.text
    assert error_of(r)["message"] == "Invalid User Arguments"
    assert api.get(f"/projects/{project}/members/{name}").status_code == 404


def test_null_means_absent_in_request_bodies(api: Api, project: str) -> None:
    """What the document declares nullable (ams_app/openapi.yaml): null is the same as leaving
    the field out."""
    body = {"description": None}
    assert api.put(f"/projects/{project}", body).status_code == 200
    assert api.ok("PUT", f"/projects/{project}/topics/t-null", None)["name"] == f"/projects/{project}/topics/t-null"
    user = api.ok("POST", f"/projects/{project}/members/u-null", {"email": None, "projects": None})
    assert user["email"] == ""
    assert user["projects"][0]["roles"] == []


def test_a_nul_in_a_token_or_an_acl_name_is_no_lookup(api: Api, project: str, sub: str) -> None:
    """Strings no token or user name can hold are refused before the store is asked (FerretDB's
    PostgreSQL handler cannot even query a NUL character; MongoDB could)."""
    r = api.as_("abc\x00def").get(f"/projects/{project}")
    assert error_of(r)["code"] == 401
    r = api.post(f"/projects/{project}/subscriptions/{sub}:modifyAcl", {"authorized_users": ["a\x00b"]})
    assert error_of(r)["code"] == 404
    assert "do not exist" in error_of(r)["message"]
