"""The TLS layer of ``ams authn``: a handshake that asks for the client's certificate but never
refuses it, so that the application can answer an untrusted, expired or missing certificate
with a JSON 401 instead of a TLS alert.

The stdlib ``ssl`` module has no verify callback, so this is pyOpenSSL over the accepted gevent
socket (non-blocking underneath). :class:`PeerCertContext` is what ``ssl_context=`` of
``ams_app.serve.Server`` takes; each accepted connection becomes a :class:`TLSSocket`, whose
handshake runs lazily on its first read or write, in the handler's greenlet. The certificates
themselves are judged later, by ``ams_app.authn.x509.TrustStore``.

Timing: every wait for the peer is bounded by the socket's timeout (the server's
``client_timeout``), and the handshake as a whole by ``handshake_timeout`` from the moment the
client starts sending it, so a client that trickles its ClientHello byte by byte cannot hold a
connection for long (the request head's deadline in ``ams_app.serve.Handler`` only starts once
the handshake is over)."""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import socket
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal, TypeVar

from cryptography import x509
from gevent.socket import wait_read, wait_write
from OpenSSL import SSL, crypto

from ams_app.serve import Handler

log = logging.getLogger("ams.authn.tls")

#: The WSGI environ key filled with the client's certificate chain, leaf first ([] for none).
PEER_CHAIN = "ams.authn.peer_chain"

#: TLS 1.2 suites: forward secret AEAD only (TLS 1.3 has its own list, all fine).
_CIPHERS = b"ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"

_T = TypeVar("_T")
_RawMode = Literal["r", "w", "rw"]


class TLSError(OSError):
    """A TLS protocol failure with the peer (bad handshake, garbage, an alert): the connection
    is unusable. An OSError, so that the server's handlers treat it like a reset socket."""


class _PeerClosed(Exception):
    """The peer ended the TLS connection (close_notify, or a TCP end without it)."""


def _accept_any(conn: SSL.Connection, cert: crypto.X509, errnum: int, depth: int, ok: int) -> bool:
    """The handshake takes any certificate (or none); ``TrustStore.verify`` judges it later."""
    return True


def _describe(error: SSL.Error) -> str:
    """OpenSSL's reasons from a pyOpenSSL error (a list of (library, function, reason))."""
    details = error.args[0] if error.args else None
    if isinstance(details, list):
        reasons = [str(item[-1]) for item in details if isinstance(item, tuple) and item]
        if reasons:
            return "; ".join(reasons)
    return str(error) or type(error).__name__


class TLSSocket:
    """A server-side TLS connection over an accepted gevent socket, with the socket methods that
    gevent.pywsgi and ``ams_app.serve`` use. EOF from the peer reads as b""; TLS failures are
    :class:`TLSError` (an OSError); timeouts are ``TimeoutError`` (``socket.timeout``)."""

    def __init__(self, sock: Any, context: SSL.Context, handshake_timeout: float | None = None) -> None:
        # deliberately not called _sock: pywsgi reads from and closes a socket's ``_sock`` itself
        self._raw = sock
        self._conn = SSL.Connection(context, sock)
        self._conn.set_accept_state()
        self._handshake_timeout = handshake_timeout
        self._handshake_deadline: float | None = None  # set once the client starts its handshake
        self._established = False
        self._chain: list[x509.Certificate] = []
        self._eof = False  # the peer ended the connection
        self._broken = False  # a fatal TLS or socket error: no more OpenSSL calls
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "established" if self._established else "handshake pending"
        return f"<TLSSocket fd={-1 if self._closed else self._raw.fileno()} {state}>"

    def __enter__(self) -> TLSSocket:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ the certificates ------
    def peer_chain(self) -> list[x509.Certificate]:
        """The client's certificate first, then the chain it sent with it; [] when it sent none
        (or before the handshake). Unverified: what the client presented, nothing more."""
        return list(self._chain)

    def _read_chain(self) -> list[x509.Certificate]:
        leaf = self._conn.get_peer_certificate()
        if leaf is None:
            return []
        try:
            chain = [leaf.to_cryptography()]
        except ValueError:  # OpenSSL took it, but it is not valid DER for cryptography
            log.info("a client certificate that cannot be parsed was ignored (from %s)", self._peer())
            return []
        sent = self._conn.get_peer_cert_chain() or []
        for index, cert in enumerate(sent):
            try:
                parsed = cert.to_cryptography()
            except ValueError:
                continue
            if index == 0 and parsed == chain[0]:
                continue  # a server sees the chain without the leaf, but be sure not to repeat it
            chain.append(parsed)
        return chain

    def _peer(self) -> str:
        try:
            return str(self._raw.getpeername())
        except OSError:
            return "a closed connection"

    # ------------------------------------------------------------------ I/O -------------------
    def _check_open(self) -> None:
        if self._closed:
            raise OSError(errno.EBADF, "the TLS socket is closed")
        if self._broken:
            raise TLSError(errno.EPROTO, "the TLS connection failed before")

    def _wait(self, writing: bool) -> None:
        """Wait until the socket is ready, within its timeout and what is left of the handshake's."""
        timeout: float | None = self._raw.gettimeout()
        if timeout == 0.0:
            raise BlockingIOError(errno.EAGAIN, "the TLS socket is non-blocking and not ready")
        by_deadline = False
        if not self._established and self._handshake_deadline is not None:
            left = self._handshake_deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"TLS handshake not completed within {self._handshake_timeout}s")
            if timeout is None or left < timeout:
                timeout, by_deadline = left, True
        waiter = wait_write if writing else wait_read
        try:
            waiter(self._raw.fileno(), timeout=timeout, timeout_exc=TimeoutError("timed out"))
        except TimeoutError:
            if by_deadline:
                raise TimeoutError(f"TLS handshake not completed within {self._handshake_timeout}s") from None
            raise
        if not self._established and self._handshake_deadline is None and self._handshake_timeout is not None:
            self._handshake_deadline = time.monotonic() + self._handshake_timeout  # the client has begun

    def _retry(self, operation: Callable[[], _T]) -> _T:
        """``operation`` (one OpenSSL call), repeated whenever OpenSSL needs the socket ready."""
        while True:
            self._check_open()
            try:
                return operation()
            except SSL.WantReadError:
                self._wait(writing=False)
            except SSL.WantWriteError:
                self._wait(writing=True)
            except SSL.ZeroReturnError:
                raise _PeerClosed from None
            except SSL.SysCallError as error:
                code = error.args[0] if error.args else -1
                if not isinstance(code, int) or code <= 0:  # a TCP end without close_notify
                    raise _PeerClosed from None
                self._broken = True
                raise OSError(code, os.strerror(code)) from None  # ConnectionResetError and kin
            except SSL.Error as error:
                self._broken = True
                what = _describe(error)
                log.debug("TLS error with %s: %s", self._peer(), what)
                raise TLSError(errno.EPROTO, f"TLS error: {what}") from None

    def _ensure_handshake(self) -> None:
        if not self._established:
            self._retry(self._conn.do_handshake)
            self._established = True
            self._chain = self._read_chain()

    def do_handshake(self) -> None:
        """The handshake now (otherwise it happens on the first read or write)."""
        try:
            self._ensure_handshake()
        except _PeerClosed:
            self._eof = True
            raise ConnectionAbortedError(errno.ECONNABORTED, "the peer closed during the TLS handshake") from None

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if flags:
            raise ValueError("flags are not supported on a TLS socket")
        self._check_closed()
        if self._eof or bufsize <= 0:
            return b""
        try:
            self._ensure_handshake()
            return self._retry(lambda: self._conn.recv(bufsize))
        except _PeerClosed:
            self._eof = True
            return b""

    def recv_into(self, buffer: bytearray | memoryview, nbytes: int = 0, flags: int = 0) -> int:
        if flags:
            raise ValueError("flags are not supported on a TLS socket")
        self._check_closed()
        wanted = nbytes or len(buffer)
        if self._eof or wanted <= 0:
            return 0
        try:
            self._ensure_handshake()
            return self._retry(lambda: self._conn.recv_into(buffer, wanted))
        except _PeerClosed:
            self._eof = True
            return 0

    def send(self, data: bytes | bytearray | memoryview, flags: int = 0) -> int:
        if flags:
            raise ValueError("flags are not supported on a TLS socket")
        self._check_closed()
        view = memoryview(data).cast("B")
        try:
            self._ensure_handshake()
            if not view:
                return 0
            return self._retry(lambda: self._conn.send(view))
        except _PeerClosed:
            self._eof = True
            raise BrokenPipeError(errno.EPIPE, "the peer closed the TLS connection") from None

    def sendall(self, data: bytes | bytearray | memoryview, flags: int = 0) -> None:
        view = memoryview(data).cast("B")
        while True:
            sent = self.send(view, flags)
            view = view[sent:]
            if not view:
                return

    def _check_closed(self) -> None:
        if self._closed:
            raise OSError(errno.EBADF, "the TLS socket is closed")

    def makefile(self, mode: str = "r", buffering: int | None = None) -> Any:
        """A binary file over this socket, built like the stdlib's ``socket.makefile``."""
        if not set(mode) <= {"r", "w", "b"} or "b" not in mode:
            raise ValueError(f"invalid mode {mode!r}: only binary files (r, w and b)")
        writing = "w" in mode
        reading = "r" in mode or not writing
        rawmode: _RawMode = "rw" if reading and writing else "w" if writing else "r"
        # duck typing: SocketIO only calls recv_into, send, fileno and _decref_socketios
        raw = socket.SocketIO(self, rawmode)  # type: ignore[arg-type]
        if buffering is None or buffering < 0:
            buffering = io.DEFAULT_BUFFER_SIZE
        if buffering == 0:
            return raw
        if reading and writing:
            return io.BufferedRWPair(raw, raw, buffering)
        if reading:
            return io.BufferedReader(raw, buffering)
        return io.BufferedWriter(raw, buffering)

    def _decref_socketios(self) -> None:
        """What SocketIO.close calls; closing this socket closes it whatever files are open."""

    # ------------------------------------------------------------------ the socket ------------
    def fileno(self) -> int:
        return -1 if self._closed else int(self._raw.fileno())

    def settimeout(self, value: float | None) -> None:
        self._raw.settimeout(value)

    def gettimeout(self) -> float | None:
        timeout: float | None = self._raw.gettimeout()
        return timeout

    def setsockopt(self, *args: Any) -> None:
        self._raw.setsockopt(*args)

    def getsockopt(self, *args: Any) -> Any:
        return self._raw.getsockopt(*args)

    def getpeername(self) -> Any:
        return self._raw.getpeername()

    def getsockname(self) -> Any:
        return self._raw.getsockname()

    def shutdown(self, how: int) -> None:
        """The TCP shutdown, safe from another greenlet (``Server`` closes idle connections so):
        the reader sees EOF. No close_notify: that is :meth:`close`'s."""
        self._check_closed()
        self._raw.shutdown(how)

    def close(self) -> None:
        """Send close_notify once if that does not block (best effort), then close the socket."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._established and not self._broken:
                with contextlib.suppress(SSL.Error, OSError):
                    self._conn.shutdown()  # one non-blocking attempt; a full buffer just skips it
        finally:
            self._raw.close()

    @property
    def closed(self) -> bool:
        return self._closed


class PeerCertContext:
    """The server side of TLS (>= 1.2) with ``certfile``/``keyfile`` (PEM; the cert file may
    carry the chain after the certificate) that asks the client for a certificate without
    requiring or verifying it (and names no acceptable CAs). Pass it as ``ssl_context=`` to
    ``ams_app.serve.Server``, which then calls :meth:`wrap_socket` for each connection.

    ``handshake_timeout`` bounds a handshake from the client's first bytes to its end.
    Renegotiation, session tickets and the session cache are off: each connection's
    certificate is the one of its own full handshake."""

    def __init__(self, certfile: str, keyfile: str, *, handshake_timeout: float | None = 10.0) -> None:
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(SSL.TLS1_2_VERSION)
        options = SSL.OP_NO_COMPRESSION | SSL.OP_NO_TICKET | SSL.OP_CIPHER_SERVER_PREFERENCE
        options |= getattr(SSL, "OP_NO_RENEGOTIATION", 0)
        options |= getattr(SSL, "OP_IGNORE_UNEXPECTED_EOF", 0)  # a TCP end without close_notify is EOF
        context.set_options(options)
        context.set_cipher_list(_CIPHERS)
        context.use_certificate_chain_file(certfile)
        context.use_privatekey_file(keyfile)
        context.check_privatekey()
        context.set_verify(SSL.VERIFY_PEER, _accept_any)  # no FAIL_IF_NO_PEER_CERT: none is fine too
        context.set_session_id(b"ams-authn")
        context.set_session_cache_mode(SSL.SESS_CACHE_OFF)
        self.context = context
        self.handshake_timeout = handshake_timeout

    def wrap_socket(
        self, sock: Any, server_side: bool = True, do_handshake_on_connect: bool = False, **ignored: Any
    ) -> TLSSocket:
        if not server_side:
            raise ValueError("PeerCertContext is for the server side only")
        tls = TLSSocket(sock, self.context, self.handshake_timeout)
        if do_handshake_on_connect:
            try:
                tls.do_handshake()
            except BaseException:
                tls.close()
                raise
        return tls


class AuthnHandler(Handler):
    """``ams_app.serve.Handler`` that hands the client's certificate chain to the application
    as ``environ["ams.authn.peer_chain"]`` (leaf first, [] for none). Only the TLS layer fills
    it: whatever a client sends as headers (``X-SSL-Client-DN``, ``SSL_CLIENT_S_DN``, ...) has no
    say in it."""

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        sock = self.socket
        environ[PEER_CHAIN] = sock.peer_chain() if isinstance(sock, TLSSocket) else []
        return environ
