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
import time  # noqa: E402
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
    """Access log lines without tokens (``?key=`` and ``/users:byToken/``); once the server is
    stopping, each response closes its keep-alive connection (``Connection: close``), so a proxy
    that reuses connections to this node stops sending on them after one more answer."""

    def format_request(self) -> str:
        return _SECRET_IN_URL.sub("REDACTED", str(super().format_request()))

    def read_requestline(self) -> Any:
        line = super().read_requestline()
        if line:  # a request has begun: from here on this connection is not idle
            self.server.busy.add(self)
        return line

    def handle_one_response(self) -> None:
        try:
            super().handle_one_response()
        finally:
            self.server.busy.discard(self)

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if self.server.closed and not any(name.lower() == "connection" for name, _ in headers):
            headers = [*headers, ("Connection", "close")]  # pywsgi then closes after this response
        return super().start_response(status, headers, exc_info)


class Server(WSGIServer):  # type: ignore[misc]
    """WSGIServer with Nagle off (a response written in pieces would otherwise wait for the
    client's delayed ACK, some 40 ms a request on keep-alive) and an idle timeout per
    connection (a silent or trickling client cannot hold a greenlet for ever)."""

    client_timeout: float = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.busy: set[Handler] = set()  # handlers between a request line and their response

    def drain(self, timeout: float, idle_seconds: float) -> None:
        """Stop accepting; let requests in progress finish within ``timeout``; keep idle keep-alive
        connections ``idle_seconds`` (a proxy may still reuse one; its request is answered and the
        connection closed), then close them. Nothing in progress is killed before ``timeout``."""
        self.close()
        started = time.monotonic()
        while self.pool is not None and len(self.pool) and time.monotonic() - started < timeout:
            if not self.busy and time.monotonic() - started >= min(idle_seconds, timeout):
                break  # only idle connections are left
            gevent.sleep(0.05)
        if self.pool is not None:
            self.pool.kill(block=True, timeout=1)

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
    # serve_forever() stops the server a second time when stop() wakes it, with this timeout: at
    # gevent's default (1 s) it killed requests still in flight (a 500) and idle keep-alive
    # connections a proxy was about to reuse; drain() below has done the waiting by then
    server.stop_timeout = settings.shutdown_timeout

    stop_push = start_push(service, settings)
    stopped = Event()

    def stop(signum: int) -> None:
        log.info("signal %d: stopping (in-flight requests get %.0fs)", signum, settings.shutdown_timeout)
        service.stopping.set()  # waiting pulls answer now
        pushing = gevent.spawn(stop_push, settings.shutdown_timeout)  # posts in flight finish meanwhile
        server.drain(settings.shutdown_timeout, settings.shutdown_idle_seconds)
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
