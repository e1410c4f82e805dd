"""Schema revisions (ams_app/service/schemas.py), as Pub/Sub has them: every change of type or
definition is a new revision, rollback is a new revision too, at most MAX_SCHEMA_REVISIONS are
kept; on the embedded store (the contract suite pins both stores' side of it)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.errors import AmsError
from ams_app.models import Project, Schema
from ams_app.service.requests import NewSchema, SchemaUpdate
from ams_app.service.schemas import MAX_SCHEMA_REVISIONS, SchemaOps

REVISION_ID = re.compile(r"^[0-9a-f]{8}$")
V1: dict[str, Any] = {"type": "object"}
V2: dict[str, Any] = {"type": "object", "required": ["a"]}
PROTO = 'syntax = "proto3"; message M { string a = 1; }'


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[SchemaOps]:
    ops = SchemaOps()
    ops.store = SqliteMetadataStore(str(tmp_path / "metadata.db"))
    yield ops
    ops.store.close()


@pytest.fixture
def project(svc: SchemaOps) -> Project:
    project = Project("p-uuid", "p")
    assert svc.store.create_project(project)
    return project


@pytest.fixture
def schema(svc: SchemaOps, project: Project) -> Schema:
    return svc.create_schema(project, "s", NewSchema("json", V1))


def error_of(call: Any, *args: Any) -> AmsError:
    with pytest.raises(AmsError) as caught:
        call(*args)
    return caught.value


def contents(revisions: list[Schema]) -> list[tuple[str, Any]]:
    return [(r.type, r.schema) for r in revisions]


def test_a_new_schema_has_one_revision(svc: SchemaOps, project: Project, schema: Schema) -> None:
    assert REVISION_ID.match(schema.revision_id)
    assert schema.revision_created_ns > 0
    assert schema.revisions == []
    assert svc.schema(project, "s") == schema
    (only,) = svc.schema_revisions(project, "s")
    assert only == schema
    assert svc.schema_revision(project, "s", schema.revision_id) == schema


def test_a_commit_is_a_new_revision_and_the_current_one_goes_into_the_history(
    svc: SchemaOps, project: Project, schema: Schema
) -> None:
    committed = svc.commit_schema(project, "s", "PROTOBUF", PROTO)
    assert (committed.type, committed.schema) == ("protobuf", PROTO)
    assert REVISION_ID.match(committed.revision_id)
    assert committed.revision_id != schema.revision_id
    assert committed.revision_created_ns >= schema.revision_created_ns
    assert [r.revision_id for r in committed.revisions] == [schema.revision_id]
    assert svc.schema(project, "s") == committed
    again = svc.commit_schema(project, "s", "protobuf", PROTO)  # the same content: still a new one
    revisions = svc.schema_revisions(project, "s")
    assert [r.revision_id for r in revisions] == [again.revision_id, committed.revision_id, schema.revision_id]
    assert contents(revisions) == [("protobuf", PROTO), ("protobuf", PROTO), ("json", V1)]
    assert all(r.revisions == [] and r.uuid == schema.uuid and r.name == "s" for r in revisions)
    assert svc.schema_revision(project, "s", schema.revision_id).schema == V1


def test_a_commit_that_does_not_compile_changes_nothing(svc: SchemaOps, project: Project, schema: Schema) -> None:
    assert error_of(svc.commit_schema, project, "s", "protobuf", "message {").code == 400
    assert error_of(svc.commit_schema, project, "s", "xml", V2).message.startswith("Schema type can only")
    assert error_of(svc.commit_schema, project, "nope", "json", V2).message == "Schema doesn't exist"
    assert svc.schema(project, "s") == schema


def test_a_rollback_is_a_new_revision_with_the_old_content(svc: SchemaOps, project: Project, schema: Schema) -> None:
    second = svc.commit_schema(project, "s", "json", V2)
    rolled = svc.rollback_schema(project, "s", schema.revision_id)
    assert (rolled.type, rolled.schema) == ("json", V1)
    assert rolled.revision_id not in (schema.revision_id, second.revision_id)
    assert [r.revision_id for r in rolled.revisions] == [second.revision_id, schema.revision_id]
    to_current = svc.rollback_schema(project, "s", rolled.revision_id)
    assert to_current.schema == V1
    assert len(to_current.revisions) == 3
    missing = error_of(svc.rollback_schema, project, "s", "00000000")
    assert (missing.code, missing.message) == (404, "Schema revision doesn't exist")


def test_deleting_an_earlier_revision(svc: SchemaOps, project: Project, schema: Schema) -> None:
    second = svc.commit_schema(project, "s", "json", V2)
    deleted = svc.delete_schema_revision(project, "s", schema.revision_id)
    assert (deleted.revision_id, deleted.schema, deleted.revisions) == (schema.revision_id, V1, [])
    assert svc.schema_revisions(project, "s") == [dataclasses.replace(second, revisions=[])]
    missing = error_of(svc.delete_schema_revision, project, "s", schema.revision_id)
    assert (missing.code, missing.message) == (404, "Schema revision doesn't exist")


def test_deleting_the_current_revision_makes_the_one_before_current(
    svc: SchemaOps, project: Project, schema: Schema
) -> None:
    second = svc.commit_schema(project, "s", "json", V2)
    deleted = svc.delete_schema_revision(project, "s", second.revision_id)
    assert (deleted.revision_id, deleted.schema) == (second.revision_id, V2)
    assert svc.schema(project, "s") == schema  # as created: its revision id and time too


def test_the_only_revision_is_not_deleted(svc: SchemaOps, project: Project, schema: Schema) -> None:
    refused = error_of(svc.delete_schema_revision, project, "s", schema.revision_id)
    assert (refused.code, refused.status) == (400, "INVALID_ARGUMENT")
    assert refused.message == "The only revision of a schema cannot be deleted: delete the schema instead"
    assert svc.schema(project, "s") == schema


def test_at_most_max_revisions_are_kept_the_oldest_go(svc: SchemaOps, project: Project, schema: Schema) -> None:
    for n in range(MAX_SCHEMA_REVISIONS + 4):
        svc.commit_schema(project, "s", "json", {"type": "object", "maxProperties": n})
    revisions = svc.schema_revisions(project, "s")
    assert len(revisions) == MAX_SCHEMA_REVISIONS == 20
    assert [r.schema["maxProperties"] for r in revisions] == list(range(MAX_SCHEMA_REVISIONS + 3, 3, -1))
    assert len({r.revision_id for r in revisions}) == MAX_SCHEMA_REVISIONS


def test_the_rest_update_makes_a_revision_only_when_the_content_changes(
    svc: SchemaOps, project: Project, schema: Schema
) -> None:
    renamed = svc.update_schema(schema, SchemaUpdate("t", None, None, False))
    assert (renamed.name, renamed.revision_id, renamed.revisions) == ("t", schema.revision_id, [])
    same = svc.update_schema(renamed, SchemaUpdate(None, "json", {"type": "object"}, True))
    assert (same.revision_id, same.revisions) == (schema.revision_id, [])
    changed = svc.update_schema(same, SchemaUpdate(None, None, V2, True))
    assert changed.revision_id != schema.revision_id
    assert [r.revision_id for r in changed.revisions] == [schema.revision_id]
    assert svc.schema(project, "t") == changed


def test_an_update_from_a_stale_read_loses_no_revision(svc: SchemaOps, project: Project, schema: Schema) -> None:
    """The REST update applies its change to the schema as it is when it writes (a compare-and-set
    on the current revision), not to the copy it read before another write."""
    committed = svc.commit_schema(project, "s", "protobuf", PROTO)
    updated = svc.update_schema(schema, SchemaUpdate(None, "json", V2, True))  # ``schema`` is stale
    assert [r.revision_id for r in updated.revisions] == [committed.revision_id, schema.revision_id]
    assert contents(svc.schema_revisions(project, "s")) == [("json", V2), ("protobuf", PROTO), ("json", V1)]


def test_a_rename_onto_a_taken_name_conflicts(svc: SchemaOps, project: Project, schema: Schema) -> None:
    svc.create_schema(project, "other", NewSchema("avro", "string"))
    clash = error_of(svc.update_schema, schema, SchemaUpdate("other", None, V2, True))
    assert (clash.code, clash.message) == (409, "Schema already exists")
    assert svc.schema(project, "s") == schema
