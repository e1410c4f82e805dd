"""Metrics: of the service (operational, VA, the Prometheus exposition outside /v1), of a
project, a topic and a subscription, and a user's usage report (docs/compatibility.md)."""

from __future__ import annotations

from flask import Blueprint, Response, request

from ams_app.api.pipeline import PROJECT, SUBSCRIPTION, TOPIC, Ctx, add_route, ok, open_route, request_token, service
from ams_app.auth import CONSUMER, METRICS_VIEWER, PROJECT_ADMIN, PUBLISHER, SERVICE_ADMIN
from ams_app.errors import AmsError
from ams_app.telemetry import TEXT_FORMAT

#: Outside the API: the Prometheus text exposition at /metrics (docs/monitoring.md).
prometheus_bp = Blueprint("prometheus", __name__)


@prometheus_bp.get("/metrics")
def prometheus() -> Response:
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else request_token()
    return Response(service().prometheus_page(token), status=200, content_type=TEXT_FORMAT)


@add_route("/metrics", "ams:metrics", "GET", roles=(SERVICE_ADMIN, METRICS_VIEWER))
def metrics_operational(ctx: Ctx) -> Response:
    return ok({"metrics": ctx.svc.operational_metrics()})


@add_route("/metrics/va_metrics", "ams:vaMetrics", "GET", roles=(SERVICE_ADMIN, METRICS_VIEWER))
def metrics_va(ctx: Ctx) -> Response:
    return ok(ctx.svc.va_metrics(request.args.to_dict()))


@open_route(
    "/users/usageReport", "users:usageReport", "GET", who="any user: the report covers what their roles let them see"
)
def users_usage_report() -> Response:
    svc = service()
    caller = svc.caller_for_token(request_token())
    if caller is None:
        raise AmsError.unauthorized()
    return ok(svc.usage_report(caller, request.args.to_dict()))


@add_route(PROJECT + ":metrics", "projects:metrics", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN))
def projects_metrics(ctx: Ctx, project: str) -> Response:
    return ok({"metrics": ctx.svc.project_metrics(ctx.proj)})


@add_route(TOPIC + ":metrics", "topics:metrics", "GET", roles=(SERVICE_ADMIN, PROJECT_ADMIN, PUBLISHER))
def topics_metrics(ctx: Ctx, project: str, topic: str) -> Response:
    return ok({"metrics": ctx.svc.topic_metrics(ctx.caller, ctx.proj, topic)})


@add_route(
    SUBSCRIPTION + ":metrics",
    "subscriptions:metrics",
    "GET",
    roles=(SERVICE_ADMIN, PROJECT_ADMIN, CONSUMER),
    owned=True,  # its owner knows the leases and deliveries it has not written yet
)
def subs_metrics(ctx: Ctx, project: str, subscription: str) -> Response:
    return ok({"metrics": ctx.svc.subscription_metrics(ctx.caller, ctx.proj, subscription)})
