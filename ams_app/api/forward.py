"""Sending a request on to the node that owns its subscription (consume_owner; see
ams_app/service/owner.py and docs/production.md).

The request goes as it came (method, path, query, body, the caller's credentials), once: a
forwarded request carries ``X-Ams-Forwarded-By`` and is never forwarded again. The owner's answer
comes back as it is. An owner that cannot be reached is waited out (until ZooKeeper ends its claim),
and the request is then served as if it had just come in; one that answers too slowly is a 503."""

from __future__ import annotations

import logging
from typing import cast

import requests
from flask import Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from ams_app.api.pipeline import FORWARDED_HEADER as HEADER
from ams_app.api.pipeline import service
from ams_app.errors import AmsError
from ams_app.service.owner import ForwardTo, moved

log = logging.getLogger("ams.owner")

_PASSED = ("x-api-key", "authorization", "content-type", "accept")
_session = requests.Session()
#: Seconds to connect to an owner (on the nodes' network a live one accepts at once).
_CONNECT_SECONDS = 3.0
#: Owners a request may meet in turn (each unreachable one waited out) before it answers 503.
_OWNER_CHANGES = 3


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
        except requests.ConnectionError as exc:  # refused, reset, or no connection in time
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
    verify: str | bool = settings.forward_ca_file or True
    try:
        answer = _session.request(
            request.method,
            url,
            data=data,
            headers=headers,
            # a node that is up connects at once; one that is gone must not hold the request long
            timeout=(_CONNECT_SECONDS, settings.pull_wait_seconds + settings.kafka_timeout_seconds + 10),
            verify=verify,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.exceptions.SSLError):
            raise  # unreachable: forward() waits for its claim to go
        # an owner that answers too slowly (it may be fine), or whose certificate is refused
        log.warning("owner: forwarding to %s failed: %s", target.url, exc)
        owners = service().owners
        if owners is not None:
            owners.unreachable(target.key)
        raise moved() from exc
    response = Response(answer.content, status=answer.status_code)
    for name in ("Content-Type", "Allow"):
        if name in answer.headers:
            response.headers[name] = answer.headers[name]
    return response
