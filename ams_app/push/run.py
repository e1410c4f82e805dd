"""``ams push-worker``: push delivery as a service of its own (backend kafka, every AMS node).

Workers find each other and share the push subscriptions through ZooKeeper; SIGTERM hands the
worker's subscriptions over at once (after the posts in flight), SIGKILL within the session
timeout.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from http import HTTPStatus  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import parse_qs  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402

from ams_app.backends import open_backends  # noqa: E402
from ams_app.errors import AmsError  # noqa: E402
from ams_app.logs import configure_logging  # noqa: E402
from ams_app.push.worker import PushWorker, coordinator_for  # noqa: E402
from ams_app.service.core import AmsService  # noqa: E402
from ams_app.settings import Settings  # noqa: E402
from ams_app.telemetry import TEXT_FORMAT  # noqa: E402

JSON = "application/json; charset=utf-8"

log = logging.getLogger("ams.push")


def metrics_server(service: AmsService, settings: Settings) -> WSGIServer | None:
    """The worker's Prometheus page at ``http://host:push_worker_metrics_port/metrics``: this
    process's figures, under the same ``prometheus_access`` as a node's page. With ``tls_cert``
    it is HTTPS, as the node's API: the token Prometheus sends never crosses the network in clear."""
    if not settings.push_worker_metrics_port:
        return None

    def page(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO") != "/metrics" or environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            status, kind, body = 404, JSON, json.dumps(AmsError.not_found("Resource").envelope()).encode()
        else:
            header = environ.get("HTTP_AUTHORIZATION", "")
            query = parse_qs(environ.get("QUERY_STRING", ""))
            token = header[7:].strip() if header.lower().startswith("bearer ") else ""
            token = token or environ.get("HTTP_X_API_KEY", "") or query.get("key", [""])[0]
            try:
                status, kind, body = 200, TEXT_FORMAT, service.prometheus_page(token)
            except AmsError as exc:
                status, kind, body = exc.code, JSON, json.dumps(exc.envelope()).encode()
        start_response(f"{status} {HTTPStatus(status).phrase}", [("Content-Type", kind)])
        return [body]

    tls = settings.listener_tls
    server = WSGIServer((settings.host, settings.push_worker_metrics_port), page, log=None, **tls)
    server.start()
    scheme = "https" if tls else "http"
    log.info("push worker metrics on %s://%s:%d/metrics", scheme, settings.host, server.server_port)
    return server


def run_worker(settings: Settings) -> int:
    configure_logging(settings)
    if settings.backend != "kafka":
        print("ams: push-worker needs backend kafka (the embedded backend delivers in ams serve)", file=sys.stderr)
        return 2
    if not settings.push_enabled:
        print("ams: push_enabled is false: there is nothing to deliver", file=sys.stderr)
        return 2
    store, message_log = open_backends(settings)
    service = AmsService(settings, store, message_log)
    worker = PushWorker(service, coordinator_for(settings, register=True), settings).start()
    page = metrics_server(service, settings)
    log.info(
        "push worker %s started (ZooKeeper %s, %s)",
        worker.coordinator.worker_id,
        settings.zookeeper_hosts,
        settings.push_root,
    )
    done = Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(signum, done.set)
    done.wait()
    log.info("push worker stopping")
    if page is not None:
        page.stop(timeout=1)
    worker.stop(settings.shutdown_timeout)
    service.close()
    log.info("push worker stopped")
    return 0
