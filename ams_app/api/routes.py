"""The API v1 routes. Each handler parses, calls the service layer and renders."""

from __future__ import annotations

import functools
import platform
from importlib import resources
from typing import Any

import yaml
from flask import Blueprint, Response, request

from ams_app import __version__, auth
from ams_app.api.pipeline import MALFORMED, Ctx, add_route, body, empty, flag, ok, request_token, service
from ams_app.api.views import (
    delivery_view,
    project_view,
    registration_view,
    schema_view,
    sub_view,
    topic_view,
    user_view,
)
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Subscription, User
from ams_app.service.push_ops import active

bp = Blueprint("v1", __name__, url_prefix="/v1")
#: Outside the API: the Prometheus text exposition at /metrics.
prometheus_bp = Blueprint("prometheus", __name__)


@prometheus_bp.get("/metrics")
def prometheus() -> Response:
    svc = service()
    access = svc.settings.prometheus_access
    if access == "off":
        raise AmsError.not_found("Resource")
    if access == "token":
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else request_token()
        caller = svc.caller_for_token(token)
        if caller is None:
            raise AmsError.unauthorized()
        if not (caller.is_service_admin or caller.has("metrics_viewer")):
            raise AmsError.forbidden()
    return Response(svc.prometheus_text(), status=200, content_type="text/plain; version=0.0.4; charset=utf-8")


@functools.cache
def openapi_document() -> dict[str, Any]:
    text = resources.files("ams_app").joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


P = "/projects/<name:project>"
T = P + "/topics/<name:topic>"
S = P + "/subscriptions/<name:subscription>"
U = "/users/<name:user>"
M = P + "/members/<name:user>"
SC = P + "/schemas/<name:schema>"
R = "/registrations/<name:uuid>"

#: When this build was made (set by packaging; empty in a source checkout).
BUILD_TIME = ""


# ---------------------------------------------------------------------- service ------------
@bp.get("/status")
def status() -> Response:
    svc = service()
    down = list(svc.unavailable)  # checked in the background: a stalled backend cannot stall this
    if not svc.backend_healthy:
        raise AmsError.unavailable(f"Backend is unavailable: {', '.join(down)}")
    out: dict[str, Any]
    if not svc.settings.push_enabled:
        out = {"status": "ok", "push_functionality": "disabled"}
    else:
        servers = svc.push_servers()  # from memory: this never waits on ZooKeeper
        out = {"status": "ok" if servers else "warning", "push_servers": servers}
    if down:  # ZooKeeper: the node serves on, but metadata changes and push ownership wait
        out["status"] = "warning"
        out["unavailable"] = down
    return ok(out)


@bp.get("/version")
def version() -> Response:
    svc = service()
    out: dict[str, str] = {
        "build_time": BUILD_TIME,
        "golang": "",
        "compiler": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.system().lower(),
        "architecture": platform.machine(),
    }
    caller = svc.caller_for_token(request_token())
    if caller is not None and (caller.is_service_admin or caller.has(auth.ADMIN_VIEWER)):
        out["release"] = __version__
    if svc.settings.proxy_hostname:
        out["hostname"] = svc.settings.proxy_hostname
    return ok(out)


@bp.get("/openapi.json")
def openapi() -> Response:
    """The API's OpenAPI 3.1 document (ams_app/openapi.yaml), as JSON."""
    return ok(openapi_document())


@add_route(bp, "/metrics", "ams:metrics", "GET")
def metrics_operational(ctx: Ctx) -> Response:
    return ok({"metrics": ctx.svc.operational_metrics()})


@add_route(bp, "/metrics/va_metrics", "ams:vaMetrics", "GET")
def metrics_va(ctx: Ctx) -> Response:
    return ok(ctx.svc.va_metrics(request.args.to_dict()))


@bp.get("/users/usageReport")
def users_usage_report() -> Response:
    svc = service()
    caller = svc.caller_for_token(request_token())
    if caller is None:
        raise AmsError.unauthorized()
    return ok(svc.usage_report(caller, request.args.to_dict()))


@add_route(bp, P + ":metrics", "projects:metrics", "GET")
def projects_metrics(ctx: Ctx, project: str) -> Response:
    return ok({"metrics": ctx.svc.project_metrics(ctx.proj)})


@add_route(bp, T + ":metrics", "topics:metrics", "GET")
def topics_metrics(ctx: Ctx, project: str, topic: str) -> Response:
    return ok({"metrics": ctx.svc.topic_metrics(ctx.caller, ctx.proj, topic)})


@add_route(bp, S + ":metrics", "subscriptions:metrics", "GET")
def subs_metrics(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"metrics": ctx.svc.subscription_metrics(ctx.caller, ctx.proj, subscription)})


# ---------------------------------------------------------------------- users --------------
def _paging() -> tuple[str | None, str | None]:
    """pageSize and pageToken (argo-ams-library sends the token as nextPageToken)."""
    args = request.args
    return args.get("pageSize"), args.get("pageToken") or args.get("nextPageToken")


def _page(key: str, items: list[Any], page: Page[Any]) -> Response:
    return ok({key: items, "nextPageToken": page.next_page_token, "totalSize": page.total_size})


def _privileged(ctx: Ctx, user: User) -> Response:
    return ok(user_view(ctx.svc, user, privileged=True))


@bp.get("/users/profile")
def users_profile() -> Response:
    svc = service()
    caller = svc.caller_for_token(request_token())
    if caller is None or caller.user is None:
        raise AmsError.unauthorized()
    return ok(user_view(svc, caller.user, privileged=True))


@add_route(bp, "/users", "users:list", "GET")
def users_list(ctx: Ctx) -> Response:
    page = ctx.svc.list_users(request.args.get("project"), *_paging())
    details = flag("details")
    users = [user_view(ctx.svc, u, privileged=True, with_projects=details) for u in page.items]
    return _page("users", users, page)


@add_route(bp, "/users:byToken/<name:token>", "users:byToken", "GET")
def users_by_token(ctx: Ctx, token: str) -> Response:
    return _privileged(ctx, ctx.svc.user_by_token(token))


@add_route(bp, "/users:byUUID/<name:uuid>", "users:byUUID", "GET")
def users_by_uuid(ctx: Ctx, uuid: str) -> Response:
    return _privileged(ctx, ctx.svc.user_by_uuid(uuid))


@add_route(bp, U, "users:show", "GET")
def users_show(ctx: Ctx, user: str) -> Response:
    return _privileged(ctx, ctx.svc.user(user))


@add_route(bp, U, "users:create", "POST")
def users_create(ctx: Ctx, user: str) -> Response:
    return _privileged(ctx, ctx.svc.create_user(ctx.caller, user, body()))


@add_route(bp, U, "users:update", "PUT")
def users_update(ctx: Ctx, user: str) -> Response:
    return _privileged(ctx, ctx.svc.update_user(user, body()))


@add_route(bp, U + ":refreshToken", "users:refreshToken", "POST")
def users_refresh(ctx: Ctx, user: str) -> Response:
    return _privileged(ctx, ctx.svc.refresh_token(user))


@add_route(bp, U, "users:delete", "DELETE")
def users_delete(ctx: Ctx, user: str) -> Response:
    ctx.svc.delete_user(user)
    return empty()


# ---------------------------------------------------------------------- projects -----------
@add_route(bp, "/projects", "projects:list", "GET")
def projects_list(ctx: Ctx) -> Response:
    projects = [project_view(ctx.svc, p) for p in ctx.svc.projects()]
    return ok({"projects": projects} if projects else {})


@add_route(bp, P, "projects:show", "GET")
def projects_show(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.proj))


@add_route(bp, P, "projects:create", "POST")
def projects_create(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.svc.create_project(ctx.caller, project, body())))


@add_route(bp, P, "projects:update", "PUT")
def projects_update(ctx: Ctx, project: str) -> Response:
    return ok(project_view(ctx.svc, ctx.svc.update_project(ctx.proj, body())))


@add_route(bp, P, "projects:delete", "DELETE")
def projects_delete(ctx: Ctx, project: str) -> Response:
    ctx.svc.delete_project(ctx.proj)
    return empty()


# ---------------------------------------------------------------------- members ------------
def _member(ctx: Ctx, user: User) -> Response:
    if ctx.caller.is_service_admin:
        return ok(user_view(ctx.svc, user, privileged=True))
    return ok(user_view(ctx.svc, user, privileged=False, only_project=ctx.proj))


@add_route(bp, P + "/members", "projects:listUsers", "GET")
def members_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_members(ctx.proj, *_paging())
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
    return _page("users", users, page)


@add_route(bp, M, "projects:showUser", "GET")
def members_show(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.member(ctx.proj, user))


@add_route(bp, M, "projects:createUser", "POST")
def members_create(ctx: Ctx, project: str, user: str) -> Response:
    return _privileged(ctx, ctx.svc.create_member(ctx.caller, ctx.proj, user, body()))


@add_route(bp, M, "projects:updateUser", "PUT")
def members_update(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.update_member(ctx.proj, user, body()))


@add_route(bp, M + ":add", "projects:addUser", "POST")
def members_add(ctx: Ctx, project: str, user: str) -> Response:
    return _member(ctx, ctx.svc.add_member(ctx.proj, user, body()))


@add_route(bp, M + ":remove", "projects:removeUser", "POST")
def members_remove(ctx: Ctx, project: str, user: str) -> Response:
    ctx.svc.remove_member(ctx.proj, user)
    return ok({})


# ---------------------------------------------------------------------- topics -------------
@add_route(bp, P + "/topics", "topics:list", "GET")
def topics_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_topics(ctx.caller, ctx.proj, *_paging())
    names = ctx.svc.schema_names(ctx.proj) if any(t.schema_uuid for t in page.items) else {}
    return _page("topics", [topic_view(ctx.proj, t, names.get(t.schema_uuid)) for t in page.items], page)


@add_route(bp, T, "topics:show", "GET")
def topics_show(ctx: Ctx, project: str, topic: str) -> Response:
    found = ctx.svc.topic(ctx.proj, topic)
    return ok(topic_view(ctx.proj, found, ctx.svc.topic_schema_name(ctx.proj, found)))


@add_route(bp, T, "topics:create", "PUT")
def topics_create(ctx: Ctx, project: str, topic: str) -> Response:
    created = ctx.svc.create_topic(ctx.proj, topic, body())
    return ok(topic_view(ctx.proj, created, ctx.svc.topic_schema_name(ctx.proj, created)))


@add_route(bp, T, "topics:delete", "DELETE")
def topics_delete(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.delete_topic(ctx.proj, topic)
    return empty()


@add_route(bp, T + ":publish", "topics:publish", "POST")
def topics_publish(ctx: Ctx, project: str, topic: str) -> Response:
    return ok({"messageIds": ctx.svc.publish(ctx.caller, ctx.proj, topic, body())})


@add_route(bp, T + ":acl", "topics:acl", "GET")
def topics_acl(ctx: Ctx, project: str, topic: str) -> Response:
    return ok({"authorized_users": ctx.svc.acl_names(ctx.svc.topic(ctx.proj, topic).acl)})


@add_route(bp, T + ":modifyAcl", "topics:modifyAcl", "POST")
def topics_modify_acl(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.modify_topic_acl(ctx.proj, topic, body())
    return empty()


@add_route(bp, T + "/subscriptions", "subscriptions:listByTopic", "GET")
def topics_subscriptions(ctx: Ctx, project: str, topic: str) -> Response:
    names = ctx.svc.topic_subscriptions(ctx.proj, topic)
    return ok({"subscriptions": [f"/projects/{ctx.proj.name}/subscriptions/{n}" for n in names]})


@add_route(bp, T + ":attachSchema", "topics:attachSchema", "POST")
def topics_attach_schema(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.attach_schema(ctx.proj, topic, body())
    return empty()


@add_route(bp, T + ":detachSchema", "topics:detachSchema", "POST")
def topics_detach_schema(ctx: Ctx, project: str, topic: str) -> Response:
    ctx.svc.detach_schema(ctx.proj, topic)
    return empty()


# ---------------------------------------------------------------------- schemas ------------
@add_route(bp, P + "/schemas", "schemas:list", "GET")
def schemas_list(ctx: Ctx, project: str) -> Response:
    return ok({"schemas": [schema_view(ctx.proj, s) for s in ctx.svc.schemas(ctx.proj)]})


@add_route(bp, SC, "schemas:show", "GET")
def schemas_show(ctx: Ctx, project: str, schema: str) -> Response:
    return ok(schema_view(ctx.proj, ctx.svc.schema(ctx.proj, schema)))


@add_route(bp, SC, "schemas:create", "POST")
def schemas_create(ctx: Ctx, project: str, schema: str) -> Response:
    return ok(schema_view(ctx.proj, ctx.svc.create_schema(ctx.proj, schema, body())))


@add_route(bp, SC, "schemas:update", "PUT")
def schemas_update(ctx: Ctx, project: str, schema: str) -> Response:
    return ok(schema_view(ctx.proj, ctx.svc.update_schema(ctx.proj, schema, body())))


@add_route(bp, SC, "schemas:delete", "DELETE")
def schemas_delete(ctx: Ctx, project: str, schema: str) -> Response:
    ctx.svc.delete_schema(ctx.proj, schema)
    return empty()


@add_route(bp, SC + ":validate", "schemas:validateMessage", "POST")
def schemas_validate(ctx: Ctx, project: str, schema: str) -> Response:
    found = ctx.svc.schema(ctx.proj, schema)  # an unknown schema is 404 before the body is looked at
    payload = body()
    if payload is None or payload is MALFORMED:
        raise AmsError.invalid_request_body()
    ctx.svc.validate_with_schema(found, payload)
    return ok({"message": "Message validated successfully"})


# ---------------------------------------------------------------------- registrations ------
@add_route(bp, "/registrations", "registrations:newUser", "POST")
def registrations_create(ctx: Ctx) -> Response:
    return ok(registration_view(ctx.svc, ctx.svc.register(body())))


@add_route(bp, "/registrations", "registrations:list", "GET")
def registrations_list(ctx: Ctx) -> Response:
    found = ctx.svc.list_registrations(request.args.to_dict())
    return ok({"user_registrations": [registration_view(ctx.svc, r) for r in found]})


@add_route(bp, R, "registrations:show", "GET")
def registrations_show(ctx: Ctx, uuid: str) -> Response:
    return ok(registration_view(ctx.svc, ctx.svc.registration(uuid)))


@add_route(bp, R + ":accept", "registrations:acceptNewUser", "POST")
def registrations_accept(ctx: Ctx, uuid: str) -> Response:
    return _privileged(ctx, ctx.svc.accept_registration(ctx.caller, uuid))


@add_route(bp, R + ":decline", "registrations:declineNewUser", "POST")
def registrations_decline(ctx: Ctx, uuid: str) -> Response:
    ctx.svc.decline_registration(ctx.caller, uuid, body())
    return ok({})


@add_route(bp, R, "registrations:delete", "DELETE")
def registrations_delete(ctx: Ctx, uuid: str) -> Response:
    ctx.svc.delete_registration(uuid)
    return empty()


# ---------------------------------------------------------------------- subscriptions ------
def _sub_views(ctx: Ctx, subs: list[Subscription]) -> list[dict[str, Any]]:
    """Subscriptions as shown, with ``pushStatus`` on the active push ones."""
    pushed = [s for s in subs if active(s)]
    claims = ctx.svc.push_claims(ctx.proj, pushed) if pushed else None
    return [sub_view(ctx.proj, s, ctx.svc.push_status(ctx.proj, s, claims) if active(s) else None) for s in subs]


@add_route(bp, P + "/subscriptions", "subscriptions:list", "GET")
def subs_list(ctx: Ctx, project: str) -> Response:
    page = ctx.svc.list_subscriptions(ctx.caller, ctx.proj, *_paging())
    return _page("subscriptions", _sub_views(ctx, page.items), page)


@add_route(bp, S, "subscriptions:show", "GET")
def subs_show(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok(_sub_views(ctx, [ctx.svc.subscription(ctx.proj, subscription)])[0])


@add_route(bp, S, "subscriptions:create", "PUT")
def subs_create(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok(_sub_views(ctx, [ctx.svc.create_subscription(ctx.proj, subscription, body())])[0])


@add_route(bp, S, "subscriptions:delete", "DELETE")
def subs_delete(ctx: Ctx, project: str, subscription: str) -> Response:
    message = ctx.svc.delete_subscription(ctx.proj, subscription)
    # always a JSON object, so that the document can say what comes (docs/compatibility.md)
    return ok({"message": message} if message else {})


@add_route(bp, S + ":pull", "subscriptions:pull", "POST")
def subs_pull(ctx: Ctx, project: str, subscription: str) -> Response:
    payload = body()
    deliveries = ctx.svc.pull(ctx.caller, ctx.proj, subscription, {} if payload is None else payload)
    return ok({"receivedMessages": [delivery_view(d) for d in deliveries]})


@add_route(bp, S + ":acknowledge", "subscriptions:acknowledge", "POST")
def subs_ack(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.acknowledge(ctx.proj, subscription, body())
    return ok({})


@add_route(bp, S + ":modifyAckDeadline", "subscriptions:modifyAckDeadline", "POST")
def subs_modify_deadline(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_ack_deadline(ctx.proj, subscription, body())
    return empty()


@add_route(bp, S + ":modifyPushConfig", "subscriptions:modifyPushConfig", "POST")
def subs_modify_push(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_push_config(ctx.proj, subscription, body())
    return empty()


@add_route(bp, S + ":verifyPushEndpoint", "subscriptions:verifyPushEndpoint", "POST")
def subs_verify_push(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.verify_push_endpoint(ctx.proj, subscription)
    return empty()


@add_route(bp, S + ":offsets", "subscriptions:offsets", "GET")
def subs_offsets(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok(ctx.svc.offsets(ctx.proj, subscription))


@add_route(bp, S + ":modifyOffset", "subscriptions:modifyOffset", "POST")
def subs_modify_offset(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_offset(ctx.proj, subscription, body())
    return empty()


@add_route(bp, S + ":timeToOffset", "subscriptions:timeToOffset", "GET")
def subs_time_to_offset(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"offset": ctx.svc.time_to_offset(ctx.proj, subscription, request.args.get("time"))})


@add_route(bp, S + ":acl", "subscriptions:acl", "GET")
def subs_acl(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"authorized_users": ctx.svc.acl_names(ctx.svc.subscription(ctx.proj, subscription).acl)})


@add_route(bp, S + ":modifyAcl", "subscriptions:modifyAcl", "POST")
def subs_modify_acl(ctx: Ctx, project: str, subscription: str) -> Response:
    ctx.svc.modify_sub_acl(ctx.proj, subscription, body())
    return empty()
