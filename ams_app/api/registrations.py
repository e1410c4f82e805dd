"""Registrations: people asking for an account, and the admins who accept or decline them."""

from __future__ import annotations

from flask import Response, request

from ams_app.api.pipeline import REGISTRATION, Ctx, add_route, body, empty, ok
from ams_app.api.users import privileged
from ams_app.api.views import registration_view
from ams_app.auth import REGISTER_ADMIN, SERVICE_ADMIN
from ams_app.service import requests


@add_route("/registrations", "registrations:newUser", "POST", roles=(SERVICE_ADMIN, REGISTER_ADMIN))
def registrations_create(ctx: Ctx) -> Response:
    return ok(registration_view(ctx.svc, ctx.svc.register(requests.new_registration(body()))))


@add_route("/registrations", "registrations:list", "GET", roles=(SERVICE_ADMIN,))
def registrations_list(ctx: Ctx) -> Response:
    found = ctx.svc.list_registrations(request.args.to_dict())
    return ok({"user_registrations": [registration_view(ctx.svc, r) for r in found]})


@add_route(REGISTRATION, "registrations:show", "GET", roles=(SERVICE_ADMIN,))
def registrations_show(ctx: Ctx, uuid: str) -> Response:
    return ok(registration_view(ctx.svc, ctx.svc.registration(uuid)))


@add_route(REGISTRATION + ":accept", "registrations:acceptNewUser", "POST", roles=(SERVICE_ADMIN,))
def registrations_accept(ctx: Ctx, uuid: str) -> Response:
    return privileged(ctx, ctx.svc.accept_registration(ctx.caller, uuid))


@add_route(REGISTRATION + ":decline", "registrations:declineNewUser", "POST", roles=(SERVICE_ADMIN,))
def registrations_decline(ctx: Ctx, uuid: str) -> Response:
    ctx.svc.decline_registration(ctx.caller, uuid, requests.decline_comment(body()))
    return ok({})


@add_route(REGISTRATION, "registrations:delete", "DELETE", roles=(SERVICE_ADMIN,))
def registrations_delete(ctx: Ctx, uuid: str) -> Response:
    ctx.svc.delete_registration(uuid)
    return empty()
