"""google.pubsub.v1.SchemaService over the project's AMS schemas (docs/pubsub.md, "Schemas").

Pub/Sub's AVRO is AMS's ``avro`` (the definition is the Avro JSON text), PROTOCOL_BUFFER is
``protobuf`` (the .proto source). AMS's JSON Schemas have no Pub/Sub type: they are listed with
TYPE_UNSPECIFIED and their JSON text, and cannot be made here. Each change of a schema's type or
definition is a revision (ams_app/service/schemas.py keeps the latest ones)."""

from __future__ import annotations

import base64
import json
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1.types import schema as sc

from ams_app.errors import AmsError
from ams_app.models import Project, Schema
from ams_app.pubsub import convert
from ams_app.pubsub.calls import authorize, unary
from ams_app.service import requests, schema_check
from ams_app.service.core import AmsService

SchemaPb = sc.Schema.pb()
ListSchemasResponse = sc.ListSchemasResponse.pb()
ListSchemaRevisionsResponse = sc.ListSchemaRevisionsResponse.pb()
ValidateSchemaResponse = sc.ValidateSchemaResponse.pb()
ValidateMessageResponse = sc.ValidateMessageResponse.pb()
#: Pub/Sub's schema types -> AMS's
TYPES = {int(sc.Schema.Type.AVRO): "avro", int(sc.Schema.Type.PROTOCOL_BUFFER): "protobuf"}
_PUBSUB_TYPES = {ams: pubsub for pubsub, ams in TYPES.items()}
_FULL = int(sc.SchemaView.FULL)


def definition_of(kind: str, text: str) -> Any:
    """A Pub/Sub definition as the AMS schema document: Avro's JSON parsed, a .proto as text."""
    if kind == "protobuf":
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AmsError.invalid_data(f"The Avro definition is not JSON: {exc}") from exc


def ams_type(pb: Any) -> str:
    kind = TYPES.get(pb.type_)
    if kind is None:
        raise AmsError.invalid_data("A schema's type is AVRO or PROTOCOL_BUFFER")
    return kind


def view(project: Project, schema: Schema, full: bool = True) -> Any:
    out = SchemaPb(name=convert.name(project, "schemas", schema.name), type_=_PUBSUB_TYPES.get(schema.type, 0))
    if full:
        out.definition = schema.schema if isinstance(schema.schema, str) else json.dumps(schema.schema)
        out.revision_id = schema.revision_id
        out.revision_create_time.CopyFrom(convert.timestamp(schema.revision_created_ns))
    return out


def _page(items: list[Any], size: int, token: str) -> tuple[list[Any], str]:
    start = int(token) if token.isdigit() else 0
    size = size if size > 0 else len(items) or 1
    more = str(start + size) if start + size < len(items) else ""
    return items[start : start + size], more


class SchemaService:
    def __init__(self, svc: AmsService) -> None:
        self.svc = svc

    def _named(self, context: grpc.ServicerContext, route: str, text: str) -> tuple[Any, str]:
        project, name = convert.parse_name(text.split("@", 1)[0], "schemas")
        return authorize(self.svc, context, route, project), name

    @unary
    def CreateSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "schemas:create", convert.parse_project(request.parent))
        name = request.schema_id or convert.parse_name(request.schema.name, "schemas")[1]
        kind = ams_type(request.schema)
        wanted = requests.new_schema({"type": kind, "schema": definition_of(kind, request.schema.definition)})
        return view(call.project, self.svc.create_schema(call.project, name, wanted))

    @unary
    def GetSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:show", request.name)
        return view(call.project, self.svc.schema(call.project, name), request.view == _FULL or not request.view)

    @unary
    def ListSchemas(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "schemas:list", convert.parse_project(request.parent))
        chosen, more = _page(self.svc.schemas(call.project), request.page_size, request.page_token)
        full = request.view == _FULL
        return ListSchemasResponse(schemas=[view(call.project, s, full) for s in chosen], next_page_token=more)

    @unary
    def ListSchemaRevisions(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:show", request.name)
        revisions = self.svc.schema_revisions(call.project, name)
        chosen, more = _page(revisions, request.page_size, request.page_token)
        full = request.view == _FULL or not request.view
        return ListSchemaRevisionsResponse(schemas=[view(call.project, s, full) for s in chosen], next_page_token=more)

    @unary
    def CommitSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:update", request.name)
        kind = ams_type(request.schema)
        committed = self.svc.commit_schema(call.project, name, kind, definition_of(kind, request.schema.definition))
        return view(call.project, committed)

    @unary
    def RollbackSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:update", request.name)
        return view(call.project, self.svc.rollback_schema(call.project, name, request.revision_id))

    @unary
    def DeleteSchemaRevision(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:update", request.name)
        revision = request.revision_id or (request.name.split("@", 1)[1] if "@" in request.name else "")
        return view(call.project, self.svc.delete_schema_revision(call.project, name, revision))

    @unary
    def DeleteSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._named(context, "schemas:delete", request.name)
        self.svc.delete_schema(call.project, name)
        return empty_pb2.Empty()

    @unary
    def ValidateSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        authorize(self.svc, context, "schemas:create", convert.parse_project(request.parent))
        kind = ams_type(request.schema)
        schema_check.compile_schema(kind, definition_of(kind, request.schema.definition))
        return ValidateSchemaResponse()

    @unary
    def ValidateMessage(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "schemas:validateMessage", convert.parse_project(request.parent))
        if request.WhichOneof("schema_spec") == "name":
            found = self.svc.schema(call.project, convert.parse_name(request.name.split("@", 1)[0], "schemas")[1])
            kind, document = found.type, found.schema
        else:
            kind = ams_type(request.schema)
            document = definition_of(kind, request.schema.definition)
        compiled = schema_check.compile_schema(kind, document)
        encoding = sc.Encoding(request.encoding).name if request.encoding else ""
        data = base64.b64encode(request.message).decode("ascii")
        schema_check.validate_message(compiled, 0, data, encoding)
        return ValidateMessageResponse()
