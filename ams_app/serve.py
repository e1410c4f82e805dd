"""The gevent entry point: patch first, serve with a bounded pool, stop gracefully on SIGTERM."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import contextlib  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pool import Pool  # noqa: E402
from gevent.pywsgi import WSGIHandler, WSGIServer  # noqa: E402

from ams_app import create_app  # noqa: E402
from ams_app.push.worker import start_push  # noqa: E402
from ams_app.service.core import AmsService  # noqa: E402
from ams_app.settings import Settings  # noqa: E402

log = logging.getLogger("ams")


_SECRET_IN_URL = re.compile(r"(?<=[?&]key=)[^&\s]+|(?<=/users:byToken/)[^/?\s]+")


class Handler(WSGIHandler):  # type: ignore[misc]
    """Access log lines without tokens (``?key=`` and ``/users:byToken/``)."""

    def format_request(self) -> str:
        return _SECRET_IN_URL.sub("REDACTED", str(super().format_request()))


class Server(WSGIServer):  # type: ignore[misc]
    """WSGIServer with Nagle off (a response written in pieces would otherwise wait for the
    client's delayed ACK, some 40 ms a request on keep-alive) and an idle timeout per
    connection (a silent or trickling client cannot hold a greenlet for ever)."""

    client_timeout: float = 60.0

    def handle(self, sock: socket.socket, address: Any) -> None:
        with contextlib.suppress(OSError):  # not a TCP socket
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.client_timeout)
        super().handle(sock, address)


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


def serve(settings: Settings) -> int:
    configure_logging(settings)
    app = create_app(settings)
    service: AmsService = app.extensions["ams"]
    tls: dict[str, Any] = {}
    if settings.tls_cert and settings.tls_key:
        tls = {"certfile": settings.tls_cert, "keyfile": settings.tls_key}
    server = Server(
        (settings.host, settings.port),
        app,
        spawn=Pool(settings.max_connections),
        handler_class=Handler,
        log=logging.getLogger("ams.access"),
        error_log=logging.getLogger("ams.error"),
        **tls,
    )
    server.client_timeout = settings.client_timeout

    stop_push = start_push(service, settings)
    stopped = Event()

    def stop(signum: int) -> None:
        log.info("signal %d: stopping (in-flight requests get %.0fs)", signum, settings.shutdown_timeout)
        service.stopping.set()  # waiting pulls answer now
        pushing = gevent.spawn(stop_push, settings.shutdown_timeout)  # posts in flight finish meanwhile
        server.stop(timeout=settings.shutdown_timeout)
        pushing.join()
        stopped.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(signum, lambda s=signum: gevent.spawn(stop, s))

    server.start()
    scheme = "https" if tls else "http"
    log.info(
        "AMS listening on %s://%s:%d (data in %s)",
        scheme,
        settings.host,
        server.server_port,
        settings.data_dir,
    )
    server.serve_forever()
    stopped.wait(2 * settings.shutdown_timeout + 5)  # the push worker's stop, bounded
    service.close()
    log.info("stopped")
    return 0
