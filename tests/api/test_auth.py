"""Authentication, the order of the common checks, the role table and per-resource ACLs
(docs/compatibility.md, the roles of ams_app/openapi.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.helpers import AmsServer, Api, b64, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

UNAUTHORIZED = {"code": 401, "message": "Unauthorized", "status": "UNAUTHORIZED"}
FORBIDDEN = {"code": 403, "message": "Access to this resource is forbidden", "status": "FORBIDDEN"}
PULL_NOW = {"maxMessages": "1", "returnImmediately": "true"}


def assert_error(response: Any, code: int, message: str, status: str) -> None:
    assert response.status_code == code, response.text
    assert error_of(response) == {"code": code, "message": message, "status": status}


def assert_unauthorized(response: Any) -> None:
    assert response.status_code == 401, response.text
    assert response.json() == {"error": UNAUTHORIZED}


def assert_forbidden(response: Any) -> None:
    assert response.status_code == 403, response.text
    assert error_of(response) == FORBIDDEN


def member(api: Api, project: str, roles: list[str]) -> dict[str, Any]:
    return api.new_user(projects=[{"project": project, "roles": roles}])


def make_topic(api: Api, project: str, name: str | None = None) -> str:
    name = name or unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{name}")
    return name


def make_sub(api: Api, project: str, topic: str, name: str | None = None) -> str:
    name = name or unique("sub")
    api.ok("PUT", f"/projects/{project}/subscriptions/{name}", {"topic": f"projects/{project}/topics/{topic}"})
    return name


def set_acl(api: Api, project: str, kind: str, name: str, users: list[str]) -> None:
    r = api.post(f"/projects/{project}/{kind}/{name}:modifyAcl", {"authorized_users": users})
    assert r.status_code == 200, r.text
    assert r.content == b""


def get_acl(api: Api, project: str, kind: str, name: str) -> list[str]:
    body = api.ok("GET", f"/projects/{project}/{kind}/{name}:acl")
    assert set(body) == {"authorized_users"}
    return list(body["authorized_users"])


def pull(api: Api, project: str, sub: str) -> Any:
    return api.post(f"/projects/{project}/subscriptions/{sub}:pull", PULL_NOW)


def publish(api: Api, project: str, topic: str, text: str = "hello") -> Any:
    return api.post(f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": b64(text)}]})


# ==================================================================== tokens =================
def test_token_in_the_x_api_key_header(api: Api, project: str) -> None:
    user = member(api, project, ["project_admin"])
    r = api.as_("").get(f"/projects/{project}", headers={"x-api-key": user["token"]})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == project


def test_token_in_the_key_query_parameter(api: Api, project: str) -> None:
    user = member(api, project, ["project_admin"])
    r = api.as_("").get(f"/projects/{project}", params={"key": user["token"]})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == project


def test_service_token_in_the_key_query_parameter(api: Api, server: AmsServer, project: str) -> None:
    r = api.as_("").get(f"/projects/{project}", params={"key": server.token})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", ["/projects", "/users", "/projects/{project}", "/projects/{project}/topics"])
def test_missing_token_is_unauthorized(api: Api, project: str, path: str) -> None:
    assert_unauthorized(api.as_("").get(path.format(project=project)))


@pytest.mark.parametrize("path", ["/projects", "/users", "/projects/{project}", "/projects/{project}/topics"])
def test_unknown_token_is_unauthorized(api: Api, project: str, path: str) -> None:
    assert_unauthorized(api.as_("no-such-token").get(path.format(project=project)))


@pytest.mark.parametrize("token", ["", "no-such-token"], ids=["missing", "unknown"])
def test_bad_token_on_unknown_project_is_unauthorized_not_not_found(api: Api, token: str) -> None:
    """The token is checked before the project (compatibility.md): no probing for projects."""
    assert_unauthorized(api.as_(token).get(f"/projects/{unique('nope')}/topics"))


def test_valid_user_on_unknown_project_is_not_found(api: Api, project: str) -> None:
    user = member(api, project, ["project_admin"])
    r = api.as_(user["token"]).get(f"/projects/{unique('nope')}/topics")
    assert_error(r, 404, "project doesn't exist", "NOT_FOUND")


def test_stranger_on_unknown_project_is_not_found(api: Api) -> None:
    """Project existence (404) is checked before the caller's roles (401)."""
    stranger = api.new_user()
    r = api.as_(stranger["token"]).get(f"/projects/{unique('nope')}")
    assert_error(r, 404, "project doesn't exist", "NOT_FOUND")


# ==================================================================== URL names ==============
NAME_CASES = [
    ("GET", "/projects/bad.p", "project"),
    ("GET", "/projects/bad.p/topics/bad.t", "project"),
    ("GET", "/projects/{project}/topics/bad.t", "topic"),
    ("GET", "/projects/nope/topics/bad.t", "topic"),
    ("GET", "/projects/{project}/topics/bad.t:acl", "topic"),
    ("POST", "/projects/bad.p/subscriptions/bad.s:pull", "project"),
    ("POST", "/projects/{project}/subscriptions/bad.s:pull", "subscription"),
    ("GET", "/projects/bad.p/members/bad.u", "project"),
    ("GET", "/projects/{project}/members/bad.u", "user"),
    ("POST", "/projects/bad.p", "project"),
    ("GET", "/users/bad.u", "user"),
    ("DELETE", "/users/bad$u", "user"),
    ("GET", "/users:byToken/bad.t", "token"),
    ("GET", "/users:byUUID/bad.u", "uuid"),
]


@pytest.mark.parametrize("token", ["service", "", "unknown"], ids=["service-token", "no-token", "unknown-token"])
@pytest.mark.parametrize(("method", "path", "var"), NAME_CASES, ids=[f"{m} {p}" for m, p, _ in NAME_CASES])
def test_url_names_are_validated_first(
    api: Api, server: AmsServer, project: str, token: str, method: str, path: str, var: str
) -> None:
    caller = api.as_(server.token if token == "service" else token)
    body = {} if method in ("POST", "PUT") else None
    r = caller.request(method, path.format(project=project), body)
    assert_error(r, 400, f"Invalid {var} name", "INVALID_ARGUMENT")


# ==================================================================== role table =============
@dataclass
class World:
    api: Api
    project: str
    topic: str
    sub: str
    users: dict[str, dict[str, Any]]
    callers: dict[str, Api]


@pytest.fixture(scope="module")
def world(server: AmsServer) -> World:
    """One project with a topic and a subscription, and a caller per role. The publisher is in
    the topic's ACL and the consumer in the subscription's, so only the role table decides."""
    api = server.api()
    project = api.new_project("roles")
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    other = api.new_project("elsewhere")
    users = {
        "publisher": member(api, project, ["publisher"]),
        "consumer": member(api, project, ["consumer"]),
        "project_admin": member(api, project, ["project_admin"]),
        "no_role": member(api, project, []),
        "outsider": api.new_user(),
        "admin_elsewhere": member(api, other, ["project_admin"]),
        "metrics_viewer": api.new_user(service_roles=["metrics_viewer"]),
        "service_admin": api.new_user(service_roles=["service_admin"]),
        "push_worker": api.new_user(service_roles=["push_worker"]),
        "argo_api_authn": api.new_user(service_roles=["argo_api_authn"]),
    }
    set_acl(api, project, "topics", topic, [users["publisher"]["name"]])
    set_acl(api, project, "subscriptions", sub, [users["consumer"]["name"]])
    callers = {role: api.as_(user["token"]) for role, user in users.items()}
    callers["service_token"] = api
    return World(api, project, topic, sub, users, callers)


ROUTES: dict[str, tuple[str, str, Any]] = {
    "topics:list": ("GET", "/projects/{p}/topics", None),
    "topics:show": ("GET", "/projects/{p}/topics/{t}", None),
    "topics:create": ("PUT", "/projects/{p}/topics/{new}", None),
    "topics:publish": ("POST", "/projects/{p}/topics/{t}:publish", {"messages": [{"data": b64("hi")}]}),
    "topics:acl": ("GET", "/projects/{p}/topics/{t}:acl", None),
    "subscriptions:list": ("GET", "/projects/{p}/subscriptions", None),
    "subscriptions:show": ("GET", "/projects/{p}/subscriptions/{s}", None),
    "subscriptions:create": ("PUT", "/projects/{p}/subscriptions/{new}", {"topic": "projects/{p}/topics/{t}"}),
    "subscriptions:pull": ("POST", "/projects/{p}/subscriptions/{s}:pull", PULL_NOW),
    "subscriptions:offsets": ("GET", "/projects/{p}/subscriptions/{s}:offsets", None),
    "subscriptions:acl": ("GET", "/projects/{p}/subscriptions/{s}:acl", None),
    "projects:show": ("GET", "/projects/{p}", None),
    "projects:listUsers": ("GET", "/projects/{p}/members", None),
    "projects:update": ("PUT", "/projects/{p}", {"description": "updated"}),
    "projects:create": ("POST", "/projects/{new}", {}),
    "projects:list": ("GET", "/projects", None),
    "users:list": ("GET", "/users", None),
    "users:create": ("POST", "/users/{new}", {}),
    "users:show": ("GET", "/users/{u}", None),
    "users:byToken": ("GET", "/users:byToken/{token}", None),
    "users:byUUID": ("GET", "/users:byUUID/{uuid}", None),
}

ROLE_CASES = [
    # publisher: publish and read topics, nothing else
    ("publisher", "topics:list", 200),
    ("publisher", "topics:show", 200),
    ("publisher", "topics:publish", 200),
    ("publisher", "topics:create", 403),
    ("publisher", "topics:acl", 403),
    ("publisher", "subscriptions:list", 403),
    ("publisher", "subscriptions:show", 403),
    ("publisher", "subscriptions:pull", 403),
    ("publisher", "projects:show", 403),
    ("publisher", "projects:listUsers", 403),
    ("publisher", "users:list", 401),
    ("publisher", "projects:list", 401),
    # consumer: pull and read subscriptions
    ("consumer", "subscriptions:list", 200),
    ("consumer", "subscriptions:show", 200),
    ("consumer", "subscriptions:pull", 200),
    ("consumer", "subscriptions:offsets", 200),
    ("consumer", "subscriptions:create", 403),
    ("consumer", "subscriptions:acl", 403),
    ("consumer", "topics:publish", 403),
    ("consumer", "topics:list", 403),
    ("consumer", "topics:create", 403),
    ("consumer", "projects:show", 403),
    # project_admin: everything in the project, nothing outside
    ("project_admin", "topics:create", 200),
    ("project_admin", "topics:list", 200),
    ("project_admin", "topics:publish", 200),
    ("project_admin", "topics:acl", 200),
    ("project_admin", "subscriptions:create", 200),
    ("project_admin", "subscriptions:list", 200),
    ("project_admin", "subscriptions:pull", 200),
    ("project_admin", "subscriptions:acl", 200),
    ("project_admin", "projects:show", 200),
    ("project_admin", "projects:listUsers", 200),
    ("project_admin", "projects:update", 200),
    ("project_admin", "projects:create", 401),
    ("project_admin", "projects:list", 401),
    ("project_admin", "users:list", 401),
    ("project_admin", "users:create", 401),
    ("project_admin", "users:show", 401),
    # members without roles, strangers and admins of other projects
    ("no_role", "topics:list", 401),
    ("no_role", "subscriptions:pull", 401),
    ("no_role", "projects:show", 401),
    ("outsider", "topics:list", 401),
    ("outsider", "topics:publish", 401),
    ("outsider", "projects:show", 401),
    ("admin_elsewhere", "topics:create", 401),
    ("admin_elsewhere", "projects:listUsers", 401),
    # a service role that grants none of these routes
    ("metrics_viewer", "topics:list", 403),
    ("metrics_viewer", "users:list", 403),
    # push_worker and argo_api_authn: the routes of the push server and the authn service
    ("push_worker", "users:byToken", 200),
    ("push_worker", "users:byUUID", 403),
    ("push_worker", "users:show", 403),
    ("push_worker", "subscriptions:show", 200),
    ("push_worker", "subscriptions:pull", 200),
    ("push_worker", "topics:list", 403),
    ("argo_api_authn", "users:byUUID", 200),
    ("argo_api_authn", "users:byToken", 403),
    ("argo_api_authn", "projects:show", 403),
    # service_admin (a user's service role) works in every project
    ("service_admin", "topics:create", 200),
    ("service_admin", "topics:publish", 200),
    ("service_admin", "subscriptions:create", 200),
    ("service_admin", "subscriptions:pull", 200),
    ("service_admin", "projects:show", 200),
    ("service_admin", "projects:create", 200),
    ("service_admin", "projects:list", 200),
    ("service_admin", "users:list", 200),
    ("service_admin", "users:create", 200),
    ("service_admin", "users:show", 200),
    ("service_admin", "users:byToken", 200),
    # the service token bypasses everything
    *[("service_token", route, 200) for route in ROUTES],
]


@pytest.mark.parametrize(("role", "route", "expected"), ROLE_CASES, ids=[f"{r}-{n}" for r, n, _ in ROLE_CASES])
def test_role_table(world: World, role: str, route: str, expected: int) -> None:
    method, template, body = ROUTES[route]
    names = {"p": world.project, "t": world.topic, "s": world.sub}
    target = world.users["consumer"]
    ids = {"u": target["name"], "token": target["token"], "uuid": target["uuid"]}
    path = template.format(new=unique("new"), **names, **ids)
    if body is not None and "topic" in body:
        body = {"topic": body["topic"].format(**names)}
    r = world.callers[role].request(method, path, body)
    if expected == 200:
        assert r.status_code == 200, r.text
    elif expected == 401:
        assert_unauthorized(r)
    else:
        assert_forbidden(r)


def test_consumer_can_acknowledge(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    consumer = member(api, project, ["consumer"])
    set_acl(api, project, "subscriptions", sub, [consumer["name"]])
    api.publish(project, topic, "text")
    as_consumer = api.as_(consumer["token"])
    (received,) = as_consumer.pull(project, sub, 1)
    r = as_consumer.ack(project, sub, [received["ackId"]])
    assert r.status_code == 200, r.text
    assert r.json() == {}


def test_publisher_cannot_acknowledge(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    publisher = member(api, project, ["publisher"])
    r = api.as_(publisher["token"]).ack(project, sub, [f"projects/{project}/subscriptions/{sub}:0"])
    assert_forbidden(r)


def test_service_admin_user_works_across_projects(api: Api) -> None:
    admin = api.as_(api.new_user(service_roles=["service_admin"])["token"])
    for project in (api.new_project(), api.new_project()):
        topic = make_topic(admin, project)
        assert admin.publish(project, topic, "x") == ["0"]
        assert admin.ok("GET", f"/projects/{project}/members")["users"] == []


def test_service_admin_user_gets_privileged_member_views(api: Api, project: str) -> None:
    user = api.new_user(projects=[{"project": project, "roles": ["consumer"]}], service_roles=["metrics_viewer"])
    admin = api.as_(api.new_user(service_roles=["service_admin"])["token"])
    assert admin.ok("GET", f"/projects/{project}/members/{user['name']}") == user


def test_roles_follow_an_update(api: Api, project: str) -> None:
    user = member(api, project, ["consumer"])
    caller = api.as_(user["token"])
    assert_forbidden(caller.put(f"/projects/{project}/topics/{unique('t')}"))
    api.ok(
        "PUT",
        f"/projects/{project}/members/{user['name']}",
        {"projects": [{"project": project, "roles": ["project_admin"]}]},
    )
    assert caller.put(f"/projects/{project}/topics/{unique('t')}").status_code == 200


# ==================================================================== topic ACLs =============
def test_topic_acl_is_empty_at_first(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    assert get_acl(api, project, "topics", topic) == []


@pytest.mark.parametrize("kind", ["topics", "subscriptions"])
def test_modify_acl_replaces_the_whole_list(api: Api, project: str, kind: str) -> None:
    topic = make_topic(api, project)
    name = topic if kind == "topics" else make_sub(api, project, topic)
    a, b, c = (member(api, project, ["publisher", "consumer"])["name"] for _ in range(3))
    set_acl(api, project, kind, name, [a, b])
    assert get_acl(api, project, kind, name) == [a, b]
    set_acl(api, project, kind, name, [c])
    assert get_acl(api, project, kind, name) == [c]


@pytest.mark.parametrize("kind", ["topics", "subscriptions"])
def test_modify_acl_with_empty_list_clears_it(api: Api, project: str, kind: str) -> None:
    topic = make_topic(api, project)
    name = topic if kind == "topics" else make_sub(api, project, topic)
    user = member(api, project, ["publisher"])
    set_acl(api, project, kind, name, [user["name"]])
    set_acl(api, project, kind, name, [])
    assert get_acl(api, project, kind, name) == []


ACL_ARGS = {"topics": "Invalid Topic ACL Arguments", "subscriptions": "Invalid Subscription ACL Arguments"}


@pytest.mark.parametrize("kind", ["topics", "subscriptions"])
@pytest.mark.parametrize(
    ("body", "raw"),
    [
        pytest.param({}, None, id="missing-key"),
        pytest.param({"users": ["a"]}, None, id="other-key"),
        pytest.param({"authorized_users": "a"}, None, id="not-a-list"),
        pytest.param(None, "{broken", id="malformed"),
    ],
)
def test_modify_acl_with_bad_body_is_invalid(api: Api, project: str, kind: str, body: Any, raw: Any) -> None:
    topic = make_topic(api, project)
    name = topic if kind == "topics" else make_sub(api, project, topic)
    user = member(api, project, ["publisher"])
    set_acl(api, project, kind, name, [user["name"]])
    r = api.post(f"/projects/{project}/{kind}/{name}:modifyAcl", body, raw=raw)
    assert_error(r, 400, ACL_ARGS[kind], "INVALID_ARGUMENT")
    assert get_acl(api, project, kind, name) == [user["name"]]


@pytest.mark.parametrize("kind", ["topics", "subscriptions"])
def test_modify_acl_with_unknown_or_non_member_users_is_not_found(api: Api, project: str, kind: str) -> None:
    topic = make_topic(api, project)
    name = topic if kind == "topics" else make_sub(api, project, topic)
    good = member(api, project, ["publisher"])["name"]
    set_acl(api, project, kind, name, [good])
    ghost = unique("ghost")
    stranger = api.new_user()["name"]
    r = api.post(f"/projects/{project}/{kind}/{name}:modifyAcl", {"authorized_users": [ghost, good, stranger]})
    assert_error(r, 404, f"User(s): {ghost}, {stranger} do not exist", "NOT_FOUND")
    assert get_acl(api, project, kind, name) == [good]


@pytest.mark.parametrize(
    ("kind", "message"), [("topics", "Topic doesn't exist"), ("subscriptions", "Subscription doesn't exist")]
)
def test_acl_of_unknown_resource_is_not_found(api: Api, project: str, kind: str, message: str) -> None:
    name = unique("missing")
    user = member(api, project, ["publisher"])
    assert_error(api.get(f"/projects/{project}/{kind}/{name}:acl"), 404, message, "NOT_FOUND")
    r = api.post(f"/projects/{project}/{kind}/{name}:modifyAcl", {"authorized_users": [user["name"]]})
    assert_error(r, 404, message, "NOT_FOUND")


def test_publisher_outside_the_topic_acl_is_forbidden_until_added(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    publisher = member(api, project, ["publisher"])
    caller = api.as_(publisher["token"])
    assert_forbidden(publish(caller, project, topic))
    set_acl(api, project, "topics", topic, [publisher["name"]])
    r = publish(caller, project, topic)
    assert r.status_code == 200, r.text
    assert r.json() == {"messageIds": ["0"]}


def test_publisher_removed_from_the_topic_acl_is_forbidden_again(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    publisher = member(api, project, ["publisher"])
    set_acl(api, project, "topics", topic, [publisher["name"]])
    caller = api.as_(publisher["token"])
    assert publish(caller, project, topic).status_code == 200
    set_acl(api, project, "topics", topic, [])
    assert_forbidden(publish(caller, project, topic))


def test_publisher_acl_applies_even_with_project_admin(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    both = member(api, project, ["project_admin", "publisher"])
    caller = api.as_(both["token"])
    assert_forbidden(publish(caller, project, topic))
    set_acl(api, project, "topics", topic, [both["name"]])
    assert publish(caller, project, topic).status_code == 200


def test_project_admin_publishes_without_being_in_the_acl(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    admin = member(api, project, ["project_admin"])
    assert publish(api.as_(admin["token"]), project, topic).status_code == 200


def test_consumer_outside_the_subscription_acl_is_forbidden_until_added(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    consumer = member(api, project, ["consumer"])
    caller = api.as_(consumer["token"])
    api.publish(project, topic, "for the consumer")
    assert_forbidden(pull(caller, project, sub))
    set_acl(api, project, "subscriptions", sub, [consumer["name"]])
    r = pull(caller, project, sub)
    assert r.status_code == 200, r.text
    (received,) = r.json()["receivedMessages"]
    assert received["message"]["data"] == b64("for the consumer")


def test_consumer_in_the_topic_acl_only_still_cannot_pull(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    consumer = member(api, project, ["consumer"])
    set_acl(api, project, "topics", topic, [consumer["name"]])
    assert_forbidden(pull(api.as_(consumer["token"]), project, sub))


def test_topic_list_is_filtered_for_a_pure_publisher(api: Api, project: str) -> None:
    t1, _t2, t3 = (make_topic(api, project) for _ in range(3))
    publisher = member(api, project, ["publisher"])
    set_acl(api, project, "topics", t1, [publisher["name"]])
    set_acl(api, project, "topics", t3, [publisher["name"]])
    body = api.as_(publisher["token"]).ok("GET", f"/projects/{project}/topics")
    assert [t["name"] for t in body["topics"]] == [f"/projects/{project}/topics/{t}" for t in (t3, t1)]
    assert body["totalSize"] == 2
    assert body["nextPageToken"] == ""


def test_topic_list_filter_counts_only_acl_entries_across_pages(api: Api, project: str) -> None:
    topics = [make_topic(api, project) for _ in range(4)]
    publisher = member(api, project, ["publisher"])
    for t in topics[:3]:
        set_acl(api, project, "topics", t, [publisher["name"]])
    caller = api.as_(publisher["token"])
    page1 = caller.ok("GET", f"/projects/{project}/topics", params={"pageSize": 2})
    assert page1["totalSize"] == 3
    assert [t["name"].rsplit("/", 1)[1] for t in page1["topics"]] == [topics[2], topics[1]]
    params = {"pageSize": 2, "pageToken": page1["nextPageToken"]}
    page2 = caller.ok("GET", f"/projects/{project}/topics", params=params)
    assert [t["name"].rsplit("/", 1)[1] for t in page2["topics"]] == [topics[0]]
    assert page2["totalSize"] == 3
    assert page2["nextPageToken"] == ""


def test_topic_list_is_not_filtered_for_project_admin(api: Api, project: str) -> None:
    topics = [make_topic(api, project) for _ in range(3)]
    admin = member(api, project, ["project_admin", "publisher"])
    set_acl(api, project, "topics", topics[0], [admin["name"]])
    body = api.as_(admin["token"]).ok("GET", f"/projects/{project}/topics")
    assert [t["name"].rsplit("/", 1)[1] for t in body["topics"]] == topics[::-1]
    assert body["totalSize"] == 3


def test_subscription_list_is_filtered_for_a_pure_consumer(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    _s1, s2, _s3 = (make_sub(api, project, topic) for _ in range(3))
    consumer = member(api, project, ["consumer"])
    set_acl(api, project, "subscriptions", s2, [consumer["name"]])
    body = api.as_(consumer["token"]).ok("GET", f"/projects/{project}/subscriptions")
    assert [s["name"] for s in body["subscriptions"]] == [f"/projects/{project}/subscriptions/{s2}"]
    assert body["totalSize"] == 1
    assert body["nextPageToken"] == ""


def test_subscription_list_is_not_filtered_for_project_admin(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    subs = [make_sub(api, project, topic) for _ in range(3)]
    admin = member(api, project, ["project_admin"])
    body = api.as_(admin["token"]).ok("GET", f"/projects/{project}/subscriptions")
    assert [s["name"].rsplit("/", 1)[1] for s in body["subscriptions"]] == subs[::-1]
    assert body["totalSize"] == 3


def test_consumer_outside_the_acl_can_still_show_the_subscription(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    consumer = api.as_(member(api, project, ["consumer"])["token"])
    shown = consumer.ok("GET", f"/projects/{project}/subscriptions/{sub}")
    assert shown["name"] == f"/projects/{project}/subscriptions/{sub}"


def test_user_view_lists_acl_topics_and_subscriptions(api: Api, project: str) -> None:
    t1, t2 = make_topic(api, project), make_topic(api, project)
    make_sub(api, project, t1)
    s2 = make_sub(api, project, t2)
    user = member(api, project, ["publisher", "consumer"])
    set_acl(api, project, "topics", t1, [user["name"]])
    set_acl(api, project, "topics", t2, [user["name"]])
    set_acl(api, project, "subscriptions", s2, [user["name"]])
    (entry,) = api.ok("GET", f"/users/{user['name']}")["projects"]
    assert entry["project"] == project
    assert entry["roles"] == ["publisher", "consumer"]
    assert sorted(entry["topics"]) == sorted([t1, t2])
    assert entry["subscriptions"] == [s2]
    set_acl(api, project, "topics", t1, [])
    (entry,) = api.ok("GET", f"/users/{user['name']}")["projects"]
    assert entry["topics"] == [t2]
    assert entry["subscriptions"] == [s2]


def test_user_view_acl_entries_are_per_project(api: Api, project: str) -> None:
    other = api.new_project()
    user = api.new_user(
        projects=[{"project": project, "roles": ["publisher"]}, {"project": other, "roles": ["publisher"]}]
    )
    topic = make_topic(api, project)
    set_acl(api, project, "topics", topic, [user["name"]])
    entries = {e["project"]: e for e in api.ok("GET", f"/users/{user['name']}")["projects"]}
    assert entries[project]["topics"] == [topic]
    assert entries[other]["topics"] == []


def test_deleting_a_user_removes_them_from_acls(api: Api, project: str) -> None:
    topic = make_topic(api, project)
    sub = make_sub(api, project, topic)
    gone, stays = member(api, project, ["publisher", "consumer"]), member(api, project, ["publisher", "consumer"])
    set_acl(api, project, "topics", topic, [gone["name"], stays["name"]])
    set_acl(api, project, "subscriptions", sub, [gone["name"], stays["name"]])
    api.ok("DELETE", f"/users/{gone['name']}")
    assert get_acl(api, project, "topics", topic) == [stays["name"]]
    assert get_acl(api, project, "subscriptions", sub) == [stays["name"]]
    reborn = api.new_user(gone["name"], projects=[{"project": project, "roles": ["publisher"]}])
    assert get_acl(api, project, "topics", topic) == [stays["name"]]
    assert reborn["projects"][0]["topics"] == []
    assert_forbidden(publish(api.as_(reborn["token"]), project, topic))


@pytest.mark.parametrize("kind", ["topics", "subscriptions"])
def test_deleted_and_recreated_resource_starts_with_an_empty_acl(api: Api, project: str, kind: str) -> None:
    topic = make_topic(api, project)
    name = topic if kind == "topics" else make_sub(api, project, topic)
    user = member(api, project, ["publisher", "consumer"])
    set_acl(api, project, kind, name, [user["name"]])
    api.ok("DELETE", f"/projects/{project}/{kind}/{name}")
    (entry,) = api.ok("GET", f"/users/{user['name']}")["projects"]
    assert (entry["topics"], entry["subscriptions"]) == ([], [])
    if kind == "topics":
        make_topic(api, project, name)
    else:
        make_sub(api, project, topic, name)
    assert get_acl(api, project, kind, name) == []
