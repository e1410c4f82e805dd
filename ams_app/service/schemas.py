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
from ams_app.service.validation import as_object, opt_str

_BAD = AmsError.invalid_argument("Schema")


def schema_name_from_ref(project: Project, ref: Any) -> str:
    """``projects/{project}/schemas/{name}`` -> name (the project must be the URL's)."""
    parts = ref.split("/") if isinstance(ref, str) else []
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "schemas" or parts[1] != project.name or not parts[3]:
        raise AmsError.invalid_data("wrong schema name declaration")
    return parts[3]


class SchemaOps(ServiceBase):
    def schema(self, project: Project, name: str) -> Schema:
        found = self.store.get_schema(project.uuid, name=name)
        if found is None:
            raise AmsError.not_found("Schema")
        return found

    def schema_by_ref(self, project: Project, ref: Any) -> Schema:
        return self.schema(project, schema_name_from_ref(project, ref))

    def schema_names(self, project: Project) -> dict[str, str]:
        """uuid -> name of the project's schemas (for topic views)."""
        return {s.uuid: s.name for s in self.store.list_schemas(project.uuid)}

    def topic_schema_name(self, project: Project, topic: Topic) -> str | None:
        if not topic.schema_uuid:
            return None
        found = self.store.get_schema(project.uuid, uuid=topic.schema_uuid)
        return found.name if found else None

    def create_schema(self, project: Project, name: str, body: Any) -> Schema:
        body = as_object(body, _BAD)
        if "schema" not in body:
            raise _BAD
        kind = schema_check.check_type(body.get("type"))
        schema_check.compile_schema(kind, body["schema"])
        created = Schema(str(uuidlib.uuid4()), project.uuid, name, kind, body["schema"])
        if not self.store.create_schema(created):
            raise AmsError.conflict("Schema")
        return created

    def update_schema(self, project: Project, name: str, body: Any) -> Schema:
        current = self.schema(project, name)
        body = as_object(body, _BAD)
        if not body or not {"name", "type", "schema"} & set(body):
            raise _BAD
        if "name" in body:
            current.name = schema_name_from_ref(project, body["name"])
        if "type" in body:
            current.type = schema_check.check_type(body["type"])
        if "schema" in body:
            current.schema = body["schema"]
        schema_check.compile_schema(current.type, current.schema)
        if not self.store.update_schema(current):
            raise AmsError.conflict("Schema")
        return current

    def delete_schema(self, project: Project, name: str) -> None:
        if not self.store.delete_schema(project.uuid, self.schema(project, name).uuid):
            raise AmsError.not_found("Schema")

    def validate_with_schema(self, found: Schema, body: Any) -> None:
        """The :validate endpoint: a JSON document itself, or {"data": base64} for Avro.
        ``body`` is the parsed JSON value (the HTTP layer refuses a missing or malformed one)."""
        compiled = schema_check.compile_schema(found.type, found.schema)
        if found.type == "json":
            schema_check.validate_document(compiled, 0, body)
            return
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, str):
            raise AmsError.invalid_argument("Schema Payload")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise AmsError.invalid_data(f"Message 0 is not in valid base64 encoding,{exc}") from exc
        schema_check.validate_avro(compiled, 0, raw)

    def attach_schema(self, project: Project, topic_name: str, body: Any) -> None:
        topic = self.topic(project, topic_name)
        body = as_object({} if body is None else body, AmsError.invalid_request_body())
        ref = opt_str(body, "schema", AmsError.invalid_request_body()) or ""
        topic.schema_uuid = self.schema_by_ref(project, ref).uuid if ref else ""
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
