"""Sending a request on to the node that owns its subscription (consume_owner; see
ams_app/service/owner.py and docs/production.md).

The request goes as it came (method, path, query, body, the caller's credentials), once: a
forwarded request carries ``X-Ams-Forwarded-By`` and is never forwarded again. The owner's answer
comes back as it is. An owner that cannot be reached answers 503 here; the next request asks
ZooKeeper who owns the subscription now."""

from __future__ import annotations

import logging

import requests
from flask import Response, request
from werkzeug.exceptions import RequestEntityTooLarge

from ams_app.api.pipeline import FORWARDED_HEADER as HEADER
from ams_app.api.pipeline import service
from ams_app.errors import AmsError
from ams_app.service.owner import ForwardTo, moved

log = logging.getLogger("ams.owner")

_PASSED = ("x-api-key", "authorization", "content-type", "accept")
_session = requests.Session()


def forward(target: ForwardTo) -> Response:
    svc = service()
    if request.headers.get(HEADER):
        # the node that sent it here thinks we own it, we think another does: ownership is moving
        raise moved()
    settings = svc.settings
    headers = {name: value for name, value in request.headers.items() if name.lower() in _PASSED}
    headers[HEADER] = settings.node_name or settings.node_url
    url = target.url + request.full_path.rstrip("?")
    verify: str | bool = settings.forward_ca_file or True
    try:
        data = request.get_data()  # read here first when the request is forwarded before any check
    except RequestEntityTooLarge as exc:
        raise AmsError.too_large("Request body is too large") from exc
    try:
        answer = _session.request(
            request.method,
            url,
            data=data,
            headers=headers,
            timeout=settings.pull_wait_seconds + settings.kafka_timeout_seconds + 10,
            verify=verify,
            allow_redirects=False,
        )
    except requests.RequestException as exc:
        log.warning("owner: forwarding to %s failed: %s", target.url, exc)
        if svc.owners is not None:
            svc.owners.unreachable(target.key)
        raise moved() from exc
    response = Response(answer.content, status=answer.status_code)
    for name in ("Content-Type", "Allow"):
        if name in answer.headers:
            response.headers[name] = answer.headers[name]
    return response
