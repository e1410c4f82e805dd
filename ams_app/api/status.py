"""The service's own routes: health, version and the OpenAPI document."""

from __future__ import annotations

import functools
import platform
from importlib import resources
from typing import Any

import yaml
from flask import Response

from ams_app import __version__, auth
from ams_app.api.pipeline import ok, open_route, request_token, service
from ams_app.errors import AmsError

#: When this build was made (set by packaging; empty in a source checkout).
BUILD_TIME = ""


@functools.cache
def openapi_document() -> dict[str, Any]:
    text = resources.files("ams_app").joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


@open_route("/status", "ams:healthStatus", "GET", who="anyone: the load balancer's health check")
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


@open_route("/version", "version:list", "GET", who="anyone; the release only to service admins and admin viewers")
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


@open_route("/openapi.json", "openapi:show", "GET", who="anyone: the API's document")
def openapi() -> Response:
    """The API's OpenAPI 3.1 document (ams_app/openapi.yaml), as JSON."""
    return ok(openapi_document())
