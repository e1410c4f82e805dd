"""The gevent entry point: patch first, serve with a bounded pool, stop gracefully on SIGTERM."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import ssl  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from http import HTTPStatus  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pool import Pool  # noqa: E402
from gevent.pywsgi import WSGIHandler, WSGIServer  # noqa: E402

from ams_app.app import create_app  # noqa: E402
from ams_app.errors import AmsError  # noqa: E402
from ams_app.logs import configure_logging  # noqa: E402
from ams_app.pubsub.server import start as start_grpc  # noqa: E402
from ams_app.push.worker import start_push  # noqa: E402
from ams_app.service.core import AmsService  # noqa: E402
from ams_app.settings import Settings  # noqa: E402
from ams_app.workers import Role  # noqa: E402

log = logging.getLogger("ams")
#: pywsgi's error log (ams_app.serve.serve): what the HTTP layer says of connections, not of the API
_error_log = logging.getLogger("ams.error")


_SECRET_IN_URL = re.compile(r"(?<=[?&]key=)[^&\s]+|(?<=/users:byToken/)[^/?\s]+")


def _raw_error(error: AmsError) -> bytes:
    """A whole HTTP response in the AMS error envelope, for answers made outside the app."""
    body = json.dumps(error.envelope()).encode()
    head = (
        f"HTTP/1.1 {error.code} {HTTPStatus(error.code).phrase}\r\n"
        f"Content-Type: application/json; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


_HEAD_TOO_SLOW = _raw_error(AmsError(408, "Request headers took too long", "REQUEST_TIMEOUT"))
_BODY_TOO_SLOW = _raw_error(AmsError(408, "Request body took too long", "REQUEST_TIMEOUT"))
_BODY_TOO_LARGE = _raw_error(AmsError.too_large("Request body is too large"))
_FULL = _raw_error(AmsError.unavailable("Too many connections"))
#: Greenlets beyond max_connections, for connections that are only told 503 and closed.
_HEADROOM = 64


class _SlowClient(Exception):
    """A request head that did not arrive within its deadline."""


#: A refused body's rest is read and dropped for at most this long, then the connection closes.
_LINGER_SECONDS = 5.0
#: ... and up to the body limit, but never less than this: with a small limit (ams authn's 64 KB)
#: a client still sending a body a little over it would otherwise meet a reset, not the 413.
_LINGER_MIN_BYTES = 1024 * 1024


class _Unread:
    """Stands for what is left of a refused request body, read (up to ``budget`` bytes, for at
    most _LINGER_SECONDS) and dropped after the answer, so that a client still sending it gets to
    read the answer; then the connection closes. A budget of 0 reads nothing."""

    def __init__(self, rfile: Any = None, budget: int = 0) -> None:
        self.rfile = rfile
        self.budget = budget

    def _discard(self) -> None:
        left = self.budget
        if self.rfile is None or left <= 0:
            return
        with gevent.Timeout(_LINGER_SECONDS, False), contextlib.suppress(OSError, ValueError):
            while left > 0:
                data = self.rfile.read1(min(65536, left))
                if not data:
                    return
                left -= len(data)


class Handler(WSGIHandler):  # type: ignore[misc]
    """Access log lines without tokens (``?key=`` and ``/users:byToken/``); once the server is
    stopping, each response closes its keep-alive connection (``Connection: close``), so a proxy
    that reuses connections to this node stops sending on them after one more answer.

    Deadlines for the whole request, not per byte: from its first byte to the end of its headers
    (``request_head_timeout``), then for its whole body (``request_body_timeout``); the body is
    read before the app runs. Until then the connection is idle, and the server may close it to
    make room (Server.handle)."""

    _deadline: gevent.Timeout | None = None

    def handle(self) -> None:
        self.server.handlers[self] = None
        try:
            super().handle()
        finally:
            self._cancel_deadline()
            self.server.handlers.pop(self, None)
            self.server.busy.discard(self)
            self.server.running.discard(self)

    def format_request(self) -> str:
        return _SECRET_IN_URL.sub("REDACTED", str(super().format_request()))

    def read_requestline(self) -> Any:
        # between requests the socket's timeout (client_timeout) bounds the wait for a first byte
        if not self.rfile.peek(1):
            return ""  # the client closed the connection
        self._deadline = gevent.Timeout.start_new(self.server.head_timeout)
        try:
            line = super().read_requestline()
        except gevent.Timeout as timeout:
            if timeout is not self._deadline:
                raise
            self._deadline = None
            self.log_error(
                "request line not received within %ss (from %s)", self.server.head_timeout, self.client_address
            )
            return ""
        if line:  # a request has begun: from here on this connection is not idle for drain()
            self.server.busy.add(self)
        else:
            self._cancel_deadline()
        return line

    def read_request(self, raw_requestline: str) -> Any:
        try:
            return super().read_request(raw_requestline)
        except gevent.Timeout as timeout:
            if timeout is not self._deadline:
                raise
            raise _SlowClient(f"request headers not received within {self.server.head_timeout}s") from None
        finally:
            self._cancel_deadline()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _handle_client_error(self, ex: Exception) -> Any:
        if isinstance(ex, _SlowClient):
            self.log_error("%s (from %s)", ex, self.client_address)
            self.server.refused("head_timeout")
            return ("408", _HEAD_TOO_SLOW)
        return super()._handle_client_error(ex)

    def handle_error(self, t: Any, v: Any, tb: Any) -> None:
        # pywsgi lets a client that hung up during its answer go quietly only on EPIPE and
        # ECONNRESET; over TLS the same departure is an SSLEOFError (or a close_notify, an
        # SSLZeroReturnError), which it would log as a server fault, traceback and all. It is the
        # client's doing (a health check that reads the status line alone, a scraper's timeout, a
        # killed consumer): a line at INFO, not an error
        if isinstance(v, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionError)):
            self.close_connection = True
            _error_log.info("client %s went away during the answer: %s", self.client_address, v)
            return
        super().handle_error(t, v, tb)

    def _refuse(self, answer: bytes, why: str, linger: bool) -> None:
        """Answer ``answer`` and close; with ``linger``, after reading a bounded rest of the body."""
        self.log_error("%s (from %s)", why, self.client_address)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.socket.sendall(answer)
        _Unread(self.rfile, max(self.server.max_body, _LINGER_MIN_BYTES) if linger else 0)._discard()
        self.wsgi_input = _Unread()

    def _read_body(self) -> bool:
        """Read the body within its deadline and hand it to the app with its length; False when
        the request was answered here (too slow, too large)."""
        env = self.environ
        chunked = "chunked" in env.get("HTTP_TRANSFER_ENCODING", "").lower()
        length: int = self.content_length or 0  # pywsgi parsed it (an int, or None)
        limit = self.server.max_body
        if not chunked and not length:
            return True
        if not chunked and length > limit:  # the app answers 413 without reading it
            self.close_connection = True
            self.wsgi_input = _Unread(self.rfile, max(limit, _LINGER_MIN_BYTES))
            return True
        wanted = limit + 1 if chunked else length
        source: Any = self.wsgi_input
        parts: list[bytes] = []
        got = 0
        deadline = gevent.Timeout.start_new(self.server.body_timeout)
        try:
            while got < wanted:
                part = source.read(wanted - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
        except gevent.Timeout as timeout:
            if timeout is not deadline:
                raise
            self.server.refused("body_timeout")
            self._refuse(_BODY_TOO_SLOW, f"request body not received within {self.server.body_timeout}s", False)
            return False
        finally:
            deadline.cancel()
        if got > limit:
            self.server.refused("too_large")
            self._refuse(_BODY_TOO_LARGE, "chunked request body over max_request_bytes", True)
            return False
        env["wsgi.input"] = io.BytesIO(b"".join(parts))
        env["CONTENT_LENGTH"] = str(got)
        env.pop("HTTP_TRANSFER_ENCODING", None)
        return True

    def handle_one_response(self) -> None:
        try:
            if not self._read_body():
                return
            self.server.running.add(self)  # from here on it is never closed to make room
            super().handle_one_response()
        finally:
            self.server.busy.discard(self)
            self.server.running.discard(self)

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        # stopping, or a refused body left unread: say so (pywsgi closes then, but on HTTP/1.1 it
        # does not tell the client, which would send its next request on the closed connection)
        closing = self.server.closed or self.close_connection
        if closing and not any(name.lower() == "connection" for name, _ in headers):
            headers = [*headers, ("Connection", "close")]
        return super().start_response(status, headers, exc_info)


class Server(WSGIServer):  # type: ignore[misc]
    """WSGIServer with Nagle off (a response written in pieces would otherwise wait for the
    client's delayed ACK, some 40 ms a request on keep-alive), an idle timeout per connection,
    and a connection limit that never queues: at ``max_connections`` a new connection closes
    the oldest idle one (no request being served), or, when every one is busy, is answered 503
    at once (docs/configuration.md)."""

    client_timeout: float = 60.0
    head_timeout: float = 10.0
    body_timeout: float = 60.0
    max_body: int = 10 * 1024 * 1024
    max_connections: int = 1000

    def __init__(self, *args: Any, refused: Callable[[str], None] = lambda reason: None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Told the reason of each request answered here, not by the app (docs/monitoring.md).
        self.refused = refused
        self.busy: set[Handler] = set()  # handlers between a request line and their response
        self.running: set[Handler] = set()  # of those, the ones whose request is whole
        self.handlers: dict[Handler, None] = {}  # every open connection, oldest first

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

    def _make_room(self) -> bool:
        """Close the oldest connection that serves no request; False when all of them do."""
        for handler in self.handlers:
            if handler not in self.running:
                del self.handlers[handler]
                sock = getattr(handler, "socket", None)
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)  # its greenlet sees the end and goes
                return True
        return False

    def handle(self, sock: socket.socket, address: Any) -> None:
        if len(self.handlers) >= self.max_connections and not self._make_room():
            self.refused("full")
            with contextlib.suppress(OSError):
                sock.settimeout(2.0)
                sock.sendall(_FULL)
            with contextlib.suppress(OSError):
                sock.close()
            return
        with contextlib.suppress(OSError):  # not a TCP socket
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.client_timeout)
        super().handle(sock, address)


def _shared_listener(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket on ``host:port`` that the node's other workers bind too (SO_REUSEPORT:
    the kernel spreads the connections over them; all must be of the same user)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host or "0.0.0.0", port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


def _watch_parent(parent: int, stop: Callable[[str], None]) -> None:
    """A worker whose parent is gone (killed: it could not stop its workers) stops by itself."""
    while os.getppid() == parent:
        gevent.sleep(1.0)
    stop(f"the parent (pid {parent}) is gone")


def serve(settings: Settings) -> int:
    role = Role.from_environ()  # set by the parent of a node's workers (ams_app/workers.py)
    configure_logging(settings, tag=f"w{role.index}" if role is not None else "")
    app = create_app(settings)
    service: AmsService = app.extensions["ams"]

    def server(listener: Any) -> Server:
        made = Server(
            listener,
            app,
            spawn=Pool(settings.max_connections + _HEADROOM),
            handler_class=Handler,
            log=logging.getLogger("ams.access"),
            error_log=logging.getLogger("ams.error"),
            refused=lambda reason: service.telemetry.refused.labels(reason).inc(),
            **settings.listener_tls,
        )
        made.client_timeout = settings.client_timeout
        made.head_timeout = settings.request_head_timeout
        made.body_timeout = settings.request_body_timeout
        made.max_body = settings.max_request_bytes
        made.max_connections = settings.max_connections
        # serve_forever() stops the server a second time when stop() wakes it, with this timeout: at
        # gevent's default (1 s) it killed requests still in flight (a 500) and idle keep-alive
        # connections a proxy was about to reuse; drain() below has done the waiting by then
        made.stop_timeout = settings.shutdown_timeout
        return made

    # a worker's own port (settings.port: where the other nodes forward to it), and the node's
    # port, shared with the other workers
    servers = [server((settings.host, settings.port))]
    if role is not None:
        servers.append(server(_shared_listener(settings.host, role.shared_port, Server.backlog)))

    stop_push = start_push(service, settings)
    grpc_server = start_grpc(service, settings, shared_port=role.shared_grpc_port if role is not None else 0)
    stopped = Event()
    stopping: list[str] = []

    def stop(reason: str) -> None:
        if stopping:  # a second signal (or the parent's and systemd's) changes nothing
            return
        stopping.append(reason)
        log.info("%s: stopping (in-flight requests get %.0fs)", reason, settings.shutdown_timeout)
        service.stopping.set()  # waiting pulls answer now, streams end with UNAVAILABLE
        pushing = gevent.spawn(stop_push, settings.shutdown_timeout)  # posts in flight finish meanwhile
        grpc_stop = gevent.spawn(grpc_server.stop, settings.shutdown_timeout) if grpc_server is not None else None
        gevent.joinall(
            [gevent.spawn(s.drain, settings.shutdown_timeout, settings.shutdown_idle_seconds) for s in servers]
        )
        if grpc_stop is not None:
            grpc_stop.join()
        pushing.join()
        stopped.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(signum, lambda s=signum: gevent.spawn(stop, f"signal {s}"))
    if role is not None and role.parent:
        gevent.spawn(_watch_parent, role.parent, lambda reason: gevent.spawn(stop, reason))

    for each in servers:
        each.start()
    scheme = "https" if settings.listener_tls else "http"
    if role is None:
        log.info(
            "AMS listening on %s://%s:%d (data in %s)", scheme, settings.host, servers[0].server_port, settings.data_dir
        )
    else:
        log.info(
            "AMS worker %d (%s) listening on %s://%s:%d, its own, and on port %d, shared",
            role.index,
            settings.node_name,
            scheme,
            settings.host,
            servers[0].server_port,
            role.shared_port,
        )
    gevent.joinall([gevent.spawn(each.serve_forever) for each in servers])
    stopped.wait(2 * settings.shutdown_timeout + 5)  # the push worker's stop, bounded
    service.close()
    log.info("stopped")
    return 0
