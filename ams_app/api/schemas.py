"""Schemas of a project, and validation of a message against one."""

from __future__ import annotations

from flask import Response

from ams_app.api.pipeline import MALFORMED, PROJECT, SCHEMA, Ctx, add_route, body, empty, ok
from ams_app.api.views import schema_view
from ams_app.auth import PROJECT_ADMIN, SERVICE_ADMIN
from ams_app.errors import AmsError
from ams_app.service import requests


@add_route(PROJECT + "/schemas", "schemas:list", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_list(ctx: Ctx, project: str) -> Response:
    return ok({"schemas": [schema_view(ctx.proj, s) for s in ctx.svc.schemas(ctx.proj)]})


@add_route(SCHEMA, "schemas:show", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_show(ctx: Ctx, project: str, schema: str) -> Response:
    return ok(schema_view(ctx.proj, ctx.svc.schema(ctx.proj, schema)))


@add_route(SCHEMA, "schemas:create", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_create(ctx: Ctx, project: str, schema: str) -> Response:
    return ok(schema_view(ctx.proj, ctx.svc.create_schema(ctx.proj, schema, requests.new_schema(body()))))


@add_route(SCHEMA, "schemas:update", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_update(ctx: Ctx, project: str, schema: str) -> Response:
    found = ctx.svc.schema(ctx.proj, schema)  # 404 before the body
    return ok(schema_view(ctx.proj, ctx.svc.update_schema(found, requests.schema_update(body(), ctx.proj.name))))


@add_route(SCHEMA, "schemas:delete", "DELETE", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_delete(ctx: Ctx, project: str, schema: str) -> Response:
    ctx.svc.delete_schema(ctx.proj, schema)
    return empty()


@add_route(SCHEMA + ":validate", "schemas:validateMessage", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def schemas_validate(ctx: Ctx, project: str, schema: str) -> Response:
    found = ctx.svc.schema(ctx.proj, schema)  # an unknown schema is 404 before the body is looked at
    payload = body()
    if payload is None or payload is MALFORMED:
        raise AmsError.invalid_request_body()
    ctx.svc.validate_with_schema(found, payload)
    return ok({"message": "Message validated successfully"})
