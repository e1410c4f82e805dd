"""Users: the service admins' user management, lookups by token and uuid, and a user's own profile."""

from __future__ import annotations

from flask import Response, request

from ams_app.api.pipeline import (
    USER,
    Ctx,
    add_route,
    body,
    empty,
    flag,
    ok,
    open_route,
    page_answer,
    paging,
    request_token,
    service,
)
from ams_app.api.views import user_view
from ams_app.auth import ARGO_API_AUTHN, PUSH_WORKER, SERVICE_ADMIN
from ams_app.errors import AmsError
from ams_app.models import User
from ams_app.service import requests


def privileged(ctx: Ctx, user: User) -> Response:
    return ok(user_view(ctx.svc, user, privileged=True))


@open_route("/users/profile", "users:profile", "GET", who="any user, about themselves")
def users_profile() -> Response:
    svc = service()
    caller = svc.caller_for_token(request_token())
    if caller is None or caller.user is None:
        raise AmsError.unauthorized()
    return ok(user_view(svc, caller.user, privileged=True))


@add_route("/users", "users:list", "GET", roles=(SERVICE_ADMIN,))
def users_list(ctx: Ctx) -> Response:
    page = ctx.svc.list_users(request.args.get("project"), *paging())
    details = flag("details")
    users = [user_view(ctx.svc, u, privileged=True, with_projects=details) for u in page.items]
    return page_answer("users", users, page)


@add_route("/users:byToken/<name:token>", "users:byToken", "GET", roles=(SERVICE_ADMIN, PUSH_WORKER))
def users_by_token(ctx: Ctx, token: str) -> Response:
    return privileged(ctx, ctx.svc.user_by_token(token))


@add_route("/users:byUUID/<name:uuid>", "users:byUUID", "GET", roles=(SERVICE_ADMIN, ARGO_API_AUTHN))
def users_by_uuid(ctx: Ctx, uuid: str) -> Response:
    return privileged(ctx, ctx.svc.user_by_uuid(uuid))


@add_route(USER, "users:show", "GET", roles=(SERVICE_ADMIN,))
def users_show(ctx: Ctx, user: str) -> Response:
    return privileged(ctx, ctx.svc.user(user))


@add_route(USER, "users:create", "POST", roles=(SERVICE_ADMIN,))
def users_create(ctx: Ctx, user: str) -> Response:
    return privileged(ctx, ctx.svc.create_user(ctx.caller, user, requests.new_user(body())))


@add_route(USER, "users:update", "PUT", roles=(SERVICE_ADMIN,))
def users_update(ctx: Ctx, user: str) -> Response:
    found = ctx.svc.user(user)  # 404 before the body
    return privileged(ctx, ctx.svc.update_user(found, requests.user_update(body())))


@add_route(USER + ":refreshToken", "users:refreshToken", "POST", roles=(SERVICE_ADMIN,))
def users_refresh(ctx: Ctx, user: str) -> Response:
    return privileged(ctx, ctx.svc.refresh_token(user))


@add_route(USER, "users:delete", "DELETE", roles=(SERVICE_ADMIN,))
def users_delete(ctx: Ctx, user: str) -> Response:
    ctx.svc.delete_user(user)
    return empty()
