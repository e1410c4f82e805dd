"""Topics: create, publish, ACLs and schemas (docs/compatibility.md)."""

from __future__ import annotations

from flask import Response

from ams_app.api.pipeline import PROJECT, TOPIC, Ctx, add_route, body, empty, ok, page_answer, paging
from ams_app.api.views import topic_view
from ams_app.auth import PROJECT_ADMIN, PUBLISHER, SERVICE_ADMIN
from ams_app.service import requests


@add_route(PROJECT + "/topics", "topics:list", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, PUBLISHER))
def topics_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_topics(ctx.caller, ctx.proj, *paging())
    names = ctx.svc.schema_names(ctx.proj) if any(t.schema_uuid for t in page.items) else {}
    return page_answer("topics", [topic_view(ctx.proj, t, names.get(t.schema_uuid)) for t in page.items], page)


@add_route(TOPIC, "topics:show", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, PUBLISHER))
def topics_show(ctx: Ctx, project: str, topic: str) -> Response:
    found = ctx.svc.topic(ctx.proj, topic)
    return ok(topic_view(ctx.proj, found, ctx.svc.topic_schema_name(ctx.proj, found)))


@add_route(TOPIC, "topics:create", "PUT", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_create(ctx: Ctx, project: str, topic: str) -> Response:
    created = ctx.svc.create_topic(ctx.proj, topic, requests.new_topic(body(), ctx.proj.name))
    return ok(topic_view(ctx.proj, created, ctx.svc.topic_schema_name(ctx.proj, created)))


@add_route(TOPIC, "topics:delete", "DELETE", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_delete(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.delete_topic(ctx.proj, topic)
    return empty()


@add_route(TOPIC + ":publish", "topics:publish", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN, PUBLISHER))
def topics_publish(ctx: Ctx, project: str, topic: str) -> Response:
    found = ctx.svc.topic_to_publish(ctx.caller, ctx.proj, topic)  # 404 and 403 before the body
    messages = requests.messages(body(), ctx.svc.settings)
    return ok({"messageIds": ctx.svc.publish(ctx.proj, found, messages)})


@add_route(TOPIC + ":acl", "topics:acl", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_acl(ctx: Ctx, project: str, topic: str) -> Response:
    return ok({"authorized_users": ctx.svc.acl_names(ctx.svc.topic(ctx.proj, topic).acl)})


@add_route(TOPIC + ":modifyAcl", "topics:modifyAcl", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_modify_acl(ctx: Ctx, project: str, topic: str) -> Response:
    found = ctx.svc.topic(ctx.proj, topic)
    ctx.svc.set_topic_acl(ctx.proj, found, requests.acl_names(body(), "Topic"))
    return empty()


@add_route(TOPIC + "/subscriptions", "subscriptions:listByTopic", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_subscriptions(ctx: Ctx, project: str, topic: str) -> Response:
    names = ctx.svc.topic_subscriptions(ctx.proj, topic)
    return ok({"subscriptions": [f"/projects/{ctx.proj.name}/subscriptions/{n}" for n in names]})


@add_route(TOPIC + ":attachSchema", "topics:attachSchema", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_attach_schema(ctx: Ctx, project: str, topic: str) -> Response:
    found = ctx.svc.topic(ctx.proj, topic)
    attached = requests.attached_schema(body(), ctx.proj.name)
    ctx.svc.attach_schema(ctx.proj, found, attached.schema, attached.encoding)
    return empty()


@add_route(TOPIC + ":detachSchema", "topics:detachSchema", "POST", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def topics_detach_schema(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.detach_schema(ctx.proj, topic)
    return empty()
