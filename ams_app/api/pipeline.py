"""The checks every route runs before its handler (docs/compatibility.md), and response helpers."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, current_app, request
from werkzeug.routing import BaseConverter

from ams_app import auth, jsoncodec
from ams_app.api.forward import serve_owned
from ams_app.auth import Caller
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Project
from ams_app.service.core import AmsService
from ams_app.service.validation import valid_name
from ams_app.timeutil import now_ns

JSON_TYPE = "application/json; charset=utf-8"

#: The API v1: every route of ams_app/api/<resource>.py is declared on it, through ``add_route``
#: (behind the auth pipeline, with the roles that may call it) or ``open_route`` (no role check).
v1 = Blueprint("v1", __name__, url_prefix="/v1")
#: Who may call each route behind the pipeline, as its declaration says. The configured service
#: token passes every route; a route missing here cannot exist (``add_route`` requires roles).
ROUTE_ROLES: dict[str, frozenset[str]] = {}
#: The routes outside the pipeline, and who may call them.
OPEN_ROUTES: dict[str, str] = {}

#: The path of each resource, as the routes of ams_app/api/<resource>.py spell it.
PROJECT = "/projects/<name:project>"
TOPIC = PROJECT + "/topics/<name:topic>"
SUBSCRIPTION = PROJECT + "/subscriptions/<name:subscription>"
SCHEMA = PROJECT + "/schemas/<name:schema>"
SNAPSHOT = PROJECT + "/snapshots/<name:snapshot>"
MEMBER = PROJECT + "/members/<name:user>"
USER = "/users/<name:user>"
REGISTRATION = "/registrations/<name:uuid>"


class NameConverter(BaseConverter):
    """A path segment up to the next ``/`` or ``:`` (the verb separator)."""

    regex = r"[^/:]+"


@dataclass
class Ctx:
    svc: AmsService
    caller: Caller
    project: Project | None

    @property
    def proj(self) -> Project:
        assert self.project is not None
        return self.project


def service() -> AmsService:
    svc: AmsService = current_app.extensions["ams"]
    return svc


def request_token() -> str:
    return request.headers.get("x-api-key") or request.args.get("key") or ""


class Malformed:
    """Stands for a body that is not JSON. It is no JSON object, so the route's parser
    (ams_app/service/requests.py) rejects it with the route's own error, at the point of the
    route's order of checks where its handler parses the body."""


MALFORMED = Malformed()


#: A ``\uD800``-``\uDFFF`` escape, or such a code point encoded as UTF-8 bytes (which json.loads
#: lets through): the body may hold a lone surrogate, which no UTF-8 text can carry.
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


def body() -> Any:
    """The request body as JSON; None when empty; MALFORMED when it does not parse, or when a
    string in it holds a lone surrogate (it could be neither stored nor echoed as UTF-8)."""
    return parse_body(request.get_data(cache=True))


def parse_body(raw: bytes) -> Any:
    """``body()`` of the bytes ``raw``."""
    if not raw.strip():
        return None
    try:
        parsed, surrogate_free = jsoncodec.parse(raw)
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return MALFORMED
    # only a text orjson refused may hold one; the search costs a scan of the whole body (a
    # quarter of a publish's request thread, docs/benchmarks.md "Publishing against the raw producer")
    if not surrogate_free and _SURROGATE_HINT.search(raw) and _lone_surrogate(parsed):  # paired escapes are fine
        return MALFORMED
    return parsed


def ok(payload: Any) -> Response:
    return Response(jsoncodec.dumps(payload), status=200, content_type=JSON_TYPE)


def empty() -> Response:
    """200 with no body, and so no Content-Type (the document's ``Empty`` response)."""
    response = Response(b"", status=200)
    del response.headers["Content-Type"]
    return response


def flag(name: str) -> bool:
    return request.args.get(name, "").strip().lower() == "true"


def authenticate(route: str, roles: frozenset[str], view_args: dict[str, str]) -> Ctx:
    repeated = sorted(key for key, values in request.args.lists() if len(values) > 1)
    return authorise(service(), route, roles, view_args, request_token(), repeated)


def authorise(
    svc: AmsService, route: str, roles: frozenset[str], view_args: dict[str, str], token: str, repeated: list[str]
) -> Ctx:
    """The checks of ``authenticate``, on the request's parts: its path's names, its token, and
    the query parameters it gives more than once."""
    for var in sorted(view_args):
        if not valid_name(view_args[var]):
            raise AmsError.invalid_name(var)
    if repeated:  # which one would count is a guess: refuse rather than pick
        raise AmsError.invalid_data(f"Query parameter {repeated[0]!r} is given more than once")
    caller = svc.caller_for_token(token)
    if caller is None:
        raise AmsError.unauthorized()
    project: Project | None = None
    if "project" in view_args and route != "projects:create":
        project = svc.project(view_args["project"])
    if caller.user is not None:
        caller = Caller(caller.user, auth.effective_roles(caller.user, project.uuid if project else None))
        if not caller.roles:
            raise AmsError.unauthorized()
    if not auth.allowed(roles, caller):
        raise AmsError.forbidden()
    return Ctx(svc, caller, project)


#: Where a request's arrival at this node is kept (nanoseconds, ``received_ns``).
_RECEIVED_AT = "ams.received_ns"


def received_ns() -> int:
    """When this request reached this node, before anything (a wait for a subscription's new
    owner included) could hold it up."""
    return int(request.environ.get(_RECEIVED_AT) or now_ns())


#: Routes that change a subscription's cursor, as their declarations say (``add_route``'s
#: ``owned``): with consume_owner, served by the subscription's owner (ams_app/api/forward.py).
OWNED_ROUTES: set[str] = set()


def _check_new(route: str) -> None:
    if route in ROUTE_ROLES or route in OPEN_ROUTES:
        raise ValueError(f"route {route} is declared twice")


def add_route(
    rule: str, route: str, method: str, *, roles: tuple[str, ...], owned: bool = False
) -> Callable[[Callable[..., Response]], Any]:
    """Register ``handler(ctx, **view_args)`` behind the auth pipeline as ``route``, callable by
    users with one of ``roles`` in the URL's project (or as a service role) and by the service
    token. ``owned``: the route changes its subscription's cursor, and with consume_owner it is
    served by the subscription's owner (ams_app/api/forward.py)."""
    unknown = set(roles) - auth.VALID_ROLES
    if not roles or unknown:
        raise ValueError(f"route {route}: roles must be some of auth.VALID_ROLES, not {sorted(unknown) or 'none'}")
    if owned and SUBSCRIPTION not in rule:
        raise ValueError(f"route {route}: only a subscription's route can be owned")
    _check_new(route)
    allowed = ROUTE_ROLES[route] = frozenset(roles)
    if owned:
        OWNED_ROUTES.add(route)

    def register(handler: Callable[..., Response]) -> Callable[..., Response]:
        def view(**view_args: str) -> Response:
            request.environ.setdefault(_RECEIVED_AT, now_ns())  # kept when served again after a wait
            metadata = service().metadata

            def serve() -> Response:
                ctx = authenticate(route, allowed, view_args)
                return handler(ctx, **view_args)

            with metadata.view() if metadata is not None else contextlib.nullcontext():
                return serve_owned(service(), serve, view_args) if owned else serve()

        v1.add_url_rule(rule, endpoint=route, view_func=view, methods=[method])
        return handler

    return register


def open_route(rule: str, route: str, method: str, *, who: str) -> Callable[[Callable[[], Response]], Any]:
    """Register a route outside the auth pipeline: ``who`` says who may call it (the handler
    checks a token itself where one matters)."""
    _check_new(route)
    OPEN_ROUTES[route] = who

    def register(handler: Callable[[], Response]) -> Callable[[], Response]:
        v1.add_url_rule(rule, endpoint=route, view_func=handler, methods=[method])
        return handler

    return register


def paging() -> tuple[str | None, str | None]:
    """pageSize and pageToken (argo-ams-library sends the token as nextPageToken)."""
    args = request.args
    return args.get("pageSize"), args.get("pageToken") or args.get("nextPageToken")


def page_answer(key: str, items: list[Any], page: Page[Any]) -> Response:
    return ok({key: items, "nextPageToken": page.next_page_token, "totalSize": page.total_size})
