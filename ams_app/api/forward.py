"""Sending a request on to the node that owns its subscription (consume_owner; see
ams_app/service/owner.py and docs/production.md).

The request goes as it came (method, path, query, body, the caller's credentials), once: a
forwarded request carries ``X-Ams-Forwarded-By`` and is never forwarded again. The owner's answer
comes back as it is. An owner that cannot be reached is waited out (until ZooKeeper ends its claim),
and the request is then served as if it had just come in; one that answers too slowly is a 503."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import urllib3
from flask import Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from ams_app.errors import AmsError
from ams_app.models import subscription_key
from ams_app.service.core import AmsService
from ams_app.service.owner import ForwardTo, moved
from ams_app.service.validation import valid_name

log = logging.getLogger("ams.owner")
R = TypeVar("R")

#: The header a forwarded request carries; a request with it is never forwarded again.
HEADER = "X-Ams-Forwarded-By"

#: The header of a forwarded acknowledgement whose ids each acknowledge their own message, on a
#: subscription whose REST acknowledgements are cumulative (ams_app/api/subscriptions.py): the gRPC
#: API's, sent on to the owner (ams_app/pubsub/owned.py).
ACKS_HEADER = "X-Ams-Acks"
EACH = "each"
_PASSED = ("x-api-key", "authorization", "content-type", "accept")
_pools: dict[str, urllib3.PoolManager] = {}
#: Idle keep-alive connections kept to each other node (more are opened while busy).
_CONNECTIONS_PER_NODE = 32
#: Seconds to connect to an owner (on the nodes' network a live one accepts at once).
_CONNECT_SECONDS = 3.0
#: Owners a request may meet in turn (each unreachable one waited out) before it answers 503.
_OWNER_CHANGES = 3


class OwnerUnreachable(Exception):
    """The owner's gRPC API could not be reached (ams_app/pubsub/relay.py): waited out as its REST
    API is."""


#: What an owner that cannot be reached raises: refused, reset, or no connection in time (urllib3's
#: NewConnectionError is a ConnectTimeoutError; OwnerUnreachable for its gRPC API). Anything else (a
#: read timeout, a refused certificate) is answered 503 at once: waiting would not mend it.
_UNREACHABLE = (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ProtocolError, OwnerUnreachable)


def owner_elsewhere(svc: AmsService, view_args: dict[str, str]) -> ForwardTo | None:
    """Where to send the request when another node owns its subscription, found before anything
    else is looked up here: the owner authenticates the request and answers it. Anything unusual
    (no such project, a bad name, no owner yet) is left to the normal checks, which give their
    answers."""
    if svc.owners is None or request.headers.get(HEADER):
        return None
    project_name, sub_name = view_args.get("project", ""), view_args.get("subscription", "")
    if not (valid_name(project_name) and valid_name(sub_name)):
        return None
    project = svc.find_project_named(project_name)
    if project is None:
        return None
    key = subscription_key(project.uuid, sub_name)
    url = svc.owners.elsewhere(key)
    return ForwardTo(url, key) if url is not None else None


def serve_owned(svc: AmsService, serve: Callable[[], Response], view_args: dict[str, str]) -> Response:
    """An owned route (ams_app/api/pipeline.py ``add_route``): at the subscription's owner. Sent
    there when ZooKeeper names another node now, or when serving it here finds that another node
    claimed it meanwhile (the service raises ForwardTo from its hold on the subscription)."""
    target = owner_elsewhere(svc, view_args)
    if target is not None:
        return forward(svc, target, serve)
    try:
        return serve()
    except ForwardTo as found:
        return forward(svc, found, serve)


def forward(svc: AmsService, target: ForwardTo, serve_here: Callable[[], Response]) -> Response:
    """The owner's answer to this request (``through_owner``)."""
    if request.headers.get(HEADER):
        # the node that sent it here thinks we own it, we think another does: ownership is moving
        raise moved()
    try:
        data = request.get_data()  # read here first when the request is forwarded before any check
    except RequestEntityTooLarge as exc:
        raise AmsError.too_large("Request body is too large") from exc
    headers = {name: value for name, value in request.headers.items() if name.lower() in _PASSED}

    def there(owner: ForwardTo) -> Response:
        answer = call_owner(svc, owner, request.method, request.full_path.rstrip("?"), data, headers)
        response = Response(answer.data, status=answer.status)
        for name in ("Content-Type", "Allow"):
            value = answer.headers.get(name)
            if value is not None:
                response.headers[name] = value
        return response

    return through_owner(svc, target, there, serve_here)


def through_owner(
    svc: AmsService, target: ForwardTo, send_there: Callable[[ForwardTo], R], serve_here: Callable[[], R]
) -> R:
    """``send_there``'s answer from the owner. An owner that cannot be reached (its node died, or
    is stopping) still holds its claim until ZooKeeper ends its session: the call waits for that,
    then is served as if it had just come in (``serve_here``: by claiming the subscription, or it
    raises ForwardTo for the next owner), instead of answering 503 while ownership moves. The
    gRPC API (ams_app/pubsub/owned.py) passes its calls on the same way."""
    for _ in range(_OWNER_CHANGES):
        try:
            return send_there(target)
        except _UNREACHABLE as exc:
            log.warning("owner: forwarding to %s failed: %s", target.url, exc)
            if svc.owners is None or not svc.owners.wait_for_release(target.key, target.url):
                raise moved() from exc
        try:  # served here as any request is: it claims the subscription, or forwards again
            return serve_here()
        except ForwardTo as again:
            target = again
    raise moved()


def call_owner(
    svc: AmsService, target: ForwardTo, method: str, path: str, data: bytes, headers: dict[str, str]
) -> urllib3.BaseHTTPResponse:
    """Send one request to the owner's API (``path`` from /v1 on, with its query), once, marked
    as forwarded; its answer, whatever its status. Raises _UNREACHABLE's errors for an owner that
    cannot be reached (``through_owner`` waits for its claim to go), 503 for one that answers
    too slowly or whose certificate is refused."""
    settings = svc.settings
    sent = {**headers, HEADER: settings.node_name or settings.node_url}
    try:
        return _pool(settings.forward_ca_file).request(
            method,
            target.url + path,
            body=data,
            headers=sent,
            # a node that is up connects at once; one that is gone must not hold the request long
            timeout=urllib3.Timeout(
                connect=_CONNECT_SECONDS, read=settings.pull_wait_seconds + settings.kafka_timeout_seconds + 10
            ),
            retries=False,  # sent once: a pull that reached the owner must not be pulled twice
            redirect=False,
        )
    except _UNREACHABLE:
        raise
    except urllib3.exceptions.HTTPError as exc:
        # an owner that answers too slowly (it may be fine), or whose certificate is refused
        log.warning("owner: forwarding to %s failed: %s", target.url, exc)
        owners = svc.owners
        if owners is not None:
            owners.unreachable(target.key)
        raise moved() from exc


def _pool(ca_file: str) -> urllib3.PoolManager:
    """The keep-alive connections to the other nodes. urllib3 itself rather than requests: a
    forward is on every request that reaches a node other than the owner, and requests' own work
    (environment, cookies, hooks) was a fifth of a forwarding node's CPU in the consume benchmark
    (docs/benchmarks.md)."""
    pool = _pools.get(ca_file)
    if pool is None:
        # ca_certs None: the system's CAs, as the setting's documentation says
        pool = _pools[ca_file] = urllib3.PoolManager(
            num_pools=16, maxsize=_CONNECTIONS_PER_NODE, cert_reqs="CERT_REQUIRED", ca_certs=ca_file or None
        )
    return pool
