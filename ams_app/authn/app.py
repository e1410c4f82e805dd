"""AuthN's HTTP API (ams_app/authn/openapi.yaml): the x509 call and the management of service
types and bindings. Every answer is JSON; every failure is the AMS error envelope."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from importlib import resources
from typing import Any

import yaml
from flask import Blueprint, Flask, Response, current_app, request
from pymongo.errors import ConnectionFailure
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES

from ams_app import __version__
from ams_app.api.pipeline import JSON_TYPE, MALFORMED, body, request_token
from ams_app.authn import requests
from ams_app.authn.service import AuthnService
from ams_app.errors import AmsError
from ams_app.errors_http import render
from ams_app.models import Binding, ServiceType

logger = logging.getLogger("ams.authn")

#: The WSGI environ key the TLS layer fills with the client's certificate chain (never a header).
PEER_CHAIN = "ams.authn.peer_chain"
#: Largest request body: bindings and service types are small.
MAX_BODY = 64 * 1024

bp = Blueprint("authn", __name__, url_prefix="/v1")


def _svc() -> AuthnService:
    svc: AuthnService = current_app.extensions["authn"]
    return svc


def _ok(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status=status, content_type=JSON_TYPE)


def _body() -> Any:
    parsed = body()
    if parsed is MALFORMED:
        raise AmsError.invalid_request_body()
    return parsed


def admin_only(view: Callable[..., Response]) -> Callable[..., Response]:
    """The management routes: a service admin's AMS token (``x-api-key`` or ``?key=``)."""

    @functools.wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Response:
        verdict = _svc().is_service_admin(request_token())
        if verdict is None:
            raise AmsError.unauthorized()
        if not verdict:
            raise AmsError.forbidden()
        return view(*args, **kwargs)

    return guarded


def service_type_view(st: ServiceType) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": st.name,
        "hosts": st.hosts,
        "auth_types": st.auth_types,
        "type": st.type,
        "uuid": st.uuid,
        "created_on": st.created_on,
    }
    if st.updated_on:
        out["updated_on"] = st.updated_on
    return out


def binding_view(b: Binding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": b.name,
        "service_uuid": b.service_uuid,
        "host": b.host,
        "uuid": b.uuid,
        "auth_identifier": b.auth_identifier,
        "unique_key": b.unique_key,
        "auth_type": b.auth_type,
        "created_on": b.created_on,
    }
    if b.updated_on:
        out["updated_on"] = b.updated_on
    if b.last_auth:
        out["last_auth"] = b.last_auth
    return out


# ---------------------------------------------------------------------- the x509 call -------
@bp.get("/service-types/<service_type>/hosts/<host>:authx509")
def authx509(service_type: str, host: str) -> Response:
    """The token of the AMS user bound to the client certificate's DN on ``host``. Only the TLS
    layer's certificate counts; no header can stand in for it."""
    chain = request.environ.get(PEER_CHAIN) or []
    return _ok({"token": _svc().token_for(chain, service_type, host)})


# ---------------------------------------------------------------------- service types -------
@bp.get("/service-types")
@admin_only
def list_service_types() -> Response:
    return _ok({"service_types": [service_type_view(st) for st in _svc().service_types()]})


@bp.post("/service-types")
@admin_only
def create_service_type() -> Response:
    return _ok(service_type_view(_svc().create_service_type(requests.new_service_type(_body()))), 201)


@bp.get("/service-types/<service_type>")
@admin_only
def show_service_type(service_type: str) -> Response:
    return _ok(service_type_view(_svc().service_type(service_type)))


@bp.put("/service-types/<service_type>")
@admin_only
def update_service_type(service_type: str) -> Response:
    raw = _body()  # a body that is not JSON is 400 first
    svc = _svc()
    found = svc.service_type(service_type)
    return _ok(service_type_view(svc.update_service_type(found, requests.service_type_update(raw))))


@bp.delete("/service-types/<service_type>")
@admin_only
def delete_service_type(service_type: str) -> Response:
    _svc().delete_service_type(service_type)
    return Response(status=204)


@bp.get("/service-types/<service_type>/hosts/<host>/bindings")
@admin_only
def bindings_of_host(service_type: str, host: str) -> Response:
    """The bindings on one host; with ``authID``, the one binding of that DN (or 404)."""
    dn = request.args.get("authID")
    svc = _svc()
    if dn is not None:
        return _ok({"bindings": [binding_view(svc.binding_of_dn(service_type, host, dn))]})
    page = svc.bindings(request.args.get("pageSize"), request.args.get("pageToken"), service_type, host)
    return _ok(_page_view(page))


# ---------------------------------------------------------------------- bindings ------------
def _page_view(page: Any) -> dict[str, Any]:
    return {
        "bindings": [binding_view(b) for b in page.items],
        "nextPageToken": page.next_page_token,
        "totalSize": page.total_size,
    }


@bp.get("/bindings")
@admin_only
def list_bindings() -> Response:
    page = _svc().bindings(request.args.get("pageSize"), request.args.get("pageToken"))
    return _ok(_page_view(page))


@bp.post("/bindings/<binding>")
@admin_only
def create_binding(binding: str) -> Response:
    return _ok(binding_view(_svc().create_binding(requests.new_binding(binding, _body()))), 201)


@bp.get("/bindings/<binding>")
@admin_only
def show_binding(binding: str) -> Response:
    return _ok(binding_view(_svc().binding(binding)))


@bp.put("/bindings/<binding>")
@admin_only
def update_binding(binding: str) -> Response:
    raw = _body()  # a body that is not JSON is 400 first
    svc = _svc()
    found = svc.binding(binding)
    return _ok(binding_view(svc.update_binding(found, requests.binding_changes(raw))))


@bp.delete("/bindings/<binding>")
@admin_only
def delete_binding(binding: str) -> Response:
    _svc().delete_binding(binding)
    return Response(status=204)


# ---------------------------------------------------------------------- about ---------------
@bp.get("/version")
def version() -> Response:
    return _ok({"release": __version__, "component": "authn"})


@bp.get("/status")
def status() -> Response:
    """200 while the metadata store answers, 503 otherwise (for haproxy's health check)."""
    try:
        _svc().store.ping()
    except Exception:
        logger.warning("the metadata store does not answer", exc_info=True)
        raise AmsError.unavailable("Backend is unavailable: the metadata store") from None
    return _ok({"status": "ok"})


@bp.get("/openapi.json")
def openapi() -> Response:
    return _ok(openapi_document())


@functools.cache
def openapi_document() -> dict[str, Any]:
    text = resources.files("ams_app.authn").joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


# ---------------------------------------------------------------------- the app -------------
def create_authn_app(service: AuthnService) -> Flask:
    app = Flask("ams_app.authn", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.extensions["authn"] = service
    app.register_blueprint(bp)

    @app.errorhandler(AmsError)
    def _ams(error: AmsError) -> Response:
        return render(error)

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        code = error.code or 500
        if isinstance(error, RequestEntityTooLarge):
            return render(AmsError.too_large("Request body is too large"))
        text = HTTP_STATUS_CODES.get(code, "Error")
        return render(AmsError(code, text, text.upper().replace(" ", "_")))

    @app.errorhandler(ConnectionFailure)
    def _store_unreachable(error: ConnectionFailure) -> Response:
        logger.warning("the metadata store is unreachable on %s %s: %s", request.method, request.path, error)
        return render(AmsError.unavailable("The metadata store is unavailable"))

    @app.errorhandler(Exception)
    def _unexpected(error: Exception) -> Response:
        logger.exception("unhandled error on %s %s", request.method, request.path)
        return render(AmsError(500, "Internal Server Error", "INTERNAL_SERVER_ERROR"))

    return app
