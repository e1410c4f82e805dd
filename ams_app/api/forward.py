"""Sending a request on to the node that owns its subscription (consume_owner; see
ams_app/service/owner.py and docs/production.md).

The request goes as it came (method, path, query, body, the caller's credentials), once: a
forwarded request carries ``X-Ams-Forwarded-By`` and is never forwarded again. The owner's answer
comes back as it is. An owner that cannot be reached is waited out (until ZooKeeper ends its claim),
and the request is then served as if it had just come in; one that answers too slowly is a 503."""

from __future__ import annotations

import logging
from typing import cast

import urllib3
from flask import Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from ams_app.api.pipeline import FORWARDED_HEADER as HEADER
from ams_app.api.pipeline import service
from ams_app.errors import AmsError
from ams_app.service.owner import ForwardTo, moved

log = logging.getLogger("ams.owner")

_PASSED = ("x-api-key", "authorization", "content-type", "accept")
_pools: dict[str, urllib3.PoolManager] = {}
#: Idle keep-alive connections kept to each other node (more are opened while busy).
_CONNECTIONS_PER_NODE = 32
#: Seconds to connect to an owner (on the nodes' network a live one accepts at once).
_CONNECT_SECONDS = 3.0
#: Owners a request may meet in turn (each unreachable one waited out) before it answers 503.
_OWNER_CHANGES = 3
#: What an owner that cannot be reached raises: refused, reset, or no connection in time (urllib3's
#: NewConnectionError is a ConnectTimeoutError). Anything else (a read timeout, a refused
#: certificate) is answered 503 at once: waiting would not mend it.
_UNREACHABLE = (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ProtocolError)


def forward(target: ForwardTo) -> Response:
    """The owner's answer to this request. An owner that cannot be reached (its node died, or is
    stopping) still holds its claim until ZooKeeper ends its session: the request waits for that,
    then is served as if it had just come in (here, by claiming the subscription, or by the next
    owner), instead of answering 503 while ownership moves."""
    svc = service()
    if request.headers.get(HEADER):
        # the node that sent it here thinks we own it, we think another does: ownership is moving
        raise moved()
    try:
        data = request.get_data()  # read here first when the request is forwarded before any check
    except RequestEntityTooLarge as exc:
        raise AmsError.too_large("Request body is too large") from exc
    for _ in range(_OWNER_CHANGES):
        try:
            return _send(target, data)
        except _UNREACHABLE as exc:
            log.warning("owner: forwarding to %s failed: %s", target.url, exc)
            if svc.owners is None or not svc.owners.wait_for_release(target.key, target.url):
                raise moved() from exc
        try:  # served here as any request is: it claims the subscription, or forwards again
            view = current_app.view_functions[str(request.endpoint)]
            return cast(Response, view(**(request.view_args or {})))  # add_route's views answer Responses
        except ForwardTo as again:
            target = again
    raise moved()


def _send(target: ForwardTo, data: bytes) -> Response:
    settings = service().settings
    headers = {name: value for name, value in request.headers.items() if name.lower() in _PASSED}
    headers[HEADER] = settings.node_name or settings.node_url
    url = target.url + request.full_path.rstrip("?")
    try:
        answer = _pool(settings.forward_ca_file).request(
            request.method,
            url,
            body=data,
            headers=headers,
            # a node that is up connects at once; one that is gone must not hold the request long
            timeout=urllib3.Timeout(
                connect=_CONNECT_SECONDS, read=settings.pull_wait_seconds + settings.kafka_timeout_seconds + 10
            ),
            retries=False,  # sent once: a pull that reached the owner must not be pulled twice
            redirect=False,
        )
    except _UNREACHABLE:
        raise  # forward() waits for its claim to go
    except urllib3.exceptions.HTTPError as exc:
        # an owner that answers too slowly (it may be fine), or whose certificate is refused
        log.warning("owner: forwarding to %s failed: %s", target.url, exc)
        owners = service().owners
        if owners is not None:
            owners.unreachable(target.key)
        raise moved() from exc
    response = Response(answer.data, status=answer.status)
    for name in ("Content-Type", "Allow"):
        value = answer.headers.get(name)
        if value is not None:
            response.headers[name] = value
    return response


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
