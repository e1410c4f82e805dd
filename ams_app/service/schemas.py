"""Schema operations of AmsService: create, show, list, update, delete, validate, attach."""

from __future__ import annotations

import base64
import binascii
import uuid as uuidlib
from typing import Any

from ams_app.errors import AmsError
from ams_app.models import Project, Schema, Topic
from ams_app.service import schema_check
from ams_app.service.base import ServiceBase
from ams_app.service.requests import NewSchema, SchemaUpdate


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
        created = Schema(str(uuidlib.uuid4()), project.uuid, name, request.type, request.schema)
        if not self.store.create_schema(created):
            raise AmsError.conflict("Schema")
        return created

    def update_schema(self, current: Schema, request: SchemaUpdate) -> Schema:
        if request.name is not None:
            current.name = request.name
        if request.type is not None:
            current.type = request.type
        if request.replaces_schema:
            current.schema = request.schema
        schema_check.compile_schema(current.type, current.schema)
        if not self.store.update_schema(current):
            raise AmsError.conflict("Schema")
        return current

    def delete_schema(self, project: Project, name: str) -> None:
        if not self.store.delete_schema(project.uuid, self.schema(project, name).uuid):
            raise AmsError.not_found("Schema")

    def validate_with_schema(self, found: Schema, document: Any) -> None:
        """The :validate endpoint: ``document`` is the request's JSON value (the HTTP layer
        refuses a missing or malformed one), the message itself for a JSON schema, or
        {"data": base64} for an Avro one."""
        compiled = schema_check.compile_schema(found.type, found.schema)
        if found.type == "json":
            schema_check.validate_document(compiled, 0, document)
            return
        data = document.get("data") if isinstance(document, dict) else None
        if not isinstance(data, str):
            raise AmsError.invalid_argument("Schema Payload")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise AmsError.invalid_data(f"Message 0 is not in valid base64 encoding,{exc}") from exc
        schema_check.validate_avro(compiled, 0, raw)

    def attach_schema(self, project: Project, topic: Topic, schema_name: str) -> None:
        """Attach the named schema to the topic; "" detaches the one it has."""
        topic.schema_uuid = self.schema(project, schema_name).uuid if schema_name else ""
        self.store.update_topic(topic)

    def detach_schema(self, project: Project, topic_name: str) -> None:
        topic = self.topic(project, topic_name)
        topic.schema_uuid = ""
        self.store.update_topic(topic)

    def compiled_schema_of(self, project: Project, topic: Topic) -> schema_check.Compiled | None:
        if not topic.schema_uuid:
            return None
        found = self.store.get_schema(project.uuid, uuid=topic.schema_uuid)
        if found is None:
            raise AmsError.internal("Could not load schema for topic")
        return schema_check.compile_schema(found.type, found.schema)
