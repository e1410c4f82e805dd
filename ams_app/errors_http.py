"""Every error leaves as the JSON envelope: AmsError, routing errors and anything unforeseen."""

from __future__ import annotations

import json
import logging

from flask import Flask, Response, request
from pymongo.errors import ConnectionFailure, OperationFailure
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.http import HTTP_STATUS_CODES

from ams_app.api.pipeline import JSON_TYPE
from ams_app.backends.errors import BackendUnavailable, MessageTooLarge
from ams_app.errors import AmsError
from ams_app.service.owner import ForwardTo, moved

_STATUS = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "TIMEOUT",
    409: "CONFLICT",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    500: "INTERNAL_SERVER_ERROR",
    503: "UNAVAILABLE",
}

CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "X-Requested-With, Content-Type, x-api-key",
    "Access-Control-Allow-Methods": "OPTIONS, POST, GET, PUT, DELETE, HEAD",
}


log = logging.getLogger("ams")


def render(error: AmsError) -> Response:
    return Response(json.dumps(error.envelope()), status=error.code, content_type=JSON_TYPE)


def answer_for(error: Exception, method: str, path: str, logger: logging.Logger) -> Response:
    """The answer to an exception a route raised, other than Werkzeug's own (HTTPException) and
    ForwardTo: the error handlers below give it, and so does the publish route's fast path
    (ams_app/api/fastpath.py)."""
    if isinstance(error, AmsError):
        return render(error)
    if isinstance(error, BackendUnavailable):
        # the backend's own failure, while it still answers pings (ams_app/service/guard.py): retry
        logger.warning("a backend call failed on %s %s: %s", method, path, error)
        return render(AmsError(503, "Backend Error", "UNAVAILABLE"))
    if isinstance(error, MessageTooLarge):
        return render(AmsError.too_large())
    if isinstance(error, ConnectionFailure):
        # MongoDB went away under a request (a timeout, a reset): the client may retry
        logger.warning("the metadata store is unreachable on %s %s: %s", method, path, error)
        return render(AmsError.unavailable("The metadata store is unavailable"))
    if isinstance(error, OperationFailure):
        from ams_app.backends.mongo.store import unstorable_text

        if unstorable_text(error):  # a NUL character, on a store that cannot hold one
            return render(AmsError.invalid_data("Text with a NUL character cannot be stored or looked up"))
        logger.error("the metadata store refused %s %s", method, path, exc_info=error)
        return render(AmsError(500, "Internal Server Error", "INTERNAL_SERVER_ERROR"))
    logger.error("unhandled error on %s %s", method, path, exc_info=error)
    return render(AmsError(500, "Internal Server Error", "INTERNAL_SERVER_ERROR"))


def with_cors(response: Response) -> Response:
    """Every answer of the API allows any origin (the original's headers)."""
    for key, value in CORS_HEADERS.items():
        response.headers.setdefault(key, value)
    return response


def register_error_handlers(app: Flask) -> None:
    def answer(error: Exception) -> Response:
        return answer_for(error, request.method, request.path, app.logger)

    for kind in (AmsError, BackendUnavailable, MessageTooLarge, ConnectionFailure, OperationFailure, Exception):
        app.register_error_handler(kind, answer)

    @app.errorhandler(ForwardTo)
    def _not_owned(target: ForwardTo) -> Response:
        # A route that reaches a subscription's cursor is declared owned (ams_app/api/pipeline.py)
        # and forwards; one that is not, and meets another node's claim, answers as ownership moving.
        log.error("route %s met the owner of %s without being an owned route", request.endpoint, target.key)
        return render(moved())

    @app.errorhandler(HTTPException)
    def _http(error: HTTPException) -> Response:
        code = error.code or 500
        if isinstance(error, RequestEntityTooLarge):
            response = render(AmsError.too_large("Request body is too large"))
        else:
            text = HTTP_STATUS_CODES.get(code, "Error")
            response = render(AmsError(code, text, _STATUS.get(code, text.upper().replace(" ", "_"))))
        valid_methods = getattr(error, "valid_methods", None)
        if code == 405 and valid_methods:
            response.headers["Allow"] = ", ".join(valid_methods)
        return response

    app.after_request(with_cors)
