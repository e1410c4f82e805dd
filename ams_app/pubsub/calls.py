"""Who calls, whether they may, and how a refusal reads: the gRPC edge's pipeline, the twin of
ams_app/api/pipeline.py's ``authenticate`` (docs/pubsub.md, "Authentication").

A token comes as ``x-goog-api-key`` metadata (what Google's clients send for
``client_options={"api_key": ...}``), as ``authorization: Bearer``, or as ``x-api-key``. A call
without one acts as ``grpc_emulator_user`` when that is set (emulator mode: Google's clients send
no credentials when PUBSUB_EMULATOR_HOST is set), else it is UNAUTHENTICATED. Each RPC names the
REST route it stands for, and may be called by exactly the roles that route declares."""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from ams_app import auth
from ams_app.api.pipeline import ROUTE_ROLES
from ams_app.auth import Caller
from ams_app.errors import AmsError
from ams_app.models import Project
from ams_app.service.core import AmsService
from ams_app.service.validation import valid_name

log = logging.getLogger("ams.grpc")
T = TypeVar("T")

#: What an exactly-once acknowledgement's refused ids are called in google.rpc.ErrorInfo, as
#: Google's clients read them (each id's value says why; a PERMANENT_ one is not retried).
ACK_ID_FAILURE = "EXACTLY_ONCE_ACKID_FAILURE"
INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"
DOMAIN = "pubsub.googleapis.com"
#: Metadata of a call one node sends on to a subscription's owner (ams_app/pubsub/relay.py): the
#: sender's name. A call with it is never sent on again.
FORWARDED = "x-ams-forwarded-by"
#: Trailing metadata of every refusal: the answering node's name. A node that passes a call on
#: tells by it the owner's answer from a failure to reach the owner.
ANSWERED = "x-ams-answered-by"


@dataclass
class Call:
    """An authorised call: the service, the caller with their roles in the call's project, the
    project, the token it came with (passed on when the call goes to a subscription's owner), and
    whether another node sent it on (``FORWARDED``)."""

    svc: AmsService
    caller: Caller
    project: Project
    token: str
    forwarded: bool = False


class Relayed(Exception):
    """A subscription's owner refused a call passed on to it: its status, passed back as it is."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, Any], ...]) -> None:
        super().__init__(details)
        self.status = _Status(code, details, trailing)


class _Status(collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status):  # type: ignore[misc]
    """A call's final status (what ``abort_with_status`` takes)."""


def token_of(context: grpc.ServicerContext) -> str:
    """The token the call carries, "" for none."""
    found = ""
    for key, value in context.invocation_metadata() or ():
        if not isinstance(value, str):
            continue
        if key == "x-goog-api-key" or key == "x-api-key":
            return value.strip()
        if key == "authorization" and value[:7].lower() == "bearer ":
            found = value[7:].strip()
    return found


def forwarded(context: grpc.ServicerContext) -> bool:
    """Whether another node sent the call on here."""
    return any(key == FORWARDED for key, _ in context.invocation_metadata() or ())


def _caller(svc: AmsService, context: grpc.ServicerContext) -> tuple[Caller, str]:
    token = token_of(context)
    if not token and svc.settings.grpc_emulator_user:
        user = svc.store.get_user(name=svc.settings.grpc_emulator_user)
        if user is None:
            raise AmsError.unauthorized()
        return Caller(user, frozenset(user.service_roles)), user.token
    caller = svc.caller_for_token(token)
    if caller is None:
        raise AmsError.unauthorized()
    return caller, token


def authorize(svc: AmsService, context: grpc.ServicerContext, route: str, project_name: str) -> Call:
    """The call, if its caller may call ``route`` (a REST route's name: its declared roles) in
    the project: UNAUTHENTICATED without a known token or without roles in the project (as the
    REST API's 401), PERMISSION_DENIED without one of the route's roles, NOT_FOUND for a project
    that does not exist."""
    if not valid_name(project_name):
        raise AmsError.invalid_name("project")
    caller, token = _caller(svc, context)
    project = svc.project(project_name)
    if caller.user is not None:
        caller = Caller(caller.user, auth.effective_roles(caller.user, project.uuid))
        if not caller.roles:
            raise AmsError.unauthorized()
    if not auth.allowed(ROUTE_ROLES[route], caller):
        raise AmsError.forbidden()
    return Call(svc, caller, project, token, forwarded(context))


# --- refusals -----------------------------------------------------------------------------------
_BY_HTTP = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    408: grpc.StatusCode.DEADLINE_EXCEEDED,
    413: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


def status_code(error: AmsError) -> grpc.StatusCode:
    """The gRPC status of an AMS error: by its HTTP code, and a 409 by what it says (ALREADY_EXISTS
    for a name taken, FAILED_PRECONDITION for a state that forbids the call)."""
    if error.code == 409:
        return (
            grpc.StatusCode.ALREADY_EXISTS if error.status == "ALREADY_EXISTS" else grpc.StatusCode.FAILED_PRECONDITION
        )
    return _BY_HTTP.get(error.code, grpc.StatusCode.UNKNOWN if error.code < 500 else grpc.StatusCode.INTERNAL)


def abort(svc: AmsService, context: grpc.ServicerContext, error: AmsError) -> None:
    """End the call with the error's status (never returns), marked with this node's name
    (``ANSWERED``). An exactly-once acknowledgement's refused ids go in a google.rpc.ErrorInfo
    detail, id -> reason, as Google's clients read it."""
    code = status_code(error)
    marked = ((ANSWERED, svc.settings.node_name or "ams"),)
    refused = (error.more or {}).get("ackIdErrors")
    if isinstance(refused, dict) and refused:
        info = error_details_pb2.ErrorInfo(
            reason=ACK_ID_FAILURE, domain=DOMAIN, metadata={str(ack_id): INVALID_ACK_ID for ack_id in refused}
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status = rpc_status.to_status(
            status_pb2.Status(code=getattr(code_pb2, code.name), message=error.message, details=[detail])
        )
        context.abort_with_status(_Status(status.code, status.details, (*status.trailing_metadata, *marked)))
    context.set_trailing_metadata(marked)
    context.abort(code, error.message)


def fresh(svc: AmsService) -> contextlib.AbstractContextManager[Any]:
    """The metadata a call looks up (its caller, project, topic, subscription) as of now, from
    the node's cache where it holds that (ams_app/service/metacache.py), as for a REST request. A
    stream takes a fresh view for each round of its work rather than one for its whole life."""
    return svc.metadata.view() if svc.metadata is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _answered(svc: AmsService, context: grpc.ServicerContext, name: str) -> Iterator[None]:
    """Around an RPC's implementation: an AmsError ends the call with its status; anything else
    unexpected is logged and INTERNAL; the call is timed by RPC and status (docs/monitoring.md)."""
    started, code = time.perf_counter(), "OK"
    try:
        yield
    except AmsError as error:
        code = status_code(error).name
        abort(svc, context, error)
    except Relayed as relayed:  # the owner's answer to a call passed on
        code = relayed.status.code.name
        context.abort_with_status(relayed.status)
    except (grpc.RpcError, GeneratorExit):  # the client went (a stream closed under its yield)
        code = "CANCELLED"
        raise
    except Exception as exc:
        if _aborted(exc):
            raise
        code = "INTERNAL"
        log.exception("%s failed", name)
        context.set_trailing_metadata(((ANSWERED, svc.settings.node_name or "ams"),))
        context.abort(grpc.StatusCode.INTERNAL, "Internal error")
    finally:
        svc.telemetry.grpc_calls.labels(name, code).observe(time.perf_counter() - started)


def unary(method: Callable[..., T]) -> Callable[..., T]:
    """A unary RPC's implementation, ``method(self, request, context)`` (self has ``svc``), run
    ``_answered``."""

    @functools.wraps(method)
    def run(self: Any, request: Any, context: grpc.ServicerContext) -> T:
        with _answered(self.svc, context, method.__name__), fresh(self.svc):
            return method(self, request, context)
        raise AssertionError("unreachable: a refusal ends the call")

    return run


def streaming(method: Callable[..., Iterator[T]]) -> Callable[..., Iterator[T]]:
    """As ``unary``, for a streaming response; open streams are counted too."""

    @functools.wraps(method)
    def run(self: Any, requests: Any, context: grpc.ServicerContext) -> Iterator[T]:
        streams = self.svc.telemetry.grpc_streams
        streams.inc()
        try:
            with _answered(self.svc, context, method.__name__):
                yield from method(self, requests, context)
        finally:
            streams.dec()

    return run


def _aborted(exc: Exception) -> bool:
    """The exception grpc raises from context.abort (a plain Exception, not an RpcError)."""
    return type(exc).__name__ == "Exception" and not exc.args
