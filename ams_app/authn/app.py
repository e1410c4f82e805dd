"""``ams authn``'s HTTP API (ams_app/authn/openapi.yaml): the x509 call and the about routes here,
and the management of service types and bindings, whose views are ams_app/authn/manage.py's
``manage`` blueprint. ``ams serve`` registers that blueprint too, under ``/authn/v1``; this module's
``bp`` only ``ams authn`` registers, since the x509 call needs the client certificate of its TLS
handshake. Every answer is JSON; every failure is the AMS error envelope."""

from __future__ import annotations

import functools
import logging
from importlib import resources
from typing import Any

import yaml
from flask import Blueprint, Flask, Response, request
from pymongo.errors import ConnectionFailure
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES

from ams_app import __version__
from ams_app.authn.manage import MAX_BODY, answer, authn_service, manage
from ams_app.authn.service import AuthnService
from ams_app.errors import AmsError
from ams_app.errors_http import render

logger = logging.getLogger("ams.authn")

#: The WSGI environ key the TLS layer fills with the client's certificate chain (never a header).
PEER_CHAIN = "ams.authn.peer_chain"

bp = Blueprint("authn", __name__, url_prefix="/v1")


# ---------------------------------------------------------------------- the x509 call -------
@bp.get("/service-types/<service_type>/hosts/<host>:authx509")
def authx509(service_type: str, host: str) -> Response:
    """The token of the AMS user bound to the client certificate's DN on ``host``. Only the TLS
    layer's certificate counts; no header can stand in for it."""
    chain = request.environ.get(PEER_CHAIN) or []
    return answer({"token": authn_service().token_for(chain, service_type, host)})


# ---------------------------------------------------------------------- about ---------------
@bp.get("/version")
def version() -> Response:
    return answer({"release": __version__, "component": "authn"})


@bp.get("/status")
def status() -> Response:
    """200 while the metadata store answers, 503 otherwise (for haproxy's health check)."""
    try:
        authn_service().store.ping()
    except Exception:
        logger.warning("the metadata store does not answer", exc_info=True)
        raise AmsError.unavailable("Backend is unavailable: the metadata store") from None
    return answer({"status": "ok"})


@bp.get("/openapi.json")
def openapi() -> Response:
    return answer(openapi_document())


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
    app.register_blueprint(manage)
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
