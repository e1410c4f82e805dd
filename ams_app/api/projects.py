"""Projects and their members."""

from __future__ import annotations

from flask import Response

from ams_app.api.pipeline import MEMBER, PROJECT, Ctx, add_route, body, empty, flag, ok, page_answer, paging
from ams_app.api.users import privileged
from ams_app.api.views import project_view, user_view
from ams_app.auth import PROJECT_ADMIN, SERVICE_ADMIN
from ams_app.models import User
from ams_app.service import requests


@add_route("/projects", "projects:list", "GET", roles=(SERVICE_ADMIN,))
def projects_list(ctx: Ctx) -> Response:
    projects = [project_view(ctx.svc, p) for p in ctx.svc.projects()]
    return ok({"projects": projects} if projects else {})


@add_route(PROJECT, "projects:show", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def projects_show(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.proj))


@add_route(PROJECT, "projects:create", "POST", roles=(SERVICE_ADMIN,))
def projects_create(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.svc.create_project(ctx.caller, project, requests.project_description(body()))))


@add_route(PROJECT, "projects:update", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def projects_update(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.svc.update_project(ctx.proj, requests.project_update(body()))))


@add_route(PROJECT, "projects:delete", "DELETE", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def projects_delete(ctx: Ctx, project: str) -> Response:
    ctx.svc.delete_project(ctx.proj)
    return empty()


# --- members ---------------------------------------------------------------------------------------
def _member(ctx: Ctx, user: User) -> Response:
    if ctx.caller.is_service_admin:
        return ok(user_view(ctx.svc, user, privileged=True))
    return ok(user_view(ctx.svc, user, privileged=False, only_project=ctx.proj))


@add_route(PROJECT + "/members", "projects:listUsers", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_members(ctx.proj, *paging())
    details = flag("details")
    privileged = ctx.caller.is_service_admin
    users = [
        user_view(
            ctx.svc,
            u,
            privileged=privileged,
            only_project=None if privileged else ctx.proj,
            with_projects=details,
        )
        for u in page.items
    ]
    return page_answer("users", users, page)


@add_route(MEMBER, "projects:showUser", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_show(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.member(ctx.proj, user))


@add_route(MEMBER, "projects:createUser", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_create(ctx: Ctx, project: str, user: str) -> Response:
    return privileged(ctx, ctx.svc.create_member(ctx.caller, ctx.proj, user, requests.new_member(body())))


@add_route(MEMBER, "projects:updateUser", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_update(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.update_member(ctx.proj, user, requests.member_update(body())))


@add_route(MEMBER + ":add", "projects:addUser", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_add(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.add_member(ctx.proj, user, requests.member_roles(body())))


@add_route(MEMBER + ":remove", "projects:removeUser", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def members_remove(ctx: Ctx, project: str, user: str) -> Response:
    ctx.svc.remove_member(ctx.proj, user)
    return ok({})
