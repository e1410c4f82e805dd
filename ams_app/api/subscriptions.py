"""Subscriptions: create, pull and acknowledge, offsets and replay, push configuration, ACLs."""

from __future__ import annotations

from typing import Any

from flask import Response, request

from ams_app.api.forward import ACKS_HEADER, EACH
from ams_app.api.pipeline import (
    PROJECT,
    SUBSCRIPTION,
    Ctx,
    add_route,
    body,
    empty,
    ok,
    page_answer,
    paging,
    received_ns,
)
from ams_app.api.views import delivery_view, sub_view
from ams_app.auth import CONSUMER, PROJECT_ADMIN, PUSH_WORKER, SERVICE_ADMIN
from ams_app.models import Subscription
from ams_app.service import requests
from ams_app.service.push import active


def _sub_views(ctx: Ctx, subs: list[Subscription]) -> list[dict[str, Any]]:
    """Subscriptions as shown, with ``pushStatus`` on the active push ones."""
    pushed = [s for s in subs if active(s)]
    claims = ctx.svc.push_claims(ctx.proj, pushed) if pushed else None
    return [sub_view(ctx.proj, s, ctx.svc.push_status(ctx.proj, s, claims) if active(s) else None) for s in subs]


@add_route(PROJECT + "/subscriptions", "subscriptions:list", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER))
def subs_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_subscriptions(ctx.caller, ctx.proj, *paging())
    return page_answer("subscriptions", _sub_views(ctx, page.items), page)


@add_route(SUBSCRIPTION, "subscriptions:show", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER, PUSH_WORKER))
def subs_show(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok(_sub_views(ctx, [ctx.svc.subscription(ctx.proj, subscription)])[0])


@add_route(SUBSCRIPTION, "subscriptions:create", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def subs_create(ctx: Ctx, project: str, subscription: str) -> Response:
    created = ctx.svc.create_subscription(ctx.proj, subscription, requests.new_subscription(body(), ctx.proj.name))
    return ok(_sub_views(ctx, [created])[0])


@add_route(SUBSCRIPTION, "subscriptions:delete", "DELETE", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def subs_delete(ctx: Ctx, project: str, subscription: str) -> Response:
    message = ctx.svc.delete_subscription(ctx.proj, subscription)
    # always a JSON object, so that the document can say what comes (docs/compatibility.md)
    return ok({"message": message} if message else {})


@add_route(
    SUBSCRIPTION + ":pull",
    "subscriptions:pull",
    "POST",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER, PUSH_WORKER),
    owned=True,
)
def subs_pull(ctx: Ctx, project: str, subscription: str) -> Response:
    found = ctx.svc.subscription_to_pull(ctx.caller, ctx.proj, subscription)  # 404, 403, 409 first
    deliveries = ctx.svc.pull(ctx.proj, found, requests.pull_request(body()))
    return ok({"receivedMessages": [delivery_view(d) for d in deliveries]})


@add_route(
    SUBSCRIPTION + ":acknowledge",
    "subscriptions:acknowledge",
    "POST",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER, PUSH_WORKER),
    owned=True,
)
def subs_ack(ctx: Ctx, project: str, subscription: str) -> Response:
    found = ctx.svc.subscription(ctx.proj, subscription)
    refs = requests.acknowledgement(body(), ctx.proj.name, found.name)
    # the AMS meaning on a plain subscription: an ack id acknowledges its pull up to it; Pub/Sub's
    # (each id its own message) when the gRPC API sends an acknowledgement on (ams_app/pubsub/owned.py)
    each = request.headers.get(ACKS_HEADER) == EACH
    ctx.svc.acknowledge(ctx.proj, found, refs, received_ns(), cumulative=not (found.per_message or each))
    return ok({})


@add_route(
    SUBSCRIPTION + ":modifyAckDeadline",
    "subscriptions:modifyAckDeadline",
    "POST",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER),
    owned=True,
)
def subs_modify_deadline(ctx: Ctx, project: str, subscription: str) -> Response:
    change = requests.ack_deadline(body(), ctx.proj.name, subscription)
    ctx.svc.modify_ack_deadline(ctx.proj, subscription, change, received_ns())
    return empty()


@add_route(
    SUBSCRIPTION + ":modifyPushConfig", "subscriptions:modifyPushConfig", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN)
)
def subs_modify_push(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_push_config(ctx.proj, subscription, requests.push_change(body()))
    return empty()


@add_route(
    SUBSCRIPTION + ":verifyPushEndpoint",
    "subscriptions:verifyPushEndpoint",
    "POST",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN),
)
def subs_verify_push(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.verify_push_endpoint(ctx.proj, subscription)
    return empty()


@add_route(
    SUBSCRIPTION + ":offsets",
    "subscriptions:offsets",
    "GET",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER),
    owned=True,
)
def subs_offsets(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok(ctx.svc.offsets(ctx.proj, subscription))


@add_route(
    SUBSCRIPTION + ":modifyOffset",
    "subscriptions:modifyOffset",
    "POST",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER),
    owned=True,
)
def subs_modify_offset(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_offset(ctx.proj, subscription, requests.offset(body()))
    return empty()


@add_route(
    SUBSCRIPTION + ":timeToOffset", "subscriptions:timeToOffset", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER)
)
def subs_time_to_offset(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"offset": ctx.svc.time_to_offset(ctx.proj, subscription, request.args.get("time"))})


@add_route(SUBSCRIPTION + ":acl", "subscriptions:acl", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def subs_acl(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"authorized_users": ctx.svc.acl_names(ctx.svc.subscription(ctx.proj, subscription).acl)})


@add_route(SUBSCRIPTION + ":modifyAcl", "subscriptions:modifyAcl", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def subs_modify_acl(ctx: Ctx, project: str, subscription: str) -> Response:
    found = ctx.svc.subscription(ctx.proj, subscription)
    ctx.svc.set_subscription_acl(ctx.proj, found, requests.acl_names(body(), "Subscription"))
    return empty()
