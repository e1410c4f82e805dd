"""The typed requests (ams_app/service/requests.py): JSON bodies in, values out, the route's own
error otherwise. Shape only: nothing here reaches a store."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_schema_encoding_goes_beside_a_schema() -> None:
    ref = "projects/p/schemas/s"
    assert requests.new_topic({"schema": ref, "schemaEncoding": "json"}, "p") == requests.NewTopic("s", 0, "JSON")
    assert requests.new_topic({"schema": ref, "schemaEncoding": ""}, "p") == requests.NewTopic("s")
    assert refused(requests.new_topic, {"schemaEncoding": "JSON"}, "p").message == "schemaEncoding needs a schema"
    message = refused(requests.new_topic, {"schema": ref, "schemaEncoding": "AVRO"}, "p").message
    assert message == "Schema encoding can only be 'JSON' or 'BINARY'"
    assert requests.attached_schema({"schema": ref}, "p") == requests.AttachedSchema("s")
    assert requests.attached_schema({"schema": ref, "schemaEncoding": "BINARY"}, "p") == requests.AttachedSchema(
        "s", "BINARY"
    )
    assert requests.attached_schema(None, "p") == requests.AttachedSchema("")
    assert refused(requests.attached_schema, {"schemaEncoding": "JSON"}, "p").message == "schemaEncoding needs a schema"
    assert refused(requests.attached_schema, {"schema": ref, "schemaEncoding": 1}, "p").message == (
        "Invalid Request Body"
    )


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


def strict_size(text: str) -> int | None:
    """The strict decoder's verdict, which base64_size must give without decoding."""
    try:
        return len(binascii.a2b_base64(text, strict_mode=True))
    except (binascii.Error, ValueError):
        return None


#: base64's characters, its padding, and characters it must refuse (URL-safe ones, white space,
#: non-ASCII), weighted so that valid and nearly valid texts both come up often
_B64_CHARS = st.sampled_from(list(string.ascii_letters + string.digits + "+/") * 3 + list("====-_ \n\x00é"))


@settings(max_examples=3000, deadline=None)
@given(
    st.one_of(
        st.text(_B64_CHARS, max_size=24),
        st.binary(max_size=40).map(lambda b: base64.b64encode(b).decode()),
        st.tuples(st.binary(min_size=1, max_size=40), st.integers(0, 60), _B64_CHARS).map(
            lambda t: (lambda e: e[: t[1] % len(e)] + t[2] + e[t[1] % len(e) :])(base64.b64encode(t[0]).decode())
        ),
    )
)
def test_base64_is_judged_as_the_strict_decoder_judges_it(text: str) -> None:
    assert requests.base64_size(text) == strict_size(text)


@pytest.mark.parametrize(
    "text", ["", "YQ==", "YWI=", "YWJj", "A===", "====", "YQ=", "Y===", "YQ==YQ==", "YQ=a", " YQ=", "YWJj=", "YWJj=="]
)
def test_base64_edges(text: str) -> None:
    assert requests.base64_size(text) == strict_size(text)
    valid = {"": 0, "YQ==": 1, "YWI=": 2, "YWJj": 3, "YWJj=": 3, "YWJj==": 3}  # "YWJj=": as it always passed
    assert requests.base64_size(text) == valid.get(text)


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
    change = {"ackDeadlineSeconds": given}
    assert refused(requests.ack_deadline, change, "p", "s").message.startswith("Invalid ackDeadline")


def test_modify_ack_deadline_needs_the_field_and_zero_means_the_default_for_the_subscription() -> None:
    assert requests.ack_deadline({"ackDeadlineSeconds": 0}, "p", "s") == requests.DeadlineChange(None, None)
    assert refused(requests.ack_deadline, {}, "p", "s").message.startswith("Invalid ackDeadlineSeconds")


def test_modify_ack_deadline_with_ack_ids_changes_those_messages_and_zero_is_a_nack() -> None:
    ids = ["projects/p/subscriptions/s:4", "projects/p/subscriptions/s:9.2"]
    nack = requests.ack_deadline({"ackIds": ids, "ackDeadlineSeconds": 0}, "p", "s")
    assert nack == requests.DeadlineChange(0, [(4, None), (9, 2)])
    assert requests.ack_deadline({"ackIds": ids[:1], "ackDeadlineSeconds": 60}, "p", "s").seconds == 60
    for wrong in ([], ["projects/p/subscriptions/t:4"], "projects/p/subscriptions/s:4"):
        assert refused(requests.ack_deadline, {"ackIds": wrong, "ackDeadlineSeconds": 0}, "p", "s").message == (
            "Invalid ack id"
        )


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
    ids = ["projects/p/subscriptions/s:4", "projects/p/subscriptions/s:9", "projects/p/subscriptions/s:10.3"]
    assert requests.acknowledgement({"ackIds": ids}, "p", "s") == [(4, None), (9, None), (10, 3)]
    wrongs = (["projects/p/subscriptions/t:4"], ["projects/q/subscriptions/s:4"], ["s:4"], [4], [], ["x:4."])
    for wrong in (*wrongs, ["projects/p/subscriptions/s:4.x"], ["projects/p/subscriptions/s:4.1.1"]):
        assert refused(requests.acknowledgement, {"ackIds": wrong}, "p", "s").message == "Invalid ack id"
    assert refused(requests.acknowledgement, "x", "p", "s").message == "Invalid ack parameter"


def test_the_per_message_fields_of_a_new_subscription_are_read_and_checked() -> None:
    body = {
        "topic": "projects/p/topics/t",
        "retryPolicy": {"minimumBackoff": "1.5s", "maximumBackoff": "60s"},
        "deadLetterPolicy": {"deadLetterTopic": "projects/p/topics/dead", "maxDeliveryAttempts": 7},
        "filter": 'attributes.site = "GRNET"',
        "enableMessageOrdering": True,
        "enableExactlyOnceDelivery": "true",
    }
    new = requests.new_subscription(body, "p")
    assert new.retry == requests.RetryPolicy(1500, 60_000)
    assert new.dead_letter == requests.DeadLetterPolicy("p", "dead", 7)
    assert (new.filter, new.ordered, new.exactly_once) == ('attributes.site = "GRNET"', True, True)
    assert requests.new_subscription({**body, "retryPolicy": {}}, "p").retry == requests.RetryPolicy(10_000, 600_000)
    dead = {"deadLetterTopic": "projects/p/topics/d"}
    assert requests.new_subscription({**body, "deadLetterPolicy": dead}, "p").dead_letter == (
        requests.DeadLetterPolicy("p", "d", 5)
    )


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("retryPolicy", {"minimumBackoff": "20s", "maximumBackoff": "10s"}, "retryPolicy needs"),
        ("retryPolicy", {"maximumBackoff": "601s"}, "retryPolicy needs"),
        ("retryPolicy", {"minimumBackoff": "10"}, "retryPolicy.minimumBackoff must be a duration"),
        ("retryPolicy", {"minimumBackoff": "-1s"}, "retryPolicy.minimumBackoff must be a duration"),
        ("retryPolicy", {"minimum": "1s"}, "retryPolicy must be an object"),
        ("retryPolicy", "10s", "retryPolicy must be an object"),
        ("deadLetterPolicy", {"deadLetterTopic": "dead"}, "deadLetterPolicy.deadLetterTopic must be"),
        ("deadLetterPolicy", {"deadLetterTopic": "projects/p/topics/d", "maxDeliveryAttempts": 4}, "between 5 and 100"),
        ("deadLetterPolicy", {"deadLetterTopic": "projects/p/topics/d", "maxDeliveryAttempts": 101}, "between 5"),
        ("filter", 'attributes.x = "1" AND attributes.y = "2" OR attributes:z', "Invalid filter: AND and OR"),
        ("filter", "x" * 257, "Invalid filter: longer than 256 bytes"),
        ("filter", 7, "filter must be a string"),
        ("enableMessageOrdering", "often", "enableMessageOrdering must be a boolean"),
        ("retainAckedMessages", "sometimes", "retainAckedMessages must be a boolean"),
        ("messageRetentionDuration", "600s", "messageRetentionDuration is a topic's on this server"),
    ],
)
def test_per_message_fields_that_cannot_be_honoured_are_refused(field: str, value: Any, says: str) -> None:
    body = {"topic": "projects/p/topics/t", field: value}
    assert says in refused(requests.new_subscription, body, "p").message


def test_per_message_fields_are_refused_on_push_subscriptions() -> None:
    push = {"type": "http_endpoint", "pushEndpoint": "https://x.example.org/h"}
    body = {"topic": "projects/p/topics/t", "pushConfig": push, "enableExactlyOnceDelivery": True}
    assert refused(requests.new_subscription, body, "p").message == requests.PUSH_PER_MESSAGE


def test_an_ordering_key_is_kept_and_bounded() -> None:
    limits = Settings()
    got = requests.messages({"messages": [{"data": "eA==", "orderingKey": "k1"}]}, limits)
    assert got[0].ordering_key == "k1"
    long_key = {"messages": [{"data": "eA==", "orderingKey": "k" * 1025}]}
    assert "orderingKey longer than 1024 bytes" in refused(requests.messages, long_key, limits).message
    assert refused(requests.messages, {"messages": [{"data": "eA==", "orderingKey": 5}]}, limits).message == (
        "Invalid Message Arguments"
    )


def test_a_topic_retention_is_whole_seconds_from_ten_minutes_to_31_days() -> None:
    assert requests.new_topic({"messageRetentionDuration": "600s"}, "p") == requests.NewTopic("", 600)
    assert requests.new_topic({"messageRetentionDuration": "2678400s"}, "p").retention_s == 2678400
    assert requests.new_topic({}, "p").retention_s == 0
    for bad in ("599s", "2678401s", "600.5s", "10m", "-600s"):
        message = refused(requests.new_topic, {"messageRetentionDuration": bad}, "p").message
        assert message.startswith("messageRetentionDuration must be"), (bad, message)


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
    assert requests.new_schema({"type": "Protobuf", "schema": "message A {}"}) == requests.NewSchema(
        "protobuf", "message A {}"
    )
    update = requests.schema_update({"name": "projects/p/schemas/renamed", "schema": None}, "p")
    assert dataclasses.astuple(update) == ("renamed", None, None, True)
    assert not requests.schema_update({"type": "avro"}, "p").replaces_schema
    assert refused(requests.schema_update, {"other": 1}, "p").message == "Invalid Schema Arguments"
    assert refused(requests.schema_update, {"name": "s"}, "p").message == "wrong schema name declaration"


def test_a_snapshot_names_a_subscription_of_its_own_project() -> None:
    assert requests.snapshot_source({"subscription": "projects/p/subscriptions/s"}, "p") == "s"
    for wrong in ({}, {"subscription": "s"}, {"subscription": "projects/p/topics/s"}, {"subscription": 7}):
        assert refused(requests.snapshot_source, wrong, "p").message.startswith("A snapshot needs its subscription")
    other = {"subscription": "projects/q/subscriptions/s"}
    assert refused(requests.snapshot_source, other, "p").message == (
        "A snapshot is taken of a subscription of its own project"
    )


def test_a_seek_goes_to_one_snapshot_or_one_time() -> None:
    assert requests.seek_target({"snapshot": "projects/p/snapshots/a"}, "p") == requests.SeekTarget("a", 0)
    assert requests.seek_target({"time": "1970-01-01T00:00:01Z"}, "p") == requests.SeekTarget("", 1_000_000_000)
    far = requests.seek_target({"time": "9999-12-31T23:59:59Z"}, "p")
    assert far.time_ns == 2**63 - 1  # beyond what the log's 64 bits hold: the end
    for wrong in ({}, {"snapshot": "projects/p/snapshots/a", "time": "1970-01-01T00:00:01Z"}, {"snapshot": "a"}):
        assert refused(requests.seek_target, wrong, "p").message.startswith("A seek needs either")
    assert refused(requests.seek_target, {"time": "soon"}, "p").message.startswith("time must be an RFC 3339")
    assert refused(requests.seek_target, {"snapshot": "projects/q/snapshots/a"}, "p").message == (
        "A subscription seeks to a snapshot of its own project"
    )
