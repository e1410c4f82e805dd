"""The schema rules (ams_app/service/schema_check.py): what compiles, and which messages each type
and encoding takes (docs/compatibility.md, "Schemas"). Pure functions: no server, no store."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import fastavro
import pytest

from ams_app.errors import AmsError
from ams_app.service import schema_check
from ams_app.service.schema_check import compile_schema, validate_message

PROTO = """syntax = "proto3";
package t;
message Event {
  string id = 1;
  sint64 at = 2;
  map<string, int32> counts = 3;
  oneof body { string text = 4; bytes blob = 5; }
  message Tag { string key = 1; }
  repeated Tag tags = 6;
}
"""


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(AmsError) as caught:
        call(*args)
    assert (caught.value.code, caught.value.status) == (400, "INVALID_ARGUMENT"), caught.value.message
    return caught.value.message


def b64(raw: bytes | str) -> str:
    return base64.b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


@pytest.fixture(scope="module")
def event() -> schema_check.Compiled:
    return compile_schema("protobuf", PROTO)


# --- types and encodings --------------------------------------------------------------------------
def test_the_types_and_encodings_in_any_case() -> None:
    assert [schema_check.check_type(t) for t in ("JSON", "avro", "ProtoBuf")] == ["json", "avro", "protobuf"]
    assert refusal(schema_check.check_type, "proto") == "Schema type can only be 'json', 'avro' or 'protobuf'"
    assert [schema_check.check_encoding(e) for e in ("json", "BINARY")] == ["JSON", "BINARY"]
    for bad in ("", "TEXT", None, 1):
        assert refusal(schema_check.check_encoding, bad) == "Schema encoding can only be 'JSON' or 'BINARY'"


# --- compiling a protobuf schema ------------------------------------------------------------------
def test_a_protobuf_schema_compiles_to_its_one_message_and_is_cached(event: schema_check.Compiled) -> None:
    assert event.type == "protobuf"
    assert event.proto_class is not None
    assert event.proto_class.DESCRIPTOR.full_name == "t.Event"
    assert compile_schema("protobuf", PROTO) is event  # the same text: the same compiled schema
    unpackaged = compile_schema("protobuf", 'edition = "2023"; message M { string a = 1; }')
    assert unpackaged.proto_class is not None
    assert unpackaged.proto_class.DESCRIPTOR.full_name == "M"


def test_each_protobuf_schema_has_a_pool_of_its_own() -> None:
    """Two schemas may define the same message name, differently."""
    first = compile_schema("protobuf", 'syntax = "proto3"; message Same { string a = 1; }')
    second = compile_schema("protobuf", 'syntax = "proto3"; message Same { int64 a = 1; }')
    assert first.proto_class is not None
    assert second.proto_class is not None
    validate_message(first, 0, b64(b"\x0a\x01x"))
    assert "not define" in refusal(validate_message, second, 0, b64(b"\x0a\x01x"))  # a wrong wire type


def test_protocs_errors_say_where_counting_from_one() -> None:
    message = refusal(compile_schema, "protobuf", 'syntax = "proto3";\nmessage A {\n  strin a = 1;\n}\n')
    assert message == 'schema.proto:3:3: "strin" is not defined.'


def test_protocs_errors_are_quoted_five_at_most() -> None:
    fields = "".join(f"  nope{n} f{n} = {n + 1};\n" for n in range(8))
    message = refusal(compile_schema, "protobuf", f'syntax = "proto3";\nmessage A {{\n{fields}}}\n')
    assert message.count("is not defined.") == 5
    assert message.endswith("; (3 more)")


def test_protoc_warnings_stay_inside_and_the_runtime_has_the_last_word() -> None:
    """A JSON-name clash is only a warning of protoc's in proto2 (no Python warning escapes:
    pytest would fail on it), but the protobuf runtime refuses it: so does the schema."""
    definition = 'syntax = "proto2"; message A { optional int32 a_b = 1; optional int32 aB = 2; }'
    assert "duplicate json_name (aB)" in refusal(compile_schema, "protobuf", definition)


@pytest.mark.parametrize(
    "imported", ["google/protobuf/any.proto", "google/protobuf/descriptor.proto", "/etc/passwd", "../x.proto"]
)
def test_a_protobuf_schema_imports_nothing(imported: str) -> None:
    message = refusal(compile_schema, "protobuf", f'syntax = "proto3"; import "{imported}"; message A {{}}')
    assert f'Import "{imported}" was not found or had errors.' in message


@pytest.mark.parametrize(
    "definition",
    [
        'syntax = "proto3";',
        'syntax = "proto3"; message A {} message B {}',
        'syntax = "proto3"; enum E { Z = 0; } message A { E e = 1; }',
        'syntax = "proto2"; message A { extensions 10 to 20; } extend A { optional int32 x = 10; }',
        'syntax = "proto3"; message A {} service S {}',
    ],
    ids=["none", "two", "enum", "extension", "service"],
)
def test_a_protobuf_schema_has_one_top_level_definition_a_message(definition: str) -> None:
    assert "defines exactly one top-level type, a message" in refusal(compile_schema, "protobuf", definition)


def test_the_size_of_a_protobuf_schema_is_bounded() -> None:
    head = 'syntax = "proto3"; message A {}\n'
    fits = head + "/" * (schema_check.MAX_PROTO_BYTES - len(head))
    assert compile_schema("protobuf", fits).proto_class is not None
    message = refusal(compile_schema, "protobuf", fits + "/")
    assert message == f"a protobuf schema is at most 307200 bytes long (this one: {len(fits) + 1})"
    multibyte = head + "// " + "é" * (schema_check.MAX_PROTO_BYTES // 2)  # counted in UTF-8 bytes
    assert refusal(compile_schema, "protobuf", multibyte).startswith("a protobuf schema is at most")


@pytest.mark.parametrize("definition", [{"a": 1}, ["message A {}"], 5, None])
def test_a_protobuf_schema_is_text(definition: Any) -> None:
    assert refusal(compile_schema, "protobuf", definition) == (
        "a protobuf schema is the .proto source text, as a JSON string"
    )


def test_nesting_is_bounded_by_protoc() -> None:
    message = refusal(compile_schema, "protobuf", "message A { " * 200 + "}" * 200)
    assert "Reached maximum recursion limit for nested messages." in message


# --- protobuf messages ----------------------------------------------------------------------------
def event_bytes(**fields: Any) -> bytes:
    compiled = compile_schema("protobuf", PROTO)
    assert compiled.proto_class is not None
    return bytes(compiled.proto_class(**fields).SerializeToString())


def test_binary_protobuf_messages(event: schema_check.Compiled) -> None:
    for raw in (
        b"",
        event_bytes(id="x", at=-5, counts={"a": 1}, text="hi"),
        event_bytes(blob=b"\x00\xff", tags=[{"key": "k"}]),
    ):
        validate_message(event, 0, b64(raw))
        validate_message(event, 0, b64(raw), "BINARY")  # "" is BINARY for protobuf


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (event_bytes(id="x") + b"\x78\x01", "it has fields that the schema does not define"),  # field 15
        (b"\x32\x02\x10\x01", "it has fields that the schema does not define"),  # in a Tag
        (b"\x1a\x07\x0a\x01a\x18\x01\x10\x02", "it has fields that the schema does not define"),  # a map entry
        (b"\x0a\x02x", "Error parsing message"),  # truncated
        (b"\x0a\x01\xc3", "Error parsing message"),  # a proto3 string that is not UTF-8
        (b"\x07", "Error parsing message"),  # field 0
    ],
    ids=["unknown-field", "unknown-in-nested", "unknown-in-map-entry", "truncated", "bad-utf8", "field-zero"],
)
def test_binary_protobuf_messages_refused(event: schema_check.Compiled, raw: bytes, reason: str) -> None:
    message = refusal(validate_message, event, 3, b64(raw))
    assert message.startswith("Message 3 is not valid.")
    assert reason in message


def test_json_protobuf_messages(event: schema_check.Compiled) -> None:
    for document in (
        {},
        {"id": "x", "at": "-5", "counts": {"a": 1}, "text": "hi"},
        {"blob": "AP8=", "tags": [{"key": "k"}]},
        {"id": "x", "tags": []},
    ):
        validate_message(event, 0, b64(json.dumps(document)), "JSON")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ('{"idd": "x"}', 'has no field named "idd"'),
        ('{"tags": [{"key": "k", "value": 1}]}', 'has no field named "value"'),
        ('{"at": 1.5}', "Failed to parse at field"),
        ('{"text": "a", "blob": "AA=="}', "oneof"),
        ("[]", "expected a JSON object"),
        (' "x"', "expected a JSON object"),
        ("{", "Failed to load JSON"),
        (b"\xff", "codec can't decode"),
        ("[" * 5000 + "]" * 5000, "Message 0 is not valid."),
    ],
    ids=[
        "unknown",
        "unknown-nested",
        "wrong-type",
        "two-of-a-oneof",
        "array",
        "string",
        "truncated",
        "not-utf8",
        "deep",
    ],
)
def test_json_protobuf_messages_refused(event: schema_check.Compiled, data: str | bytes, reason: str) -> None:
    message = refusal(validate_message, event, 0, b64(data), "JSON")
    assert message.startswith("Message 0 is not valid.")
    assert reason in message, message


def test_deeply_nested_protobuf_messages_are_refused_in_both_encodings() -> None:
    compiled = compile_schema("protobuf", 'syntax = "proto3"; message N { N next = 1; int32 v = 2; }')
    validate_message(compiled, 0, b64(b"\x0a\x02\x10\x01"))  # N{next: N{v: 1}}
    deep = b"\x10\x01"
    for _ in range(3000):  # protobuf's recursion limit is 100
        size = len(deep)
        varint = bytearray()
        while True:
            byte, size = size & 0x7F, size >> 7
            varint.append(byte | (0x80 if size else 0))
            if not size:
                break
        deep = b"\x0a" + bytes(varint) + deep
    assert refusal(validate_message, compiled, 0, b64(deep)).startswith("Message 0 is not valid.")
    deep_json = '{"next": ' * 3000 + "{}" + "}" * 3000
    assert refusal(validate_message, compiled, 0, b64(deep_json), "JSON").startswith("Message 0 is not valid.")


def test_proto2_required_fields_in_both_encodings() -> None:
    compiled = compile_schema("protobuf", 'syntax = "proto2"; message R { required int32 a = 1; optional R r = 2; }')
    validate_message(compiled, 0, b64(b"\x08\x01"))
    validate_message(compiled, 0, b64('{"a": 1}'), "JSON")
    reason = "Message 0 is not valid.missing required fields: "
    assert refusal(validate_message, compiled, 0, b64(b"")) == reason + "a"
    assert refusal(validate_message, compiled, 0, b64(b"\x08\x01\x12\x00")) == reason + "r.a"
    assert refusal(validate_message, compiled, 0, b64('{"r": {"a": 2}}'), "JSON") == reason + "a"


def test_a_proto2_enum_value_the_schema_lacks_is_refused() -> None:
    """proto2 enums are closed: an unknown value is an unknown field."""
    compiled = compile_schema("protobuf", 'syntax = "proto2"; message R { enum E { A = 0; } optional E e = 1; }')
    validate_message(compiled, 0, b64(b"\x08\x00"))
    assert "does not define" in refusal(validate_message, compiled, 0, b64(b"\x08\x05"))


# --- Avro in JSON ----------------------------------------------------------------------------------
AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "ams",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "value", "type": ["null", "double"]},
        {"name": "unit", "type": {"type": "enum", "name": "Unit", "symbols": ["C", "F"]}},
        {"name": "raw", "type": "bytes"},
        {"name": "tag", "type": {"type": "fixed", "name": "Tag", "size": 2}},
        {"name": "labels", "type": {"type": "map", "values": "string"}},
        {"name": "history", "type": {"type": "array", "items": "Unit"}},
        {"name": "next", "type": ["null", "Reading"]},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
    ],
}
READING: dict[str, Any] = {
    "id": 2**40,
    "value": {"double": 1.5},
    "unit": "C",
    "raw": "\u00ff\u0000a",
    "tag": "ab",
    "labels": {"site": "x"},
    "history": ["C", "F"],
    "next": None,
    "day": 19000,
    "ok": True,
    "ratio": 1,
}


@pytest.fixture(scope="module")
def reading() -> schema_check.Compiled:
    return compile_schema("avro", AVRO)


def test_avro_json_messages(reading: schema_check.Compiled) -> None:
    validate_message(reading, 0, b64(json.dumps(READING)), "JSON")
    nested = READING | {"next": {"ams.Reading": READING | {"value": None}}}
    validate_message(reading, 0, b64(json.dumps(nested)), "JSON")
    validate_message(compile_schema("avro", "string"), 0, b64('"a"'), "JSON")
    validate_message(compile_schema("avro", ["null", "int"]), 0, b64('{"int": 3}'), "JSON")


def test_avro_json_is_what_fastavro_writes(reading: schema_check.Compiled) -> None:
    parsed = fastavro.parse_schema(AVRO)
    records = list(fastavro.json_reader(io.StringIO(json.dumps(READING)), parsed))
    out = io.StringIO()
    fastavro.json_writer(out, parsed, records)
    assert json.loads(out.getvalue()) == READING
    validate_message(reading, 0, b64(out.getvalue()), "JSON")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"id": "1"}, 'id: expected long, got "1"'),
        ({"id": 2**63}, "id: expected long, got 9223372036854775808"),
        ({"id": True}, "id: expected long, got true"),
        ({"value": 1.5}, 'value: expected null or {"<type name>": value} (a union), got 1.5'),
        ({"value": {"float": 1.5}}, "value: expected one of null, double"),
        ({"unit": "K"}, "unit: expected one of the symbols C, F"),
        ({"raw": "\u0100"}, "raw: expected bytes"),
        ({"tag": "abc"}, "tag: expected 2 bytes"),
        ({"labels": {"site": 1}}, "labels['site']: expected string, got 1"),
        ({"history": ["C", "X"]}, "history[1]: expected one of the symbols C, F"),
        ({"next": {"ams.Reading": {"id": 1}}}, "next: the field 'value' is missing"),
        ({"ok": 1}, "ok: expected boolean, got 1"),
        ({"ratio": "1"}, 'ratio: expected float, got "1"'),
        ({"extra": 1}, "(root): 'extra' is not a field of ams.Reading"),
    ],
)
def test_avro_json_messages_refused(reading: schema_check.Compiled, change: dict[str, Any], reason: str) -> None:
    message = refusal(validate_message, reading, 1, b64(json.dumps(READING | change)), "JSON")
    assert message.startswith(f"Message 1 is not valid.{reason}"), message


def test_avro_json_missing_field_and_bad_json(reading: schema_check.Compiled) -> None:
    partial = {k: v for k, v in READING.items() if k != "value"}
    assert refusal(validate_message, reading, 0, b64(json.dumps(partial)), "JSON") == (
        "Message 0 is not valid.(root): the field 'value' is missing"
    )
    assert refusal(validate_message, reading, 0, b64("{"), "JSON").startswith("Message 0 is not valid.not JSON: ")
    deep = compile_schema("avro", {"type": "array", "items": ["null", {"type": "array", "items": "int"}]})
    assert refusal(validate_message, deep, 0, b64("[" * 3000 + "]" * 3000), "JSON").startswith(
        "Message 0 is not valid."
    )


def test_avro_binary_is_the_default_and_binary_encoding() -> None:
    compiled = compile_schema("avro", {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    for encoding in ("", "BINARY"):
        validate_message(compiled, 0, b64(b"\x02"), encoding)
        assert refusal(validate_message, compiled, 0, b64(b"\x02\x00"), encoding) == (
            "Message 0 is not valid.1 trailing bytes"
        )


# --- JSON schemas ----------------------------------------------------------------------------------
def test_a_json_schemas_messages_are_json_documents_whatever_the_encoding() -> None:
    compiled = compile_schema("json", {"type": "object", "required": ["a"]})
    for encoding in ("", "JSON", "BINARY"):
        validate_message(compiled, 0, b64('{"a": 1}'), encoding)
        assert refusal(validate_message, compiled, 0, b64("{}"), encoding).startswith("Message 0 data is not valid,")


def test_an_unknown_encoding_is_the_callers_bug() -> None:
    with pytest.raises(AmsError) as caught:
        validate_message(compile_schema("json", {}), 0, b64("{}"), "XML")
    assert caught.value.code == 500
