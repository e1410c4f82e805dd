"""Snapshots of subscriptions, and seeking a subscription to one or to a time (docs/delivery.md)."""

from __future__ import annotations

from flask import Response

from ams_app.api.pipeline import PROJECT, SNAPSHOT, SUBSCRIPTION, Ctx, add_route, body, empty, ok, page_answer, paging
from ams_app.api.views import snapshot_view
from ams_app.auth import CONSUMER, PROJECT_ADMIN, SERVICE_ADMIN
from ams_app.service import requests


@add_route(PROJECT + "/snapshots", "snapshots:list", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER))
def snapshots_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_snapshots(ctx.proj, *paging())
    return page_answer("snapshots", [snapshot_view(ctx.proj, s) for s in page.items], page)


@add_route(SNAPSHOT, "snapshots:show", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER))
def snapshots_show(ctx: Ctx, project: str, snapshot: str) -> Response:
    return ok(snapshot_view(ctx.proj, ctx.svc.snapshot(ctx.proj, snapshot)))


@add_route(SNAPSHOT, "snapshots:create", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER))
def snapshots_create(ctx: Ctx, project: str, snapshot: str) -> Response:
    source = requests.snapshot_source(body(), ctx.proj.name)
    return ok(snapshot_view(ctx.proj, ctx.svc.create_snapshot(ctx.caller, ctx.proj, snapshot, source)))


@add_route(SNAPSHOT, "snapshots:delete", "DELETE", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def snapshots_delete(ctx: Ctx, project: str, snapshot: str) -> Response:
    ctx.svc.delete_snapshot(ctx.proj, snapshot)
    return empty()


@add_route(
    SUBSCRIPTION + ":seek", "subscriptions:seek", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER), owned=True
)
def subs_seek(ctx: Ctx, project: str, subscription: str) -> Response:
    found = ctx.svc.subscription(ctx.proj, subscription)
    ctx.svc.seek(ctx.caller, ctx.proj, found, requests.seek_target(body(), ctx.proj.name))
    return ok({})
