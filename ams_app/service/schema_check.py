"""Message schemas: JSON Schema (jsonschema), Avro (fastavro) and Protocol Buffers (protoc, from
grpcio-tools, and the protobuf runtime). Pure functions, apart from the scratch directory protoc
reads a definition from (docs/compatibility.md, "Schemas")."""

from __future__ import annotations

import ast
import base64
import binascii
import functools
import io
import json
import tempfile
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import fastavro
from fastavro.schema import UnknownType
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from google.protobuf.message import Message
from grpc_tools import _protoc_compiler
from jsonschema import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from ams_app.errors import AmsError

TYPES = ("json", "avro", "protobuf")
#: How a topic's messages are encoded against its schema (Pub/Sub's Encoding); "" means the
#: type's own: a JSON document for json, binary for avro and protobuf.
ENCODINGS = ("JSON", "BINARY")
#: The largest .proto definition, in bytes of UTF-8 (Pub/Sub's limit of a schema definition).
MAX_PROTO_BYTES = 300 * 1024
#: protoc's errors quoted in a refusal, at most (the first one usually says it; the rest follow from it).
MAX_PROTOC_ERRORS = 5
#: The name the definition has inside protoc's scratch directory (and so in its error texts).
PROTO_FILE = "schema.proto"

MessageClass: TypeAlias = type[Message]

_PROTOC_LOCK = threading.Lock()  # protoc's warnings are caught through the process-wide warnings filters


@dataclass(frozen=True)
class Compiled:
    type: str
    json_validator: Validator | None = None
    avro_schema: Any = None
    avro_names: Mapping[str, Any] | None = None  # the Avro schema's named types, by full name
    proto_class: MessageClass | None = None  # the one top-level message of a protobuf schema


def check_type(kind: Any) -> str:
    if not isinstance(kind, str) or kind.lower() not in TYPES:
        raise AmsError.invalid_data("Schema type can only be 'json', 'avro' or 'protobuf'")
    return kind.lower()


def check_encoding(encoding: Any) -> str:
    """A schemaEncoding as a client gave it: "JSON" or "BINARY" (in any case)."""
    if not isinstance(encoding, str) or encoding.upper() not in ENCODINGS:
        raise AmsError.invalid_data("Schema encoding can only be 'JSON' or 'BINARY'")
    return encoding.upper()


def compile_schema(kind: str, schema: Any) -> Compiled:
    """Compile a schema; a schema that does not compile is a 400 with the compiler's text."""
    return _compile(kind, json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=256)
def _compile(kind: str, text: str) -> Compiled:
    schema = json.loads(text)
    if kind == "json":
        if not isinstance(schema, dict):
            raise AmsError.invalid_data("a JSON schema must be an object")
        cls = validator_for(schema)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise AmsError.invalid_data(_json_error_text(exc)) from exc
        return Compiled(kind, json_validator=cls(schema))
    if kind == "protobuf":
        return Compiled(kind, proto_class=_compile_protobuf(schema))
    try:
        parsed = fastavro.parse_schema(schema)
    except UnknownType as exc:
        raise AmsError.invalid_data(f'unknown type name: "{exc}"') from exc
    except Exception as exc:  # fastavro raises many kinds: all mean "does not compile"
        raise AmsError.invalid_data(str(exc) or type(exc).__name__) from exc
    return Compiled(kind, avro_schema=parsed, avro_names=_avro_named_types(parsed))


def _json_error_text(error: ValidationError | SchemaError) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


# --- Protocol Buffers -----------------------------------------------------------------------------
def _compile_protobuf(source: Any) -> MessageClass:
    """The message class of a .proto definition that protoc compiles, that imports nothing and
    that defines exactly one top-level type, a message (as Pub/Sub's PROTOCOL_BUFFER schemas)."""
    if not isinstance(source, str):
        raise AmsError.invalid_data("a protobuf schema is the .proto source text, as a JSON string")
    try:
        encoded = source.encode()
    except UnicodeEncodeError as exc:
        raise AmsError.invalid_data("a protobuf schema must be UTF-8 text") from exc
    if len(encoded) > MAX_PROTO_BYTES:
        raise AmsError.invalid_data(
            f"a protobuf schema is at most {MAX_PROTO_BYTES} bytes long (this one: {len(encoded)})"
        )
    file = _protoc(encoded)
    if file.dependency:  # never so: protoc finds no file to import (see _protoc)
        raise AmsError.invalid_data("a protobuf schema cannot import other files")
    if len(file.message_type) != 1 or file.enum_type or file.extension or file.service:
        raise AmsError.invalid_data(
            "a protobuf schema defines exactly one top-level type, a message (nest any other types in it); "
            f"this one has {len(file.message_type)} messages, {len(file.enum_type)} enums, "
            f"{len(file.extension)} extensions and {len(file.service)} services at the top level"
        )
    pool = descriptor_pool.DescriptorPool()  # a pool of its own: nothing shared between schemas
    try:
        pool.Add(file)
        name = f"{file.package}.{file.message_type[0].name}" if file.package else file.message_type[0].name
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))  # type: ignore[no-any-return]
    except Exception as exc:  # protoc accepted it: the runtime should too
        raise AmsError.invalid_data(f"{PROTO_FILE}: {exc}") from exc


def _protoc(source: bytes) -> descriptor_pb2.FileDescriptorProto:
    """Compile ``source`` with protoc (grpcio-tools' compiler, in this process) as the only file of
    a scratch directory that is its only import path: no import can reach another file (the
    well-known google/protobuf types included), nor any path outside it (protoc refuses absolute
    paths and ".." in imports)."""
    with tempfile.TemporaryDirectory(prefix="ams-proto-") as scratch:
        Path(scratch, PROTO_FILE).write_bytes(source)
        with _PROTOC_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # protoc's warnings (ProtocWarning) do not refuse a schema
            try:
                generated = _protoc_compiler.get_protos(PROTO_FILE.encode(), [scratch.encode()])
            except _protoc_compiler.ProtocErrors as exc:
                raise AmsError.invalid_data(_protoc_text(exc.errors())) from exc
    return _descriptor_of(generated[-1][1])


def _protoc_text(errors: list[Any]) -> str:
    """protoc's errors as its command line prints them (lines and columns from 1)."""

    def text(value: Any) -> str:
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)

    lines = []
    for error in errors[:MAX_PROTOC_ERRORS]:
        where = text(error.filename)
        if error.line >= 0:
            where += f":{error.line + 1}:{error.column + 1}"
        lines.append(f"{where}: {text(error.message)}")
    if len(errors) > MAX_PROTOC_ERRORS:
        lines.append(f"({len(errors) - MAX_PROTOC_ERRORS} more)")
    return "; ".join(lines) or "protoc refused the definition"


def _descriptor_of(generated: bytes) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto that protoc's Python output (``…_pb2.py``) registers: the bytes of
    its ``AddSerializedFile(b'…')``, read from its syntax tree (the code is never run)."""
    for node in ast.walk(ast.parse(generated)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return descriptor_pb2.FileDescriptorProto.FromString(node.args[0].value)
    raise AmsError.internal("protoc gave no file descriptor")


def validate_protobuf(compiled: Compiled, index: int, raw: bytes, encoding: str = "BINARY") -> None:
    """Check a message of a protobuf schema: binary (the wire format) or JSON (protobuf's JSON
    mapping). Either must parse as the schema's message, with every proto2 required field, and with
    no field the schema does not define (unknown fields are refused in both encodings)."""
    assert compiled.proto_class is not None
    message = compiled.proto_class()
    if encoding == "JSON":
        try:
            text = raw.decode()
            if not text.lstrip(" \t\r\n").startswith("{"):  # json_format takes [] as {}
                raise ValueError("expected a JSON object")
            json_format.Parse(text, message)
        except Exception as exc:  # ParseError, UnicodeDecodeError, RecursionError: all the client's
            raise _not_valid(index, exc) from exc
    else:
        try:
            message.ParseFromString(raw)
        except Exception as exc:  # DecodeError (and its kin): the bytes are not that message
            raise _not_valid(index, exc) from exc
    missing = message.FindInitializationErrors()
    if missing:
        raise AmsError.invalid_data(f"Message {index} is not valid.missing required fields: {', '.join(missing)}")
    size = message.ByteSize()
    message.DiscardUnknownFields()  # recursively: a smaller message had fields the schema lacks
    if message.ByteSize() != size:
        raise AmsError.invalid_data(f"Message {index} is not valid.it has fields that the schema does not define")


# --- Avro -----------------------------------------------------------------------------------------
_AVRO_NAMED = ("record", "error", "enum", "fixed")
_AVRO_INT_BOUNDS = {"int": 2**31, "long": 2**63}


def _avro_named_types(schema: Any, found: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every named type of a parsed Avro schema, by its full name (fastavro writes a named type
    out once, where it is first used, and names it everywhere else)."""
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            _avro_named_types(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") in _AVRO_NAMED and "name" in schema:
            found[schema["name"]] = schema
        for field in schema.get("fields", []) if schema.get("type") in ("record", "error") else []:
            _avro_named_types(field.get("type"), found)
        for key in ("items", "values"):
            if key in schema:
                _avro_named_types(schema[key], found)
        if isinstance(schema.get("type"), dict | list):
            _avro_named_types(schema["type"], found)
    return found


def validate_avro(compiled: Compiled, index: int, raw: bytes) -> None:
    """Check schemaless Avro binary: it must decode and use every byte."""
    stream = io.BytesIO(raw)
    try:
        fastavro.schemaless_reader(stream, compiled.avro_schema)
    except Exception as exc:  # any decoding failure is the client's
        raise _not_valid(index, exc) from exc
    if stream.tell() != len(raw):
        raise AmsError.invalid_data(f"Message {index} is not valid.{len(raw) - stream.tell()} trailing bytes")


def validate_avro_json(compiled: Compiled, index: int, raw: bytes) -> None:
    """Check a message in Avro's JSON encoding (the Avro specification's): one JSON value of the
    schema, strictly: a record has each of its fields and no other, a union's value is null or
    {"<branch type name>": value}, an int or long is a whole number in its range, bytes and fixed
    are strings of code points 0-255."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise AmsError.invalid_data(f"Message {index} is not valid.not JSON: {exc}") from exc
    try:
        _avro_json(compiled.avro_schema, document, compiled.avro_names or {}, "(root)")
    except _AvroJsonMismatch as exc:
        raise AmsError.invalid_data(f"Message {index} is not valid.{exc}") from exc
    except RecursionError as exc:
        raise AmsError.invalid_data(f"Message {index} is not valid.nested too deeply") from exc


class _AvroJsonMismatch(ValueError):
    pass


def _avro_type_name(schema: Any) -> str:
    """The name a union's branch goes by in Avro's JSON encoding."""
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _AVRO_NAMED:
            return str(schema["name"])
        return kind if isinstance(kind, str) else ""
    return schema if isinstance(schema, str) else ""


def _avro_json(schema: Any, value: Any, names: Mapping[str, Any], where: str) -> None:
    def mismatch(expected: str) -> _AvroJsonMismatch:
        shown = json.dumps(value)
        return _AvroJsonMismatch(f"{where}: expected {expected}, got {shown[:60]}{'…' if len(shown) > 60 else ''}")

    if isinstance(schema, list):  # a union
        if value is None:
            if "null" in schema:
                return
            raise mismatch("one of " + ", ".join(_avro_type_name(b) for b in schema))
        if not isinstance(value, dict) or len(value) != 1:
            raise mismatch('null or {"<type name>": value} (a union)')
        ((branch_name, inner),) = value.items()
        for branch in schema:
            if branch != "null" and _avro_type_name(branch) == branch_name:
                _avro_json(branch, inner, names, where)
                return
        raise mismatch("one of " + ", ".join(_avro_type_name(b) for b in schema))
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error"):
            if not isinstance(value, dict):
                raise mismatch(f"a {schema.get('name')} record (an object)")
            fields = {f["name"]: f["type"] for f in schema.get("fields", [])}
            unknown = sorted(set(value) - set(fields))
            if unknown:
                raise _AvroJsonMismatch(f"{where}: {unknown[0]!r} is not a field of {schema.get('name')}")
            for name, field_type in fields.items():
                if name not in value:
                    raise _AvroJsonMismatch(f"{where}: the field {name!r} is missing")
                _avro_json(field_type, value[name], names, name if where == "(root)" else f"{where}.{name}")
            return
        if kind == "enum":
            if not isinstance(value, str) or value not in schema.get("symbols", []):
                raise mismatch("one of the symbols " + ", ".join(schema.get("symbols", [])))
            return
        if kind == "fixed":
            if not _avro_bytes(value) or len(value) != schema.get("size"):
                raise mismatch(f"{schema.get('size')} bytes (a string of code points 0-255)")
            return
        if kind == "array":
            if not isinstance(value, list):
                raise mismatch("an array")
            for n, item in enumerate(value):
                _avro_json(schema.get("items"), item, names, f"{where}[{n}]")
            return
        if kind == "map":
            if not isinstance(value, dict):
                raise mismatch("a map (an object)")
            for key, item in value.items():
                _avro_json(schema.get("values"), item, names, f"{where}[{key!r}]")
            return
        _avro_json(kind, value, names, where)  # {"type": "int", "logicalType": …} and the like
        return
    if schema in names:
        _avro_json(names[schema], value, names, where)
        return
    if not _avro_primitive(schema, value):
        raise mismatch(str(schema))


def _avro_bytes(value: Any) -> bool:
    return isinstance(value, str) and all(ord(c) < 256 for c in value)


def _avro_primitive(kind: Any, value: Any) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _AVRO_INT_BOUNDS:
        bound = _AVRO_INT_BOUNDS[kind]
        return isinstance(value, int) and not isinstance(value, bool) and -bound <= value < bound
    if kind in ("float", "double"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "bytes":
        return _avro_bytes(value)
    return False


# --- JSON Schema, and every message -----------------------------------------------------------------
def validate_document(compiled: Compiled, index: int, document: Any) -> None:
    """Check a decoded JSON document against a JSON schema (docs/compatibility.md, "Schemas")."""
    assert compiled.json_validator is not None
    errors = sorted(
        compiled.json_validator.iter_errors(document),
        key=lambda e: ([str(p) for p in e.absolute_path], e.message),
    )
    if not errors:
        return
    if len(errors) == 1:
        raise AmsError.invalid_data(f"Message {index} data is not valid,{_json_error_text(errors[0])}")
    listed = "".join(f"{n}){_json_error_text(e)}." for n, e in enumerate(errors, 1))
    raise AmsError.invalid_data(f"Message {index} data is not valid.{listed}")


def _not_valid(index: int, exc: BaseException) -> AmsError:
    return AmsError.invalid_data(f"Message {index} is not valid.{exc or type(exc).__name__}")


def validate_message(compiled: Compiled, index: int, data_b64: str, encoding: str = "") -> None:
    """Check one published message's base64 ``data`` against the topic's schema, in the topic's
    encoding: "" is the type's own (a JSON document for json, binary for avro and protobuf);
    "JSON" is Avro's JSON encoding or protobuf's JSON mapping; a json schema's messages are JSON
    documents whatever the encoding says."""
    if encoding not in ("", *ENCODINGS):
        raise AmsError.internal(f"unknown schema encoding {encoding!r}")
    try:
        raw = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AmsError.invalid_data(f"Message {index} is not in valid base64 encoding,{exc}") from exc
    if compiled.type == "avro":
        if encoding == "JSON":
            validate_avro_json(compiled, index, raw)
        else:
            validate_avro(compiled, index, raw)
        return
    if compiled.type == "protobuf":
        validate_protobuf(compiled, index, raw, encoding or "BINARY")
        return
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise AmsError.invalid_data(f"Message {index} data is not valid JSON format,{exc}") from exc
    validate_document(compiled, index, document)
