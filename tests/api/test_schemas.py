"""Schemas: create, show, list, update, delete, validate; attaching them to topics; publishing
to a topic with a JSON, Avro or Protocol Buffers schema, in the topic's encoding
(docs/compatibility.md, "Schemas")."""

from __future__ import annotations

import base64
import io
import json
import re
from typing import Any

import fastavro
import pytest

from tests.helpers import Api, b64, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"email": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["email", "name"],
}
AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Person",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
VALID_DOC = {"email": "a@example.org", "name": "alice", "age": 3}


def avro_b64(record: dict[str, Any], schema: dict[str, Any] = AVRO_SCHEMA) -> str:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b64(out.getvalue())


def make_schema(api: Api, project: str, kind: str = "json", schema: dict[str, Any] | None = None) -> str:
    name = unique("schema")
    api.ok(
        "POST",
        f"/projects/{project}/schemas/{name}",
        {"type": kind, "schema": schema or (JSON_SCHEMA if kind == "json" else AVRO_SCHEMA)},
    )
    return name


def ref(project: str, schema: str) -> str:
    return f"projects/{project}/schemas/{schema}"


def publish_raw(api: Api, project: str, topic: str, *data: str) -> Any:
    return api.post(f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": d} for d in data]})


def max_offset(api: Api, project: str, sub: str) -> int:
    return int(api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["max"])


def expect(r: Any, code: int, message: str, status: str = "INVALID_ARGUMENT") -> None:
    assert error_of(r) == {"code": code, "message": message, "status": status}, r.text


# ------------------------------------------------------------------ create / show / list ----
@pytest.mark.parametrize(("given", "stored"), [("json", "json"), ("JSON", "json"), ("Json", "json")])
def test_create_json_schema(api: Api, project: str, given: str, stored: str) -> None:
    name = unique("schema")
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": given, "schema": JSON_SCHEMA})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"uuid", "name", "type", "schema"}
    assert UUID.match(body["uuid"])
    assert body["name"] == f"projects/{project}/schemas/{name}"
    assert body["type"] == stored
    assert body["schema"] == JSON_SCHEMA
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body


@pytest.mark.parametrize("given", ["avro", "AVRO", "Avro"])
def test_create_avro_schema(api: Api, project: str, given: str) -> None:
    name = unique("schema")
    body = api.ok("POST", f"/projects/{project}/schemas/{name}", {"type": given, "schema": AVRO_SCHEMA})
    assert set(body) == {"uuid", "name", "type", "schema"}
    assert UUID.match(body["uuid"])
    assert (body["name"], body["type"], body["schema"]) == (f"projects/{project}/schemas/{name}", "avro", AVRO_SCHEMA)
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body


def test_create_schema_twice_conflicts(api: Api, project: str) -> None:
    name = make_schema(api, project)
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "avro", "schema": AVRO_SCHEMA})
    assert r.status_code == 409
    expect(r, 409, "Schema already exists", "ALREADY_EXISTS")
    assert api.ok("GET", f"/projects/{project}/schemas/{name}")["type"] == "json"


@pytest.mark.parametrize("kind", ["xml", "", "proto", 7, None])
def test_create_schema_bad_type(api: Api, project: str, kind: Any) -> None:
    name = unique("schema")
    body: dict[str, Any] = {"schema": JSON_SCHEMA}
    if kind is not None:
        body["type"] = kind
    r = api.post(f"/projects/{project}/schemas/{name}", body)
    assert r.status_code == 400
    expect(r, 400, "Schema type can only be 'json', 'avro' or 'protobuf'")
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_create_invalid_json_schema(api: Api, project: str) -> None:
    name = unique("schema")
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "json", "schema": {"type": "unknown"}})
    assert r.status_code == 400
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert "unknown" in error["message"]
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_create_invalid_avro_schema(api: Api, project: str) -> None:
    name = unique("schema")
    schema = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "unknown"}]}
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "avro", "schema": schema})
    assert r.status_code == 400
    expect(r, 400, 'unknown type name: "unknown"')
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


@pytest.mark.parametrize(
    "raw",
    [b'{"type": "json", "schema": ', b"not json", b'{"type": "json"}', b"[1, 2]", b'"json"', b""],
    ids=["truncated", "garbage", "missing-schema", "array", "string", "empty"],
)
def test_create_schema_invalid_arguments(api: Api, project: str, raw: bytes) -> None:
    name = unique("schema")
    r = api.post(f"/projects/{project}/schemas/{name}", raw=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    expect(r, 400, "Invalid Schema Arguments")
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_create_schema_bad_url_name(api: Api, project: str) -> None:
    r = api.post(f"/projects/{project}/schemas/bad.name", {"type": "json", "schema": JSON_SCHEMA})
    assert r.status_code == 400
    expect(r, 400, "Invalid schema name")


def test_list_schemas(api: Api) -> None:
    project = api.new_project()
    assert api.ok("GET", f"/projects/{project}/schemas") == {"schemas": []}
    first = make_schema(api, project, "json")
    second = make_schema(api, project, "avro")
    body = api.ok("GET", f"/projects/{project}/schemas")
    assert set(body) == {"schemas"}
    by_name = {s["name"]: s for s in body["schemas"]}
    assert set(by_name) == {ref(project, first), ref(project, second)}
    for name in (first, second):
        assert by_name[ref(project, name)] == api.ok("GET", f"/projects/{project}/schemas/{name}")
    # schemas of other projects are not listed
    other = api.new_project()
    make_schema(api, other)
    assert {s["name"] for s in api.ok("GET", f"/projects/{project}/schemas")["schemas"]} == set(by_name)


def test_show_unknown_schema(api: Api, project: str) -> None:
    r = api.get(f"/projects/{project}/schemas/{unique('nope')}")
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")


def test_schema_is_per_project(api: Api, project: str) -> None:
    name = make_schema(api, project)
    other = api.new_project()
    r = api.get(f"/projects/{other}/schemas/{name}")
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")


def test_schema_of_unknown_project(api: Api) -> None:
    r = api.get(f"/projects/{unique('nope')}/schemas")
    assert r.status_code == 404
    assert error_of(r)["message"] == "project doesn't exist"


# ------------------------------------------------------------------ update ------------------
def test_update_schema_content(api: Api, project: str) -> None:
    name = make_schema(api, project)
    created = api.ok("GET", f"/projects/{project}/schemas/{name}")
    new_schema = {"type": "object", "required": ["id"]}
    body = api.ok("PUT", f"/projects/{project}/schemas/{name}", {"schema": new_schema})
    assert body == {**created, "schema": new_schema}
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body


def test_update_schema_type_and_schema(api: Api, project: str) -> None:
    name = make_schema(api, project)
    created = api.ok("GET", f"/projects/{project}/schemas/{name}")
    body = api.ok("PUT", f"/projects/{project}/schemas/{name}", {"type": "AVRO", "schema": AVRO_SCHEMA})
    assert body == {**created, "type": "avro", "schema": AVRO_SCHEMA}
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body


def test_update_type_alone_recompiles_the_stored_schema(api: Api, project: str) -> None:
    name = make_schema(api, project, "json")
    before = api.ok("GET", f"/projects/{project}/schemas/{name}")
    r = api.put(f"/projects/{project}/schemas/{name}", {"type": "avro"})
    assert r.status_code == 400
    assert error_of(r)["status"] == "INVALID_ARGUMENT"
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == before


def test_update_schema_bad_type_or_schema(api: Api, project: str) -> None:
    name = make_schema(api, project)
    before = api.ok("GET", f"/projects/{project}/schemas/{name}")
    r = api.put(f"/projects/{project}/schemas/{name}", {"type": "xml"})
    expect(r, 400, "Schema type can only be 'json', 'avro' or 'protobuf'")
    r = api.put(f"/projects/{project}/schemas/{name}", {"schema": {"type": "unknown"}})
    assert r.status_code == 400
    assert error_of(r)["status"] == "INVALID_ARGUMENT"
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == before


def test_rename_schema(api: Api, project: str) -> None:
    name = make_schema(api, project)
    created = api.ok("GET", f"/projects/{project}/schemas/{name}")
    new = unique("renamed")
    topic = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{topic}", {"schema": ref(project, name)})
    body = api.ok("PUT", f"/projects/{project}/schemas/{name}", {"name": ref(project, new)})
    assert body == {**created, "name": ref(project, new)}
    assert api.ok("GET", f"/projects/{project}/schemas/{new}") == body
    r = api.get(f"/projects/{project}/schemas/{name}")
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")
    # the topic follows the schema (it is attached by uuid)
    assert api.ok("GET", f"/projects/{project}/topics/{topic}")["schema"] == ref(project, new)


def test_rename_schema_clash(api: Api, project: str) -> None:
    first = make_schema(api, project)
    second = make_schema(api, project, "avro")
    r = api.put(f"/projects/{project}/schemas/{first}", {"name": ref(project, second)})
    assert r.status_code == 409
    expect(r, 409, "Schema already exists", "ALREADY_EXISTS")
    assert api.ok("GET", f"/projects/{project}/schemas/{first}")["type"] == "json"
    assert api.ok("GET", f"/projects/{project}/schemas/{second}")["type"] == "avro"


@pytest.mark.parametrize(
    "new_name",
    ["plain", "/projects/{p}/schemas/x", "projects/{p}/topics/x", "projects/{p}/schemas", "projects/{p}/schemas/"],
)
def test_rename_schema_wrong_declaration(api: Api, project: str, new_name: str) -> None:
    name = make_schema(api, project)
    r = api.put(f"/projects/{project}/schemas/{name}", {"name": new_name.format(p=project)})
    assert r.status_code == 400
    expect(r, 400, "wrong schema name declaration")
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 200


@pytest.mark.parametrize(
    "raw", [b"{}", b"", b"{bad", b"[]", b'{"other": 1}'], ids=["empty-object", "empty", "malformed", "array", "unknown"]
)
def test_update_schema_invalid_arguments(api: Api, project: str, raw: bytes) -> None:
    name = make_schema(api, project)
    before = api.ok("GET", f"/projects/{project}/schemas/{name}")
    r = api.put(f"/projects/{project}/schemas/{name}", raw=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    expect(r, 400, "Invalid Schema Arguments")
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == before


def test_update_unknown_schema(api: Api, project: str) -> None:
    r = api.put(f"/projects/{project}/schemas/{unique('nope')}", {"schema": JSON_SCHEMA})
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")


# ------------------------------------------------------------------ delete ------------------
def test_delete_schema_detaches_it_from_topics(api: Api, project: str, topic: str, sub: str) -> None:
    name = make_schema(api, project)
    other_topic = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{other_topic}", {"schema": ref(project, name)})
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, name)})
    assert publish_raw(api, project, topic, b64("not json")).status_code == 400

    r = api.delete(f"/projects/{project}/schemas/{name}")
    assert (r.status_code, r.content) == (200, b"")
    r = api.get(f"/projects/{project}/schemas/{name}")
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")
    assert api.ok("GET", f"/projects/{project}/schemas") == {"schemas": []}

    for t in (topic, other_topic):
        shown = api.ok("GET", f"/projects/{project}/topics/{t}")
        assert "schema" not in shown
        assert list(shown) == ["name", "created_on"]
    listed = api.ok("GET", f"/projects/{project}/topics")["topics"]
    assert all("schema" not in t for t in listed)

    # publishing is no longer validated
    ids = api.publish(project, topic, "not json", "{}")
    assert len(ids) == 2
    assert [m["message"]["data"] for m in api.pull(project, sub)] == [b64("not json"), b64("{}")]


def test_delete_unknown_schema(api: Api, project: str) -> None:
    r = api.delete(f"/projects/{project}/schemas/{unique('nope')}")
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")


def test_schema_can_be_created_again_after_delete(api: Api, project: str) -> None:
    name = make_schema(api, project)
    first = api.ok("GET", f"/projects/{project}/schemas/{name}")
    api.ok("DELETE", f"/projects/{project}/schemas/{name}")
    again = api.ok("POST", f"/projects/{project}/schemas/{name}", {"type": "avro", "schema": AVRO_SCHEMA})
    assert again["uuid"] != first["uuid"]
    assert again["type"] == "avro"


# ------------------------------------------------------------------ topics with schemas -----
def test_create_topic_with_schema(api: Api, project: str) -> None:
    schema = make_schema(api, project)
    topic = unique("topic")
    created = api.ok("PUT", f"/projects/{project}/topics/{topic}", {"schema": ref(project, schema)})
    assert created["name"] == f"/projects/{project}/topics/{topic}"
    assert created["schema"] == ref(project, schema)
    shown = api.ok("GET", f"/projects/{project}/topics/{topic}")
    assert shown == created
    assert list(shown) == ["name", "schema", "created_on"]
    plain = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{plain}")
    listed = {t["name"]: t for t in api.ok("GET", f"/projects/{project}/topics")["topics"]}
    assert listed[f"/projects/{project}/topics/{topic}"] == shown
    assert "schema" not in listed[f"/projects/{project}/topics/{plain}"]


def test_one_schema_on_many_topics(api: Api, project: str) -> None:
    schema = make_schema(api, project)
    topics = [unique("topic") for _ in range(3)]
    for t in topics:
        api.ok("PUT", f"/projects/{project}/topics/{t}", {"schema": ref(project, schema)})
    for t in topics:
        assert api.ok("GET", f"/projects/{project}/topics/{t}")["schema"] == ref(project, schema)


@pytest.mark.parametrize(
    "bad_ref", ["nope", "projects/{p}/schemas", "/projects/{p}/schemas/{s}", "projects/{p}/topics/{s}", "x/{p}/y/{s}"]
)
def test_create_topic_wrong_schema_declaration(api: Api, project: str, bad_ref: str) -> None:
    schema = make_schema(api, project)
    topic = unique("topic")
    r = api.put(f"/projects/{project}/topics/{topic}", {"schema": bad_ref.format(p=project, s=schema)})
    assert r.status_code == 400
    expect(r, 400, "wrong schema name declaration")
    assert api.get(f"/projects/{project}/topics/{topic}").status_code == 404


def test_create_topic_with_unknown_schema(api: Api, project: str) -> None:
    topic = unique("topic")
    r = api.put(f"/projects/{project}/topics/{topic}", {"schema": ref(project, unique("nope"))})
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")
    assert api.get(f"/projects/{project}/topics/{topic}").status_code == 404


def test_attach_and_detach_schema(api: Api, project: str, topic: str) -> None:
    schema = make_schema(api, project)
    r = api.post(f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    assert (r.status_code, r.content) == (200, b"")
    assert api.ok("GET", f"/projects/{project}/topics/{topic}")["schema"] == ref(project, schema)
    listed = {t["name"]: t for t in api.ok("GET", f"/projects/{project}/topics")["topics"]}
    assert listed[f"/projects/{project}/topics/{topic}"]["schema"] == ref(project, schema)

    r = api.post(f"/projects/{project}/topics/{topic}:detachSchema")
    assert (r.status_code, r.content) == (200, b"")
    assert "schema" not in api.ok("GET", f"/projects/{project}/topics/{topic}")
    assert api.get(f"/projects/{project}/schemas/{schema}").status_code == 200  # the schema stays

    # detaching a topic without a schema is fine
    r = api.post(f"/projects/{project}/topics/{topic}:detachSchema")
    assert (r.status_code, r.content) == (200, b"")


def test_attach_replaces_the_schema(api: Api, project: str, topic: str) -> None:
    first, second = make_schema(api, project), make_schema(api, project, "avro")
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, first)})
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, second)})
    assert api.ok("GET", f"/projects/{project}/topics/{topic}")["schema"] == ref(project, second)


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"schema": ""}'], ids=["no-body", "empty-object", "empty-schema"])
def test_attach_with_empty_body_detaches(api: Api, project: str, topic: str, raw: bytes) -> None:
    schema = make_schema(api, project)
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    r = api.post(
        f"/projects/{project}/topics/{topic}:attachSchema", raw=raw, headers={"Content-Type": "application/json"}
    )
    assert (r.status_code, r.content) == (200, b"")
    assert "schema" not in api.ok("GET", f"/projects/{project}/topics/{topic}")


def test_attach_errors(api: Api, project: str, topic: str) -> None:
    schema = make_schema(api, project)
    r = api.post(f"/projects/{project}/topics/{unique('nope')}:attachSchema", {"schema": ref(project, schema)})
    assert r.status_code == 404
    expect(r, 404, "Topic doesn't exist", "NOT_FOUND")
    r = api.post(f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, unique("nope"))})
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")
    r = api.post(f"/projects/{project}/topics/{topic}:attachSchema", {"schema": schema})
    assert r.status_code == 400
    expect(r, 400, "wrong schema name declaration")
    r = api.post(
        f"/projects/{project}/topics/{topic}:attachSchema", raw=b"{oops", headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    expect(r, 400, "Invalid Request Body", "BAD_REQUEST")
    assert "schema" not in api.ok("GET", f"/projects/{project}/topics/{topic}")


def test_detach_unknown_topic(api: Api, project: str) -> None:
    r = api.post(f"/projects/{project}/topics/{unique('nope')}:detachSchema")
    assert r.status_code == 404
    expect(r, 404, "Topic doesn't exist", "NOT_FOUND")


# ------------------------------------------------------------------ publish with a JSON schema
@pytest.fixture
def json_topic(api: Api, project: str, topic: str) -> str:
    schema = make_schema(api, project, "json")
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    return topic


def test_publish_valid_json_messages(api: Api, project: str, json_topic: str, sub: str) -> None:
    docs = [VALID_DOC, {"email": "b@example.org", "name": "bob"}]
    ids = api.publish(project, json_topic, *(json.dumps(d) for d in docs))
    assert len(ids) == 2
    assert int(ids[1]) > int(ids[0])
    pulled = api.pull(project, sub)
    assert [json.loads(base64.b64decode(m["message"]["data"])) for m in pulled] == docs


def test_publish_one_violation_refuses_the_whole_request(api: Api, project: str, json_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(
        api, project, json_topic, b64(json.dumps(VALID_DOC)), b64(json.dumps({"email": "x", "name": "y", "age": "old"}))
    )
    assert r.status_code == 400
    expect(r, 400, "Message 1 data is not valid,age: 'old' is not of type 'integer'")
    assert max_offset(api, project, sub) == before
    assert api.pull(project, sub) == []
    # the same valid message alone is stored, and moves the end
    ids = api.publish(project, json_topic, json.dumps(VALID_DOC))
    assert max_offset(api, project, sub) > before
    assert [m["message"]["messageId"] for m in api.pull(project, sub)] == ids


def test_publish_several_violations(api: Api, project: str, json_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, json_topic, b64(json.dumps({"age": "x"})))
    assert r.status_code == 400
    expect(
        r,
        400,
        "Message 0 data is not valid."
        "1)(root): 'email' is a required property."
        "2)(root): 'name' is a required property."
        "3)age: 'x' is not of type 'integer'.",
    )
    assert max_offset(api, project, sub) == before


def test_publish_names_the_first_bad_message(api: Api, project: str, json_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    good = b64(json.dumps(VALID_DOC))
    missing_name = b64(json.dumps({"email": "e"}))
    r = publish_raw(api, project, json_topic, good, good, missing_name, b64("not json"))
    assert r.status_code == 400
    expect(r, 400, "Message 2 data is not valid,(root): 'name' is a required property")
    assert max_offset(api, project, sub) == before
    assert api.pull(project, sub) == []


def test_publish_non_json_data(api: Api, project: str, json_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, json_topic, b64(json.dumps(VALID_DOC)), b64("{not json"))
    assert r.status_code == 400
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Message 1 data is not valid JSON format,"), error
    assert max_offset(api, project, sub) == before
    assert api.pull(project, sub) == []


def test_publish_non_base64_data_to_a_schema_topic(api: Api, project: str, json_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, json_topic, "%%%not base64%%%")
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("Message 0 is not in valid base64 encoding")
    assert max_offset(api, project, sub) == before


def test_detached_topic_accepts_anything(api: Api, project: str, json_topic: str, sub: str) -> None:
    api.ok("POST", f"/projects/{project}/topics/{json_topic}:detachSchema")
    assert len(api.publish(project, json_topic, "plain text")) == 1


# ------------------------------------------------------------------ publish with an Avro schema
@pytest.fixture
def avro_topic(api: Api, project: str, topic: str) -> str:
    schema = make_schema(api, project, "avro")
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    return topic


def test_publish_valid_avro(api: Api, project: str, avro_topic: str, sub: str) -> None:
    data = [avro_b64({"name": "alice", "age": 30}), avro_b64({"name": "bob", "age": 4})]
    r = publish_raw(api, project, avro_topic, *data)
    assert r.status_code == 200, r.text
    assert len(r.json()["messageIds"]) == 2
    assert [m["message"]["data"] for m in api.pull(project, sub)] == data


@pytest.mark.parametrize(
    "raw",
    [b"\x06ab", b"\x06abc", b"garbage that is no avro at all\xff\xff"],
    ids=["short", "no-int", "junk"],
)
def test_publish_invalid_avro(api: Api, project: str, avro_topic: str, sub: str, raw: bytes) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, avro_topic, b64(raw))
    assert r.status_code == 400
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Message 0 is not valid."), error
    assert max_offset(api, project, sub) == before


def test_publish_avro_batch_with_a_bad_message(api: Api, project: str, avro_topic: str, sub: str) -> None:
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, avro_topic, avro_b64({"name": "a", "age": 1}), b64(b"\x06ab"))
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("Message 1 is not valid."), r.text
    assert max_offset(api, project, sub) == before
    assert api.pull(project, sub) == []


# ------------------------------------------------------------------ :validate ---------------
def test_validate_json_document(api: Api, project: str) -> None:
    schema = make_schema(api, project, "json")
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", VALID_DOC)
    assert r.status_code == 200, r.text
    assert r.json() == {"message": "Message validated successfully"}


def test_validate_json_document_invalid(api: Api, project: str) -> None:
    schema = make_schema(api, project, "json")
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", {"email": "e"})
    assert r.status_code == 400
    expect(r, 400, "Message 0 data is not valid,(root): 'name' is a required property")
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", {"age": 1.5})
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("Message 0 data is not valid.1)")
    # base64 of a valid document is not the document: the body is the raw JSON itself
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", {"data": b64(json.dumps(VALID_DOC))})
    assert r.status_code == 400


def test_validate_avro(api: Api, project: str) -> None:
    schema = make_schema(api, project, "avro")
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", {"data": avro_b64({"name": "n", "age": 1})})
    assert r.status_code == 200, r.text
    assert r.json() == {"message": "Message validated successfully"}
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", {"data": b64(b"\x06ab")})
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("Message 0 is not valid.")


@pytest.mark.parametrize("payload", [{}, {"other": "x"}, {"data": 5}, [1]], ids=["empty", "other", "number", "list"])
def test_validate_avro_without_data(api: Api, project: str, payload: Any) -> None:
    schema = make_schema(api, project, "avro")
    r = api.post(f"/projects/{project}/schemas/{schema}:validate", payload)
    assert r.status_code == 400
    expect(r, 400, "Invalid Schema Payload Arguments")


@pytest.mark.parametrize("kind", ["json", "avro"])
@pytest.mark.parametrize("raw", [b"", b"{broken", b"   "], ids=["empty", "malformed", "blank"])
def test_validate_bad_request_body(api: Api, project: str, kind: str, raw: bytes) -> None:
    schema = make_schema(api, project, kind)
    r = api.post(
        f"/projects/{project}/schemas/{schema}:validate", raw=raw, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400
    expect(r, 400, "Invalid Request Body", "BAD_REQUEST")


def test_validate_unknown_schema(api: Api, project: str) -> None:
    r = api.post(f"/projects/{project}/schemas/{unique('nope')}:validate", VALID_DOC)
    assert r.status_code == 404
    expect(r, 404, "Schema doesn't exist", "NOT_FOUND")


# ------------------------------------------------------------------ roles -------------------
def member_token(api: Api, project: str, *roles: str) -> str:
    return str(api.new_user(projects=[{"project": project, "roles": list(roles)}])["token"])


def test_project_admin_manages_schemas(api: Api, project: str, topic: str) -> None:
    admin = api.as_(member_token(api, project, "project_admin"))
    name = unique("schema")
    created = admin.ok("POST", f"/projects/{project}/schemas/{name}", {"type": "json", "schema": JSON_SCHEMA})
    assert created["name"] == ref(project, name)
    assert admin.ok("GET", f"/projects/{project}/schemas/{name}") == created
    assert admin.ok("GET", f"/projects/{project}/schemas") == {"schemas": [created]}
    updated = admin.ok("PUT", f"/projects/{project}/schemas/{name}", {"schema": {"type": "object"}})
    assert updated["schema"] == {"type": "object"}
    assert admin.ok("POST", f"/projects/{project}/schemas/{name}:validate", {"any": 1}) == {
        "message": "Message validated successfully"
    }
    admin.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, name)})
    admin.ok("POST", f"/projects/{project}/topics/{topic}:detachSchema")
    admin.ok("DELETE", f"/projects/{project}/schemas/{name}")
    assert admin.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_project_admin_of_another_project_is_unauthorized(api: Api, project: str) -> None:
    other = api.new_project()
    stranger = api.as_(member_token(api, other, "project_admin"))
    name = make_schema(api, project)
    r = stranger.get(f"/projects/{project}/schemas/{name}")
    assert r.status_code == 401
    expect(r, 401, "Unauthorized", "UNAUTHORIZED")


@pytest.mark.parametrize("role", ["publisher", "consumer"])
def test_publisher_and_consumer_cannot_touch_schemas(api: Api, project: str, topic: str, role: str) -> None:
    name = make_schema(api, project)
    user = api.as_(member_token(api, project, role))
    attempts = [
        ("POST", f"/projects/{project}/schemas/{unique('schema')}", {"type": "json", "schema": JSON_SCHEMA}),
        ("GET", f"/projects/{project}/schemas", None),
        ("GET", f"/projects/{project}/schemas/{name}", None),
        ("PUT", f"/projects/{project}/schemas/{name}", {"schema": {"type": "object"}}),
        ("POST", f"/projects/{project}/schemas/{name}:validate", VALID_DOC),
        ("DELETE", f"/projects/{project}/schemas/{name}", None),
        ("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, name)}),
        ("POST", f"/projects/{project}/topics/{topic}:detachSchema", None),
    ]
    for method, path, payload in attempts:
        r = user.request(method, path, payload)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        expect(r, 403, "Access to this resource is forbidden", "FORBIDDEN")
    assert api.ok("GET", f"/projects/{project}/schemas/{name}")["schema"] == JSON_SCHEMA
    assert "schema" not in api.ok("GET", f"/projects/{project}/topics/{topic}")


def test_publisher_publishes_through_the_schema(api: Api, project: str, json_topic: str) -> None:
    user = api.new_user(projects=[{"project": project, "roles": ["publisher"]}])
    api.ok("POST", f"/projects/{project}/topics/{json_topic}:modifyAcl", {"authorized_users": [user["name"]]})
    publisher = api.as_(user["token"])
    assert len(publisher.publish(project, json_topic, json.dumps(VALID_DOC))) == 1
    r = publish_raw(publisher, project, json_topic, b64("{}"))
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("Message 0 data is not valid.1)")


# ------------------------------------------------------------------ Protocol Buffers --------
PROTO = """syntax = "proto3";
package ams.test;

message Person {
  string name = 1;
  int32 age = 2;
  repeated string tags = 3;
  enum Kind { KIND_UNSPECIFIED = 0; HUMAN = 1; }
  Kind kind = 4;
  message Address { string city = 1; }
  Address home = 5;
}
"""
#: Person{name: "alice", age: 30, tags: ["a"], kind: HUMAN, home: {city: "x"}}, written out by hand
PERSON = b"\x0a\x05alice" + b"\x10\x1e" + b"\x1a\x01a" + b"\x20\x01" + b"\x2a\x03\x0a\x01x"
PERSON_JSON = {"name": "alice", "age": 30, "tags": ["a"], "kind": "HUMAN", "home": {"city": "x"}}


def make_proto_schema(api: Api, project: str, text: str = PROTO) -> str:
    name = unique("schema")
    api.ok("POST", f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": text})
    return name


def proto_topic_with(api: Api, project: str, schema: str, encoding: str | None = None) -> str:
    topic = unique("topic")
    body = {"schema": ref(project, schema)} | ({"schemaEncoding": encoding} if encoding else {})
    api.ok("PUT", f"/projects/{project}/topics/{topic}", body)
    return topic


def sub_on(api: Api, project: str, topic: str) -> str:
    name = unique("sub")
    api.ok("PUT", f"/projects/{project}/subscriptions/{name}", {"topic": f"projects/{project}/topics/{topic}"})
    return name


@pytest.mark.parametrize("given", ["protobuf", "PROTOBUF", "Protobuf"])
def test_create_protobuf_schema(api: Api, project: str, given: str) -> None:
    name = unique("schema")
    body = api.ok("POST", f"/projects/{project}/schemas/{name}", {"type": given, "schema": PROTO})
    assert set(body) == {"uuid", "name", "type", "schema"}
    assert UUID.match(body["uuid"])
    assert (body["name"], body["type"], body["schema"]) == (ref(project, name), "protobuf", PROTO)
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body
    assert body in api.ok("GET", f"/projects/{project}/schemas")["schemas"]


@pytest.mark.parametrize(
    ("definition", "says"),
    [
        ('syntax = "proto3";\nmessage A {\n  strin name = 1;\n}\n', 'schema.proto:3:3: "strin" is not defined.'),
        ('syntax = "proto3"; message A { int32 a = 1; int32 b = 1; }', "Field number 1 has already been used"),
        ('syntax = "proto3"; message A {', "schema.proto:1:31: Reached end of input in message definition"),
        ('syntax = "proto9"; message A {}', 'Unrecognized syntax identifier "proto9"'),
    ],
    ids=["undefined-type", "field-number-twice", "truncated", "unknown-syntax"],
)
def test_a_protobuf_schema_that_does_not_compile_is_refused_with_protocs_text(
    api: Api, project: str, definition: str, says: str
) -> None:
    name = unique("schema")
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": definition})
    assert r.status_code == 400, r.text
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert says in error["message"], error
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


@pytest.mark.parametrize(
    ("definition", "says"),
    [
        ({"message": "A"}, "a protobuf schema is the .proto source text, as a JSON string"),
        ('syntax = "proto3";', "exactly one top-level type, a message"),
        ('syntax = "proto3"; message A {} message B {}', "this one has 2 messages"),
        ('syntax = "proto3"; message A { E e = 1; } enum E { Z = 0; }', "1 enums"),
        ('syntax = "proto3"; message A {} service S { rpc M(A) returns (A); }', "1 services"),
    ],
    ids=["not-text", "no-message", "two-messages", "top-level-enum", "service"],
)
def test_a_protobuf_schema_defines_one_top_level_message(api: Api, project: str, definition: Any, says: str) -> None:
    name = unique("schema")
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": definition})
    assert r.status_code == 400, r.text
    assert says in error_of(r)["message"], r.text
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


@pytest.mark.parametrize(
    "imported",
    [
        "google/protobuf/timestamp.proto",  # even the well-known types: Pub/Sub refuses imports too
        "/etc/passwd",
        "../../../../etc/hostname",
        "schema.proto",  # itself
        "proc/self/environ",
    ],
)
def test_a_protobuf_schema_imports_nothing(api: Api, project: str, imported: str) -> None:
    name = unique("schema")
    definition = f'syntax = "proto3";\nimport "{imported}";\nmessage A {{ string a = 1; }}\n'
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": definition})
    assert r.status_code == 400, r.text
    message = error_of(r)["message"]
    assert "schema.proto:2:1: " in message, message
    assert "root:" not in message  # nothing of any file shows
    assert "HOSTNAME" not in message
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_a_huge_protobuf_schema_is_refused_before_it_is_compiled(api: Api, project: str) -> None:
    name = unique("schema")
    definition = 'syntax = "proto3";\nmessage A { string a = 1; }\n' + "// padding\n" * 30_000
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": definition})
    assert r.status_code == 400
    expect(r, 400, f"a protobuf schema is at most 307200 bytes long (this one: {len(definition)})")
    assert api.get(f"/projects/{project}/schemas/{name}").status_code == 404


def test_a_deeply_nested_protobuf_schema_is_refused(api: Api, project: str) -> None:
    name = unique("schema")
    definition = 'syntax = "proto3";\n' + "message A { " * 5000 + "}" * 5000
    r = api.post(f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": definition})
    assert r.status_code == 400
    assert "Reached maximum recursion limit for nested messages" in error_of(r)["message"]


def test_update_a_json_schema_to_protobuf(api: Api, project: str) -> None:
    name = make_schema(api, project, "json")
    created = api.ok("GET", f"/projects/{project}/schemas/{name}")
    body = api.ok("PUT", f"/projects/{project}/schemas/{name}", {"type": "protobuf", "schema": PROTO})
    assert body == {**created, "type": "protobuf", "schema": PROTO}
    r = api.put(f"/projects/{project}/schemas/{name}", {"schema": 'syntax = "proto3"; message {'})
    assert r.status_code == 400
    assert error_of(r)["message"].startswith("schema.proto:1:")
    assert api.ok("GET", f"/projects/{project}/schemas/{name}") == body


def test_publish_protobuf_binary(api: Api, project: str) -> None:
    topic = proto_topic_with(api, project, make_proto_schema(api, project))
    assert "schemaEncoding" not in api.ok("GET", f"/projects/{project}/topics/{topic}")
    sub = sub_on(api, project, topic)
    data = [b64(PERSON), "", b64(b"\x0a\x03bob")]  # no data: a Person of defaults
    messages = [{"data": d, "attributes": {"n": str(n)}} for n, d in enumerate(data)]
    r = api.post(f"/projects/{project}/topics/{topic}:publish", {"messages": messages})
    assert r.status_code == 200, r.text
    assert [m["message"].get("data", "") for m in api.pull(project, sub)] == data


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (PERSON + b"\x48\x01", "it has fields that the schema does not define"),  # field 9
        (b"\x2a\x02\x10\x01", "it has fields that the schema does not define"),  # field 2 of home
        (b"\x08\x05", "it has fields that the schema does not define"),  # name (1) as a varint
        (b"\x0a\x05ali", "Message 0 is not valid.Error parsing message"),  # truncated
        (b"\x0a\x01\xff", "Message 0 is not valid.Error parsing message"),  # a string not UTF-8
        (b"\xff\xff\xff", "Message 0 is not valid.Error parsing message"),
        (json.dumps(PERSON_JSON).encode(), "Message 0 is not valid."),  # JSON to a binary topic
    ],
    ids=["unknown-field", "unknown-nested-field", "wrong-wire-type", "truncated", "bad-utf8", "junk", "json"],
)
def test_publish_invalid_protobuf_binary(api: Api, project: str, raw: bytes, says: str) -> None:
    topic = proto_topic_with(api, project, make_proto_schema(api, project), "BINARY")
    assert api.ok("GET", f"/projects/{project}/topics/{topic}")["schemaEncoding"] == "BINARY"
    sub = sub_on(api, project, topic)
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, topic, b64(PERSON), b64(raw))
    assert r.status_code == 400
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith(says.replace("Message 0", "Message 1")) or says in error["message"], error
    assert error["message"].startswith("Message 1 is not valid."), error
    assert max_offset(api, project, sub) == before
    assert api.pull(project, sub) == []


def test_proto2_required_fields_are_required(api: Api, project: str) -> None:
    definition = 'syntax = "proto2"; message R { required string id = 1; optional int32 n = 2; }'
    topic = proto_topic_with(api, project, make_proto_schema(api, project, definition))
    assert publish_raw(api, project, topic, b64(b"\x0a\x01x")).status_code == 200
    r = publish_raw(api, project, topic, b64(b"\x10\x01"))
    expect(r, 400, "Message 0 is not valid.missing required fields: id")


def test_publish_protobuf_json(api: Api, project: str) -> None:
    topic = proto_topic_with(api, project, make_proto_schema(api, project), "json")
    shown = api.ok("GET", f"/projects/{project}/topics/{topic}")
    assert list(shown) == ["name", "schema", "schemaEncoding", "created_on"]
    assert shown["schemaEncoding"] == "JSON"
    listed = {t["name"]: t for t in api.ok("GET", f"/projects/{project}/topics")["topics"]}
    assert listed[shown["name"]] == shown
    sub = sub_on(api, project, topic)
    data = [b64(json.dumps(PERSON_JSON)), b64("{}"), b64('{"name": "bob", "age": "7"}')]
    r = publish_raw(api, project, topic, *data)
    assert r.status_code == 200, r.text
    assert [m["message"]["data"] for m in api.pull(project, sub)] == data


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ('{"name": "a", "nickname": "b"}', 'has no field named "nickname"'),
        ('{"age": "old"}', "Failed to parse age field"),
        ('{"kind": "ALIEN"}', "Failed to parse kind field"),
        ("{not json", "Failed to load JSON"),
        (PERSON, "Message 0 is not valid."),  # binary to a JSON topic
    ],
    ids=["unknown-field", "wrong-type", "unknown-enum", "not-json", "binary"],
)
def test_publish_invalid_protobuf_json(api: Api, project: str, document: str | bytes, says: str) -> None:
    topic = proto_topic_with(api, project, make_proto_schema(api, project), "JSON")
    sub = sub_on(api, project, topic)
    before = max_offset(api, project, sub)
    r = publish_raw(api, project, topic, b64(document))
    assert r.status_code == 400
    error = error_of(r)
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("Message 0 is not valid."), error
    assert says in error["message"], error
    assert max_offset(api, project, sub) == before


def test_publish_avro_json(api: Api, project: str) -> None:
    topic = proto_topic_with(api, project, make_schema(api, project, "avro"), "JSON")
    sub = sub_on(api, project, topic)
    good = b64(json.dumps({"name": "alice", "age": 30}))
    assert publish_raw(api, project, topic, good).status_code == 200
    for document, says in [
        ({"name": "alice"}, "(root): the field 'age' is missing"),
        ({"name": "alice", "age": "30"}, 'age: expected int, got "30"'),
        ({"name": "alice", "age": 2**31}, "age: expected int, got 2147483648"),
        ({"name": "alice", "age": 3, "extra": 1}, "(root): 'extra' is not a field of Person"),
    ]:
        r = publish_raw(api, project, topic, good, b64(json.dumps(document)))
        expect(r, 400, f"Message 1 is not valid.{says}")
    r = publish_raw(api, project, topic, avro_b64({"name": "alice", "age": 30}))  # binary to a JSON topic
    assert error_of(r)["message"].startswith("Message 0 is not valid.not JSON: ")
    assert [m["message"]["data"] for m in api.pull(project, sub)] == [good]


def test_an_avro_topic_in_binary_takes_avro_binary(api: Api, project: str) -> None:
    topic = proto_topic_with(api, project, make_schema(api, project, "avro"), "BINARY")
    assert publish_raw(api, project, topic, avro_b64({"name": "n", "age": 1})).status_code == 200
    r = publish_raw(api, project, topic, b64(json.dumps({"name": "n", "age": 1})))
    assert error_of(r)["message"].startswith("Message 0 is not valid.")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"schemaEncoding": "XML"}, "Schema encoding can only be 'JSON' or 'BINARY'"),
        ({"schemaEncoding": "JSON", "schema": ""}, "schemaEncoding needs a schema"),
    ],
    ids=["unknown", "no-schema"],
)
def test_create_topic_with_a_bad_schema_encoding(api: Api, project: str, body: dict[str, str], message: str) -> None:
    schema = make_proto_schema(api, project)
    body = {"schema": ref(project, schema)} | body
    topic = unique("topic")
    r = api.put(f"/projects/{project}/topics/{topic}", {k: v for k, v in body.items() if v})
    expect(r, 400, message)
    assert api.get(f"/projects/{project}/topics/{topic}").status_code == 404


def test_a_json_schema_has_no_binary_encoding(api: Api, project: str) -> None:
    schema = make_schema(api, project, "json")
    topic = unique("topic")
    r = api.put(f"/projects/{project}/topics/{topic}", {"schema": ref(project, schema), "schemaEncoding": "BINARY"})
    expect(r, 400, "The messages of a JSON schema are JSON: schemaEncoding BINARY does not apply")
    assert api.get(f"/projects/{project}/topics/{topic}").status_code == 404
    api.ok("PUT", f"/projects/{project}/topics/{topic}", {"schema": ref(project, schema), "schemaEncoding": "JSON"})
    assert len(api.publish(project, topic, json.dumps(VALID_DOC))) == 1


def test_attach_with_an_encoding_detach_and_delete_forget_it(api: Api, project: str, topic: str) -> None:
    schema = make_proto_schema(api, project)
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    assert "schemaEncoding" not in api.ok("GET", f"/projects/{project}/topics/{topic}")
    attach = {"schema": ref(project, schema), "schemaEncoding": "JSON"}
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", attach)
    assert api.ok("GET", f"/projects/{project}/topics/{topic}")["schemaEncoding"] == "JSON"
    assert len(api.publish(project, topic, json.dumps(PERSON_JSON))) == 1
    r = api.post(f"/projects/{project}/topics/{topic}:attachSchema", {"schemaEncoding": "JSON"})
    expect(r, 400, "schemaEncoding needs a schema")

    api.ok("POST", f"/projects/{project}/topics/{topic}:detachSchema")
    assert list(api.ok("GET", f"/projects/{project}/topics/{topic}")) == ["name", "created_on"]
    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", {"schema": ref(project, schema)})
    assert "schemaEncoding" not in api.ok("GET", f"/projects/{project}/topics/{topic}")  # binary again

    api.ok("POST", f"/projects/{project}/topics/{topic}:attachSchema", attach)
    api.ok("DELETE", f"/projects/{project}/schemas/{schema}")
    assert list(api.ok("GET", f"/projects/{project}/topics/{topic}")) == ["name", "created_on"]


def test_validate_protobuf(api: Api, project: str) -> None:
    schema = make_proto_schema(api, project)
    url = f"/projects/{project}/schemas/{schema}:validate"
    for payload in (
        {"data": b64(PERSON)},
        {"data": b64(PERSON), "encoding": "BINARY"},
        {"data": b64(json.dumps(PERSON_JSON)), "encoding": "json"},
    ):
        assert api.ok("POST", url, payload) == {"message": "Message validated successfully"}
    r = api.post(url, {"data": b64(PERSON + b"\x48\x01")})
    expect(r, 400, "Message 0 is not valid.it has fields that the schema does not define")
    r = api.post(url, {"data": b64(PERSON), "encoding": "JSON"})
    assert error_of(r)["message"].startswith("Message 0 is not valid.")
    r = api.post(url, {"data": b64(PERSON), "encoding": "TEXT"})
    expect(r, 400, "Schema encoding can only be 'JSON' or 'BINARY'")
    r = api.post(url, {"data": "%%%"})
    assert error_of(r)["message"].startswith("Message 0 is not in valid base64 encoding")
    r = api.post(url, PERSON_JSON)
    expect(r, 400, "Invalid Schema Payload Arguments")


def test_validate_avro_json(api: Api, project: str) -> None:
    schema = make_schema(api, project, "avro")
    url = f"/projects/{project}/schemas/{schema}:validate"
    payload = {"data": b64(json.dumps({"name": "n", "age": 1})), "encoding": "JSON"}
    assert api.ok("POST", url, payload) == {"message": "Message validated successfully"}
    r = api.post(url, {"data": b64(json.dumps({"name": "n"})), "encoding": "JSON"})
    expect(r, 400, "Message 0 is not valid.(root): the field 'age' is missing")
