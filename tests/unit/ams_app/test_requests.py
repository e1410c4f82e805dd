"""The typed requests (ams_app/service/requests.py): JSON bodies in, values out, the route's own
error otherwise. Shape only: nothing here reaches a store."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ams_app.errors import AmsError
from ams_app.models import PushConfig
from ams_app.service import push_config, requests
from ams_app.service.requests import MembershipEntry
from ams_app.settings import Settings


def refused(call: Any, *args: Any) -> AmsError:
    with pytest.raises(AmsError) as caught:
        call(*args)
    assert caught.value.code in (400, 413)
    return caught.value


@pytest.mark.parametrize(
    ("ref", "name"),
    [("projects/p/schemas/s1", "s1"), ("projects/p/schemas/a-b_c", "a-b_c")],
)
def test_a_schema_reference_of_the_urls_project_gives_its_name(ref: str, name: str) -> None:
    assert requests.schema_ref("p", ref) == name


@pytest.mark.parametrize(
    "ref", ["projects/other/schemas/s", "projects/p/topics/s", "projects/p/schemas/", "s", 5, None]
)
def test_other_schema_references_are_refused(ref: Any) -> None:
    assert refused(requests.schema_ref, "p", ref).message == "wrong schema name declaration"


def test_a_topic_reference_of_another_project_is_an_invalid_topic_name() -> None:
    assert requests.topic_ref("p", "projects/p/topics/t") == "t"
    assert refused(requests.topic_ref, "p", "projects/q/topics/t").message == "Invalid Topic name"
    assert refused(requests.topic_ref, "p", "").message == "Invalid Topic name"


def test_a_new_topic_takes_an_empty_body_or_string_fields() -> None:
    assert requests.new_topic(None, "p") == requests.NewTopic("")
    assert requests.new_topic({"schema": "projects/p/schemas/s"}, "p") == requests.NewTopic("s")
    assert refused(requests.new_topic, {"schema": 1}, "p").message == "Invalid Request Body"
    assert refused(requests.new_topic, [], "p").message == "Invalid Request Body"


def test_messages_are_checked_one_by_one_and_against_the_limits() -> None:
    limits = Settings(max_publish_messages=2, max_attributes=1, max_message_bytes=8)
    got = requests.messages({"messages": [{"data": "YQ=="}, {"attributes": {"k": "v"}}]}, limits)
    assert [(m.data, m.attributes) for m in got] == [("YQ==", {}), ("", {"k": "v"})]
    assert "limit is 2" in refused(requests.messages, {"messages": [{"data": "YQ=="}] * 3}, limits).message
    two_attributes = {"messages": [{"attributes": {"a": "1", "b": "2"}}]}
    assert refused(requests.messages, two_attributes, limits).message.startswith("Message 0 has too many")
    assert refused(requests.messages, {"messages": [{"data": "YWJjZGVmZ2hp"}]}, limits).code == 413
    assert (
        "Message 1 is not"
        in refused(requests.messages, {"messages": [{"data": "YQ=="}, {"data": "!"}]}, limits).message
    )
    assert refused(requests.messages, {"messages": {}}, limits).message == "Invalid Message Arguments"


def test_acl_names_come_once_each_in_their_order() -> None:
    assert requests.acl_names({"authorized_users": ["b", "a", "b"]}, "Topic") == ["b", "a"]
    assert requests.acl_names({"authorized_users": None}, "Topic") == []
    assert refused(requests.acl_names, {}, "Topic").message == "Invalid Topic ACL Arguments"
    assert refused(requests.acl_names, {"authorized_users": [1]}, "Subscription").message == (
        "Invalid Subscription ACL Arguments"
    )


@pytest.mark.parametrize(("given", "deadline"), [(None, None), (0, None), ("30", 30), (600, 600)])
def test_a_new_subscription_deadline_of_zero_or_none_is_the_default(given: Any, deadline: int | None) -> None:
    body = {"topic": "projects/p/topics/t", "ackDeadlineSeconds": given}
    assert requests.new_subscription(body, "p") == requests.NewSubscription("t", deadline, None)


@pytest.mark.parametrize("given", [601, -1, "ten", True, 1.5])
def test_a_deadline_out_of_range_is_refused(given: Any) -> None:
    body = {"topic": "projects/p/topics/t", "ackDeadlineSeconds": given}
    assert refused(requests.new_subscription, body, "p").message.startswith("Invalid ackDeadlineSeconds")
    assert refused(requests.ack_deadline, {"ackDeadlineSeconds": given}).message.startswith("Invalid ackDeadline")


def test_modify_ack_deadline_needs_the_field() -> None:
    assert requests.ack_deadline({"ackDeadlineSeconds": 0}) == 0
    assert refused(requests.ack_deadline, {}).message.startswith("Invalid ackDeadlineSeconds")


def test_push_config_is_read_for_its_shape_and_built_by_the_rules() -> None:
    raw = {"type": "http_endpoint", "pushEndpoint": "https://x.example.org/h", "retryPolicy": {"type": "bogus"}}
    read = push_config.read(raw)
    assert read is not None
    assert read.retry_type == "bogus"
    assert refused(push_config.build, read).message.startswith("Retry policy can only be")
    assert push_config.read({"type": "", "retryPolicy": {"period": 0}}) is None  # the zero value: pull
    assert refused(requests.push_change, {"pushConfig": {"maxMessages": "many"}}).message == (
        "Invalid Subscription Arguments"
    )
    assert requests.push_change({}) is None
    assert push_config.build(None, PushConfig(type="http_endpoint", push_endpoint="https://a/")) == PushConfig()


def test_pull_parameters_default_and_clamp() -> None:
    assert requests.pull_request(None) == requests.PullRequest(1, False)
    assert requests.pull_request({"maxMessages": "-5", "returnImmediately": "TRUE"}) == requests.PullRequest(1, True)
    assert requests.pull_request({"maxMessages": 7}) == requests.PullRequest(7, False)
    assert refused(requests.pull_request, {"maxMessages": "x"}).message == "Invalid Pull Parameters Arguments"


def test_ack_ids_give_offsets_of_the_named_subscription_only() -> None:
    ids = ["projects/p/subscriptions/s:4", "projects/p/subscriptions/s:9"]
    assert requests.ack_offsets({"ackIds": ids}, "p", "s") == [4, 9]
    for wrong in (["projects/p/subscriptions/t:4"], ["projects/q/subscriptions/s:4"], ["s:4"], [4], []):
        assert refused(requests.ack_offsets, {"ackIds": wrong}, "p", "s").message == "Invalid ack id"
    assert refused(requests.ack_offsets, "x", "p", "s").message == "Invalid ack parameter"


def test_an_offset_is_required_and_integral() -> None:
    assert requests.offset({"offset": "12"}) == 12
    assert refused(requests.offset, {}).message == "Invalid Offset Arguments"
    assert refused(requests.offset, {"offset": 1.5}).message == "Invalid Offset Arguments"


def test_a_new_user_checks_service_roles_before_the_project_entries() -> None:
    body = {"email": "e@x", "service_roles": ["service_admin", "service_admin"], "projects": [{"project": "p"}]}
    got = requests.new_user(body)
    assert got.service_roles == ["service_admin"]
    assert got.texts["email"] == "e@x"
    assert got.texts["last_name"] == ""
    assert got.projects == [MembershipEntry("p", [])]
    bad_role_and_entries = {"service_roles": ["king"], "projects": [5]}
    assert refused(requests.new_user, bad_role_and_entries).message == "invalid role: king"
    assert requests.new_user({"projects": ""}).projects == []  # a falsy value is none at creation


def test_a_user_update_changes_only_what_it_gives() -> None:
    got = requests.user_update({"name": "new", "email": "", "organization": "o"})
    assert got == requests.UserUpdate("new", {"organization": "o"}, None, None)
    assert refused(requests.user_update, {"name": "no spaces"}).message == "Invalid user name"
    assert refused(requests.user_update, {"projects": ""}).message == "Invalid User Arguments"
    assert refused(requests.user_update, None).message == "Invalid User Arguments"


def test_member_bodies() -> None:
    assert requests.new_member(None) == requests.NewMember("", None)
    entries = [{"project": "p", "roles": ["consumer"]}, {"roles": []}]
    assert requests.member_update({"projects": entries}) == [
        MembershipEntry("p", ["consumer"]),
        MembershipEntry("", []),
    ]
    assert requests.member_update({}) is None
    assert requests.member_roles({"roles": ["consumer", "consumer"]}) == ["consumer"]
    assert refused(requests.member_roles, {"roles": ["nobody"]}).message == "invalid role: nobody"
    assert refused(requests.member_roles, {"roles": "consumer"}).message == "Invalid Request Body"


def test_project_bodies() -> None:
    assert requests.project_description({"description": "d"}) == "d"
    assert refused(requests.project_description, None).message == "Invalid Project Arguments"
    assert requests.project_update({"description": "d"}) == requests.ProjectUpdate("", "d")
    assert refused(requests.project_update, {"name": "a/b"}).message == "Invalid project name"


def test_registration_bodies() -> None:
    got = requests.new_registration({"name": "n", "email": "e"})
    assert got.name == "n"
    assert got.texts["email"] == "e"
    assert refused(requests.new_registration, {}).message == "Invalid user name"
    assert requests.decline_comment({}) == ""
    assert refused(requests.decline_comment, {"comment": 1}).message == "Invalid Request Body"


def test_schema_bodies() -> None:
    assert requests.new_schema({"type": "JSON", "schema": {}}) == requests.NewSchema("json", {})
    assert refused(requests.new_schema, {"type": "json"}).message == "Invalid Schema Arguments"
    assert refused(requests.new_schema, {"type": "xml", "schema": {}}).message.startswith("Schema type can only")
    update = requests.schema_update({"name": "projects/p/schemas/renamed", "schema": None}, "p")
    assert dataclasses.astuple(update) == ("renamed", None, None, True)
    assert not requests.schema_update({"type": "avro"}, "p").replaces_schema
    assert refused(requests.schema_update, {"other": 1}, "p").message == "Invalid Schema Arguments"
    assert refused(requests.schema_update, {"name": "s"}, "p").message == "wrong schema name declaration"
