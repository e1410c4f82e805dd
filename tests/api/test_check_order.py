"""Which answer a request with two faults gets: each route checks in a fixed order, and its handler
(ams_app/api/<resource>.py) spells that order, parsing the body (ams_app/service/requests.py) before
or after looking up what the URL names (docs/compatibility.md, "Order of checks")."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Api, error_of, unique

pytestmark = pytest.mark.inprocess

BAD_BODY = "[1]"  # JSON, but no object: every route's body check refuses it

#: Routes that look up the resource their URL names before they read the body: a missing one is
#: 404 whatever the body. ``{p}`` is the project, ``{t}`` a topic, ``{s}`` a subscription.
LOOKUP_FIRST = [
    ("POST", "/projects/{p}/topics/{missing}:publish"),
    ("POST", "/projects/{p}/topics/{missing}:modifyAcl"),
    ("POST", "/projects/{p}/topics/{missing}:attachSchema"),
    ("POST", "/projects/{p}/subscriptions/{missing}:pull"),
    ("POST", "/projects/{p}/subscriptions/{missing}:acknowledge"),
    ("POST", "/projects/{p}/subscriptions/{missing}:modifyAcl"),
    ("PUT", "/projects/{p}/schemas/{missing}"),
    ("PUT", "/users/{missing}"),
]

#: Routes that read the body first: a bad body is 400 even where the resource is missing.
BODY_FIRST = [
    ("PUT", "/projects/{p}/subscriptions/{new}", BAD_BODY),  # its topic is missing too
    ("POST", "/projects/{p}/subscriptions/{missing}:modifyAckDeadline", BAD_BODY),
    ("POST", "/projects/{p}/subscriptions/{missing}:modifyOffset", BAD_BODY),
    ("POST", "/projects/{p}/subscriptions/{missing}:modifyPushConfig", BAD_BODY),
    ("POST", "/projects/{p}/subscriptions/{missing}:modifyPushConfig", '{"pushConfig": {"type": 5}}'),
    ("PUT", "/projects/{p}/members/{missing}", BAD_BODY),
    ("PUT", "/projects/{p}/members/{missing}", '{"projects": [5]}'),
    ("POST", "/projects/{p}/members/{missing}:add", '{"roles": "consumer"}'),
    ("POST", "/registrations/{missing}:decline", BAD_BODY),
]


def _path(template: str, project: str) -> str:
    return template.format(p=project, missing=unique("missing"), new=unique("new"))


@pytest.mark.parametrize(("method", "template"), LOOKUP_FIRST)
def test_a_missing_resource_is_404_before_a_bad_body(api: Api, project: str, method: str, template: str) -> None:
    r = api.request(method, _path(template, project), raw=BAD_BODY)
    assert r.status_code == 404, r.text
    assert error_of(r)["status"] == "NOT_FOUND"


@pytest.mark.parametrize(("method", "template", "raw"), BODY_FIRST)
def test_a_bad_body_is_400_before_a_missing_resource(
    api: Api, project: str, method: str, template: str, raw: str
) -> None:
    r = api.request(method, _path(template, project), raw=raw)
    assert r.status_code == 400, r.text
    assert error_of(r)["status"] in ("INVALID_ARGUMENT", "BAD_REQUEST")


def test_publish_checks_the_topic_then_the_acl_then_the_body(api: Api, project: str, topic: str) -> None:
    name = unique("pub")
    api.ok("POST", f"/projects/{project}/members/{name}", {"projects": [{"project": project, "roles": ["publisher"]}]})
    token = api.ok("GET", f"/users/{name}")["token"]
    as_publisher = api.as_(token)
    r = as_publisher.request("POST", f"/projects/{project}/topics/{topic}:publish", raw=BAD_BODY)
    assert r.status_code == 403, r.text  # not on the topic's ACL: the body is not looked at
    api.ok("POST", f"/projects/{project}/topics/{topic}:modifyAcl", {"authorized_users": [name]})
    r = as_publisher.request("POST", f"/projects/{project}/topics/{topic}:publish", raw=BAD_BODY)
    assert r.status_code == 400, r.text


def test_pull_on_a_subscription_whose_topic_is_gone_is_409_before_a_bad_body(
    api: Api, project: str, topic: str, sub: str
) -> None:
    api.ok("DELETE", f"/projects/{project}/topics/{topic}")
    r = api.request("POST", f"/projects/{project}/subscriptions/{sub}:pull", raw=BAD_BODY)
    assert r.status_code == 409, r.text
    assert error_of(r)["message"] == "Subscription's topic doesn't exist"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"ackIds": ["projects/other/subscriptions/{s}:1"]}, "Invalid ack id"),
        ({"ackIds": ["projects/{p}/subscriptions/another:1"]}, "Invalid ack id"),
        ({"ackIds": []}, "Invalid ack id"),
        ([], "Invalid ack parameter"),
    ],
)
def test_ack_ids_name_the_subscription_of_the_url(api: Api, project: str, sub: str, body: Any, message: str) -> None:
    if isinstance(body, dict):
        body = {"ackIds": [i.format(p=project, s=sub) for i in body["ackIds"]]}
    r = api.request("POST", f"/projects/{project}/subscriptions/{sub}:acknowledge", body)
    assert r.status_code == 400, r.text
    assert error_of(r)["message"] == message
