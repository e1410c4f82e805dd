"""The publish route without Flask: a WSGI layer in front of the app that answers the common
publish itself and hands everything else to the app (docs/benchmarks.md, "Publishing without
Flask").

A lone publish spends more of its time in Flask and Werkzeug (a request context, the URL map, the
hooks, a Response object) than in what it asks of the service. This layer takes ``POST
/v1/projects/P/topics/T:publish`` and runs the route's own steps on the WSGI environment: the
checks of ``authorise`` (ams_app/api/pipeline.py), the topic and its ACL, the body
(``parse_body``, ``requests.messages``), then ``publish``. The answer is the route's, byte for
byte, with the same request metrics (ams_app/app.py).

It never answers a request the route would refuse. Whatever is not the common case goes to the
app untouched, which answers it as it always did: a path or query string Werkzeug might read
differently (percent-escapes, non-ASCII, a parameter other than ``key``), no body or one over
``max_request_bytes``, and any check that fails (a bad name, an unknown token, a role, the topic,
its ACL, a malformed body): those checks change nothing, so the app runs them again and answers
with its own error. Only what ``publish`` raises (a schema refusal, a backend down) is answered
here, through the app's error answers (``errors_http.answer_for``), since a publish that got as
far as the log must not be made twice.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from ams_app.api.pipeline import JSON_TYPE, MALFORMED, ROUTE_ROLES, NameConverter, authorise, parse_body
from ams_app.errors import AmsError
from ams_app.errors_http import CORS_HEADERS, answer_for, with_cors
from ams_app.jsoncodec import dumps
from ams_app.service import requests
from ams_app.service.core import AmsService

ROUTE = "topics:publish"
#: The route's path as Werkzeug matches it, with the same converter for the names.
_PATH = re.compile(rf"/v1/projects/({NameConverter.regex})/topics/({NameConverter.regex}):publish")
#: A query string that Werkzeug and this layer read alike: no escapes, no ``+``, no ``;``.
_PLAIN_QUERY = re.compile(r"[A-Za-z0-9._~=&-]*")
_CORS = list(CORS_HEADERS.items())

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class PublishFastPath:
    """WSGI: publishes answered here, every other request by ``app`` (the Flask app's own
    ``wsgi_app``)."""

    def __init__(self, app: WsgiApp, service: AmsService, max_body: int | None, logger: logging.Logger) -> None:
        self.app = app
        self.service = service
        self.max_body = max_body
        self.logger = logger
        self.roles = ROUTE_ROLES[ROUTE]

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        path = environ.get("PATH_INFO", "")
        match = _PATH.fullmatch(path) if path.isascii() else None
        query = environ.get("QUERY_STRING", "")
        if match is None or not _PLAIN_QUERY.fullmatch(query):
            return self.app(environ, start_response)
        telemetry = self.service.telemetry
        began = time.perf_counter()
        telemetry.in_flight.inc()
        try:
            answered = self._publish(environ, match.group(1), match.group(2), query, path)
            if answered is not None:
                status, headers, body = answered
                telemetry.observe_request(ROUTE, "POST", int(status[:3]), time.perf_counter() - began)
                start_response(status, headers)
        finally:
            telemetry.in_flight.dec()
        return [body] if answered is not None else self.app(environ, start_response)

    def _publish(
        self, environ: dict[str, Any], project: str, topic: str, query: str, path: str
    ) -> tuple[str, list[tuple[str, str]], bytes] | None:
        """The answer to the publish; None to leave the request to the app."""
        args: dict[str, str] = {}
        for pair in query.split("&") if query else ():
            key, _, value = pair.partition("=")
            if key != "key" or key in args:  # another parameter, or one given twice: the app's
                return None
            args[key] = value
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return None
        if length <= 0 or (self.max_body is not None and length > self.max_body):
            return None
        raw = environ["wsgi.input"].read(length)
        environ["wsgi.input"] = io.BytesIO(raw)  # for the app, should it be handed the request
        if len(raw) != length:
            return None
        token = environ.get("HTTP_X_API_KEY") or args.get("key") or ""
        svc = self.service
        metadata = svc.metadata
        with metadata.view() if metadata is not None else contextlib.nullcontext():
            try:
                ctx = authorise(svc, ROUTE, self.roles, {"project": project, "topic": topic}, token, [])
                found = svc.topic_to_publish(ctx.caller, ctx.proj, topic)
                parsed = parse_body(raw)
                if parsed is MALFORMED:
                    return None
                messages = requests.messages(parsed, svc.settings)
            except AmsError:
                return None  # the app answers it, running the same checks, which change nothing
            except Exception as exc:  # a store down, say: answered as the app would, not asked twice
                return self._error(exc, path)
            try:
                body = dumps({"messageIds": svc.publish(ctx.proj, found, messages)})
            except Exception as exc:  # answered here: the log may hold the messages already
                return self._error(exc, path)
        headers = [("Content-Type", JSON_TYPE), ("Content-Length", str(len(body))), *_CORS]
        return "200 OK", headers, body

    def _error(self, exc: Exception, path: str) -> tuple[str, list[tuple[str, str]], bytes]:
        response = with_cors(answer_for(exc, "POST", path, self.logger))
        return response.status, list(response.headers.items()), response.get_data()
