"""Message schemas: JSON Schema (jsonschema) and Avro (fastavro). Pure functions, no I/O."""

from __future__ import annotations

import base64
import binascii
import functools
import io
import json
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import UnknownType
from jsonschema import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from ams_app.errors import AmsError

TYPES = ("json", "avro")


@dataclass(frozen=True)
class Compiled:
    type: str
    json_validator: Validator | None = None
    avro_schema: Any = None


def check_type(kind: Any) -> str:
    if not isinstance(kind, str) or kind.lower() not in TYPES:
        raise AmsError.invalid_data("Schema type can only be 'json' or 'avro'")
    return kind.lower()


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
    try:
        parsed = fastavro.parse_schema(schema)
    except UnknownType as exc:
        raise AmsError.invalid_data(f'unknown type name: "{exc}"') from exc
    except Exception as exc:  # fastavro raises many kinds: all mean "does not compile"
        raise AmsError.invalid_data(str(exc) or type(exc).__name__) from exc
    return Compiled(kind, avro_schema=parsed)


def _json_error_text(error: ValidationError | SchemaError) -> str:
    where = ".".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"


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


def validate_avro(compiled: Compiled, index: int, raw: bytes) -> None:
    """Check schemaless Avro binary: it must decode and use every byte."""
    stream = io.BytesIO(raw)
    try:
        fastavro.schemaless_reader(stream, compiled.avro_schema)
    except Exception as exc:  # any decoding failure is the client's
        raise AmsError.invalid_data(f"Message {index} is not valid.{exc or type(exc).__name__}") from exc
    if stream.tell() != len(raw):
        raise AmsError.invalid_data(f"Message {index} is not valid.{len(raw) - stream.tell()} trailing bytes")


def validate_message(compiled: Compiled, index: int, data_b64: str) -> None:
    """Check one published message's base64 ``data`` against the topic's schema."""
    try:
        raw = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AmsError.invalid_data(f"Message {index} is not in valid base64 encoding,{exc}") from exc
    if compiled.type == "avro":
        validate_avro(compiled, index, raw)
        return
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise AmsError.invalid_data(f"Message {index} data is not valid JSON format,{exc}") from exc
    validate_document(compiled, index, document)
