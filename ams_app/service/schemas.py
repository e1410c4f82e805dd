"""Schema operations of AmsService: create, show, list, update, delete, validate, attach; and
schema revisions as Pub/Sub has them: commit, roll back, list, delete one (docs/compatibility.md,
"Schemas")."""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from ams_app.errors import AmsError
from ams_app.models import Project, Schema, SchemaRevision, Topic
from ams_app.service import schema_check
from ams_app.service.base import ServiceBase
from ams_app.service.requests import NewSchema, SchemaUpdate
from ams_app.timeutil import now_ns

#: Revisions a schema keeps, its current one included (Pub/Sub's limit); a new one past it drops
#: the oldest.
MAX_SCHEMA_REVISIONS = 20
#: Writes of a schema's new revision tried at most when others keep changing it meanwhile.
_REVISE_ATTEMPTS = 10


def new_revision_id(taken: set[str] | frozenset[str] = frozenset()) -> str:
    """A revision id: 8 random lower-case hex digits, none of ``taken``."""
    while True:
        revision_id = secrets.token_hex(4)
        if revision_id not in taken:
            return revision_id


def _same_content(kind: str, schema: Any, other_kind: str, other: Any) -> bool:
    return kind == other_kind and json.dumps(schema, sort_keys=True) == json.dumps(other, sort_keys=True)


def _as_schema(found: Schema, revision: SchemaRevision) -> Schema:
    """One revision of ``found`` as a Schema of its own (with no earlier revisions)."""
    return dataclasses.replace(
        found,
        type=revision.type,
        schema=revision.schema,
        revision_id=revision.revision_id,
        revision_created_ns=revision.created_ns,
        revisions=[],
    )


def _current(found: Schema) -> SchemaRevision:
    return SchemaRevision(found.revision_id, found.revision_created_ns, found.type, found.schema)


def _add_revision(found: Schema, kind: str, definition: Any) -> None:
    """Make (kind, definition) ``found``'s new current revision; the current one becomes the newest
    earlier one, and the oldest go past MAX_SCHEMA_REVISIONS."""
    earlier = [_current(found), *found.revisions][: MAX_SCHEMA_REVISIONS - 1]
    found.revisions = earlier
    found.type, found.schema = kind, definition
    found.revision_id = new_revision_id({r.revision_id for r in earlier})
    found.revision_created_ns = now_ns()


class SchemaOps(ServiceBase):
    def schema(self, project: Project, name: str) -> Schema:
        found = self.store.get_schema(project.uuid, name=name)
        if found is None:
            raise AmsError.not_found("Schema")
        return found

    def schema_names(self, project: Project) -> dict[str, str]:
        """uuid -> name of the project's schemas (for topic views)."""
        return {s.uuid: s.name for s in self.store.list_schemas(project.uuid)}

    def topic_schema_name(self, project: Project, topic: Topic) -> str | None:
        if not topic.schema_uuid:
            return None
        found = self.store.get_schema(project.uuid, uuid=topic.schema_uuid)
        return found.name if found else None

    def create_schema(self, project: Project, name: str, request: NewSchema) -> Schema:
        schema_check.compile_schema(request.type, request.schema)
        created = Schema(
            str(uuidlib.uuid4()),
            project.uuid,
            name,
            request.type,
            request.schema,
            revision_id=new_revision_id(),
            revision_created_ns=now_ns(),
        )
        if not self.store.create_schema(created):
            raise AmsError.conflict("Schema")
        return created

    def update_schema(self, current: Schema, request: SchemaUpdate) -> Schema:
        """The REST update: a new name keeps the revision; a new type or definition (one that
        differs from the current) is a new revision."""
        kind = request.type if request.type is not None else current.type
        definition = request.schema if request.replaces_schema else current.schema
        schema_check.compile_schema(kind, definition)

        def change(found: Schema) -> None:
            if request.name is not None:
                found.name = request.name
            if not _same_content(kind, definition, found.type, found.schema):
                _add_revision(found, kind, definition)

        return self._revise(current, change)

    def delete_schema(self, project: Project, name: str) -> None:
        if not self.store.delete_schema(project.uuid, self.schema(project, name).uuid):
            raise AmsError.not_found("Schema")

    # --- revisions ---------------------------------------------------------------------------------
    def schema_revisions(self, project: Project, name: str) -> list[Schema]:
        """Every revision the schema keeps, each as a Schema (with no ``revisions``), the current
        one first, then the earlier ones newest first."""
        found = self.schema(project, name)
        return [_as_schema(found, r) for r in (_current(found), *found.revisions)]

    def schema_revision(self, project: Project, name: str, revision_id: str) -> Schema:
        """One revision of the schema, as a Schema (with no ``revisions``); 404 when it keeps none
        of that id."""
        for revision in self.schema_revisions(project, name):
            if revision.revision_id == revision_id:
                return revision
        raise AmsError.not_found("Schema revision")

    def commit_schema(self, project: Project, name: str, kind: str, definition: Any) -> Schema:
        """A new revision of the schema, of ``kind`` ("json", "avro" or "protobuf", in any case)
        and ``definition`` (the JSON value of a JSON or Avro schema, the .proto text of a protobuf
        one), even when it equals the current one (as Pub/Sub's CommitSchema). The schema as it is
        now, its earlier revisions included."""
        found = self.schema(project, name)  # 404 before 400
        kind = schema_check.check_type(kind)
        schema_check.compile_schema(kind, definition)
        return self._revise(found, lambda changed: _add_revision(changed, kind, definition))

    def rollback_schema(self, project: Project, name: str, revision_id: str) -> Schema:
        """A new revision whose type and definition are those of the revision ``revision_id`` (as
        Pub/Sub's RollbackSchema); 404 when the schema keeps no such revision."""

        def change(found: Schema) -> None:
            for revision in (_current(found), *found.revisions):
                if revision.revision_id == revision_id:
                    schema_check.compile_schema(revision.type, revision.schema)
                    _add_revision(found, revision.type, revision.schema)
                    return
            raise AmsError.not_found("Schema revision")

        return self._revise(self.schema(project, name), change)

    def delete_schema_revision(self, project: Project, name: str, revision_id: str) -> Schema:
        """Delete one revision; the deleted revision, as a Schema. Deleting the current revision
        makes the newest earlier one current (as Pub/Sub does); a schema's only revision is not
        deleted (400: delete the schema instead); 404 when the schema keeps no such revision."""
        deleted: list[Schema] = []

        def change(found: Schema) -> None:
            deleted.clear()
            if found.revision_id == revision_id:
                if not found.revisions:
                    raise AmsError.invalid_data(
                        "The only revision of a schema cannot be deleted: delete the schema instead"
                    )
                deleted.append(_as_schema(found, _current(found)))
                newest, *older = found.revisions
                found.type, found.schema = newest.type, newest.schema
                found.revision_id, found.revision_created_ns = newest.revision_id, newest.created_ns
                found.revisions = older
                return
            for n, revision in enumerate(found.revisions):
                if revision.revision_id == revision_id:
                    deleted.append(_as_schema(found, revision))
                    del found.revisions[n]
                    return
            raise AmsError.not_found("Schema revision")

        self._revise(self.schema(project, name), change)
        return deleted[0]

    def _revise(self, found: Schema, change: Callable[[Schema], None]) -> Schema:
        """Write ``change`` of the schema as a compare-and-set on its current revision: when
        another write changed the revision meanwhile, read it again and apply ``change`` to that
        (so no revision is lost). 409 when the (new) name is taken."""
        for attempt in range(_REVISE_ATTEMPTS):
            if attempt:
                again = self.store.get_schema(found.project_uuid, uuid=found.uuid)
                if again is None:
                    raise AmsError.not_found("Schema")
                found = again
            expected = found.revision_id
            changed = dataclasses.replace(found, revisions=list(found.revisions))
            change(changed)
            if self.store.update_schema(changed, expected_revision_id=expected):
                return changed
            now = self.store.get_schema(found.project_uuid, uuid=found.uuid)
            if now is None:
                raise AmsError.not_found("Schema")
            if now.revision_id == expected:  # not another revision: the name is taken
                raise AmsError.conflict("Schema")
        raise AmsError.generic_conflict("The schema keeps changing: try again")

    # --- validation ----------------------------------------------------------------------------------
    def validate_with_schema(self, found: Schema, document: Any) -> None:
        """The :validate endpoint: ``document`` is the request's JSON value (the HTTP layer
        refuses a missing or malformed one), the message itself for a JSON schema, or
        {"data": base64, "encoding"?: "JSON" | "BINARY"} for an Avro or protobuf one."""
        compiled = schema_check.compile_schema(found.type, found.schema)
        if found.type == "json":
            schema_check.validate_document(compiled, 0, document)
            return
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, str):
            raise AmsError.invalid_argument("Schema Payload")
        encoding = document.get("encoding") or ""
        if encoding:
            encoding = schema_check.check_encoding(encoding)
        schema_check.validate_message(compiled, 0, data, encoding)

    # --- topics' schemas -------------------------------------------------------------------------------
    def check_schema_encoding(self, found: Schema | None, encoding: str) -> None:
        """A topic's schemaEncoding needs a schema, and a JSON schema's messages are JSON documents."""
        if not encoding:
            return
        if found is None:
            raise AmsError.invalid_data("schemaEncoding needs a schema")
        if found.type == "json" and encoding != "JSON":
            raise AmsError.invalid_data("The messages of a JSON schema are JSON: schemaEncoding BINARY does not apply")

    def attach_schema(self, project: Project, topic: Topic, schema_name: str, encoding: str = "") -> None:
        """Attach the named schema to the topic, its messages encoded as ``encoding`` ("JSON",
        "BINARY", or "" for the schema type's own); "" detaches the one it has."""
        found = self.schema(project, schema_name) if schema_name else None
        self.check_schema_encoding(found, encoding)
        topic.schema_uuid = found.uuid if found else ""
        topic.schema_encoding = encoding if found else ""
        self.store.update_topic(topic)

    def detach_schema(self, project: Project, topic_name: str) -> None:
        topic = self.topic(project, topic_name)
        topic.schema_uuid = ""
        topic.schema_encoding = ""
        self.store.update_topic(topic)

    def compiled_schema_of(self, project: Project, topic: Topic) -> schema_check.Compiled | None:
        """The topic's schema, compiled (cached: schema_check); its messages are checked with
        ``schema_check.validate_message(compiled, index, data_b64, topic.schema_encoding)``."""
        if not topic.schema_uuid:
            return None
        found = self.store.get_schema(project.uuid, uuid=topic.schema_uuid)
        if found is None:
            raise AmsError.internal("Could not load schema for topic")
        return schema_check.compile_schema(found.type, found.schema)
