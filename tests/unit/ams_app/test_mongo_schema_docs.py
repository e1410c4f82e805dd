"""How the MongoDB store keeps a schema (ams_app/backends/mongo/store.py): its definitions, the
current one and its earlier revisions', as JSON text; a document of a release before revisions
read at a revision derived from its uuid. Pure: no server (the contract suite has the server's)."""

from __future__ import annotations

import datetime

from bson import ObjectId

from ams_app.backends.mongo.store import _schema_doc, _schema_from, _schema_query, legacy_revision_id
from ams_app.models import Schema, SchemaRevision

JSON_SCHEMA = {"$id": "x", "properties": {"a": {"$ref": "#/$defs/a"}}}


def test_a_schema_and_its_revisions_keep_their_definitions_as_json_text() -> None:
    schema = Schema(
        "u-1",
        "p-1",
        "s",
        "protobuf",
        'syntax = "proto3"; message M {}',
        "0000000c",
        30,
        [SchemaRevision("0000000b", 20, "json", JSON_SCHEMA), SchemaRevision("0000000a", 10, "avro", "string")],
    )
    doc = _schema_doc(schema)
    assert "schema" not in doc
    assert all("schema" not in r and isinstance(r["raw_schema"], str) for r in doc["revisions"])
    assert "$ref" not in str({k: v for k, v in doc.items() if k not in ("raw_schema", "revisions")})
    assert _schema_from(doc | {"_id": ObjectId()}) == schema


def test_a_document_without_a_revision_reads_at_one_derived_from_its_uuid() -> None:
    oid = ObjectId.from_datetime(datetime.datetime(2024, 5, 1, tzinfo=datetime.UTC))
    doc = {"_id": oid, "uuid": "u-1", "project_uuid": "p-1", "name": "s", "type": "json", "raw_schema": "{}"}
    found = _schema_from(doc)
    assert found == Schema("u-1", "p-1", "s", "json", {}, legacy_revision_id("u-1"), 1714521600 * 10**9, [])
    assert legacy_revision_id("u-1") == legacy_revision_id("u-1") != legacy_revision_id("u-2")
    assert len(legacy_revision_id("u-1")) == 8
    assert int(legacy_revision_id("u-1"), 16) >= 0


def test_the_compare_and_set_query() -> None:
    assert _schema_query("u", None) == {"uuid": "u"}
    assert _schema_query("u", "0000000a") == {"uuid": "u", "revision_id": "0000000a"}
    legacy = legacy_revision_id("u")
    assert _schema_query("u", legacy) == {
        "uuid": "u",
        "$or": [{"revision_id": legacy}, {"revision_id": {"$exists": False}}],
    }
