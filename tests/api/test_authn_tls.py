"""The TLS layer of ``ams authn`` (ams_app/authn/tls.py) over real sockets: ams_app.serve.Server
with PeerCertContext and AuthnHandler, in a process of its own, behind a tiny WSGI app that
answers with the subject of the chain the TLS layer put into the environ.

The handshake asks for a client certificate and takes any, or none: judging it is the
application's business. Hostile clients (silent, trickling, garbage, huge certificates) cost
a connection for a bounded time and never the server."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.x509.oid import NameOID

from tests.authn_pki import client_cert, new_ca, now, server_cert, write_bundle

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SECONDS = 2.0  # the server's client_timeout and head_timeout
HANDSHAKE_SECONDS = 1.5  # PeerCertContext's handshake_timeout

SERVER = """
import json, sys
from ams_app.serve import Server  # first: it patches the process for gevent
import gevent.pool
from ams_app.authn.tls import PEER_CHAIN, AuthnHandler, PeerCertContext
from ams_app.authn.x509 import subject_dn

def app(environ, start_response):
    chain = environ[PEER_CHAIN]
    body = json.dumps({
        "dn": subject_dn(chain[0]) if chain else None,
        "certs": len(chain),
        "port": environ["REMOTE_PORT"],
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]

cert, key, client_seconds, handshake_seconds = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
context = PeerCertContext(cert, key, handshake_timeout=handshake_seconds)
server = Server(("127.0.0.1", 0), app, handler_class=AuthnHandler, ssl_context=context, spawn=gevent.pool.Pool(100))
server.client_timeout = server.head_timeout = server.body_timeout = client_seconds
server.start()
print(server.server_port, flush=True)
server.serve_forever()
"""


@dataclass
class Pki:
    ca_bundle: str
    good: tuple[str, str]
    untrusted: tuple[str, str]
    expired: tuple[str, str]
    chained: tuple[str, str]  # signed by an intermediate, which is sent along
    directory: Path


@dataclass
class AuthnServer:
    url: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("authn-pki")
    ca, other = new_ca("AuthN Test CA"), new_ca("Unrelated CA")
    subject = [(NameOID.ORGANIZATION_NAME, "AMS tests"), (NameOID.COMMON_NAME, "user")]
    expired = client_cert(ca, subject, not_before=now() - dt.timedelta(days=9), not_after=now() - dt.timedelta(days=2))
    sub = new_ca("AuthN Sub CA", ca)
    server_cert(ca, "127.0.0.1", "localhost").write(root, "server")
    return Pki(
        ca_bundle=write_bundle(root / "ca.pem", ca),
        good=client_cert(ca, subject).write(root, "good"),
        untrusted=client_cert(other, [(NameOID.COMMON_NAME, "stranger")]).write(root, "untrusted"),
        expired=expired.write(root, "expired"),
        chained=client_cert(sub, [(NameOID.COMMON_NAME, "chained")]).write(root, "chained", with_chain=True),
        directory=root,
    )


@pytest.fixture(scope="module")
def authn(pki: Pki) -> Iterator[AuthnServer]:
    log_path = pki.directory / "server.log"
    cmd = [sys.executable, "-c", SERVER, str(pki.directory / "server.pem"), str(pki.directory / "server.key")]
    cmd += [str(CLIENT_SECONDS), str(HANDSHAKE_SECONDS)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log_path.open("ab") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline().decode().strip()
        if not line.isdigit():
            raise RuntimeError(f"the server did not start: {log_path.read_text(errors='replace')}")
        port = int(line)
        yield AuthnServer(f"https://127.0.0.1:{port}/", port, proc, log_path)
        assert proc.poll() is None, "the server died"
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


@pytest.fixture(autouse=True)
def no_tracebacks(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whatever a test does, the server neither dies nor logs a crash."""
    if "authn" not in request.fixturenames:
        yield
        return
    server: AuthnServer = request.getfixturevalue("authn")
    before = len(server.log())
    yield
    assert server.proc.poll() is None, f"the server died: {server.log()[before:]}"
    assert "Traceback" not in server.log()[before:]


def get(server: AuthnServer, pki: Pki, cert: tuple[str, str] | None, **kw: Any) -> dict[str, Any]:
    response = requests.get(server.url, verify=pki.ca_bundle, cert=cert, timeout=10, **kw)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def client_context(pki: Pki, cert: tuple[str, str] | None, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca_bundle)
    context.minimum_version = context.maximum_version = version
    if cert:
        context.load_cert_chain(*cert)
    return context


def raw_get(server: AuthnServer, context: ssl.SSLContext) -> dict[str, Any]:
    """One request with the stdlib's client, for a chosen TLS version."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain,
        context.wrap_socket(plain, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := tls.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    result: dict[str, Any] = json.loads(body)
    return result


def client_hello() -> bytes:
    """The first flight of a real TLS client."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def wait_closed(sock: socket.socket, seconds: float) -> bool:
    """True when the server ends the connection within ``seconds`` (whatever it sends first)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            try:
                if not sock.recv(65536):
                    return True
            except OSError:
                return True
    return False


# ---------------------------------------------------------------------- certificates -----------
def test_good_certificate(authn: AuthnServer, pki: Pki) -> None:
    body = get(authn, pki, pki.good)
    assert body["dn"] == "CN=user,O=AMS tests"
    assert body["certs"] in (1, 2)  # the client's OpenSSL may add the root from its own store


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_both_tls_versions_with_and_without_certificate(authn: AuthnServer, pki: Pki, version: ssl.TLSVersion) -> None:
    assert raw_get(authn, client_context(pki, pki.good, version))["dn"] == "CN=user,O=AMS tests"
    assert raw_get(authn, client_context(pki, None, version))["dn"] is None


def test_no_certificate_completes_the_handshake(authn: AuthnServer, pki: Pki) -> None:
    assert get(authn, pki, None)["certs"] == 0


def test_untrusted_certificate_is_handed_over(authn: AuthnServer, pki: Pki) -> None:
    assert get(authn, pki, pki.untrusted)["dn"] == "CN=stranger"


def test_expired_certificate_is_handed_over(authn: AuthnServer, pki: Pki) -> None:
    assert get(authn, pki, pki.expired)["dn"] == "CN=user,O=AMS tests"


def test_chain_sent_by_the_client(authn: AuthnServer, pki: Pki) -> None:
    body = get(authn, pki, pki.chained)
    assert (body["dn"], body["certs"]) == ("CN=chained", 2)


def test_forged_headers_are_ignored(authn: AuthnServer, pki: Pki) -> None:
    forged = {"X-SSL-Client-DN": "CN=admin", "SSL_CLIENT_S_DN": "CN=admin", "SSL-Client-Cert": "x"}
    assert get(authn, pki, None, headers=forged)["dn"] is None
    assert get(authn, pki, pki.good, headers=forged)["dn"] == "CN=user,O=AMS tests"


def test_keep_alive(authn: AuthnServer, pki: Pki) -> None:
    with requests.Session() as session:
        # per request: a session's verify loses to REQUESTS_CA_BUNDLE when that is set
        bodies = [session.get(authn.url, verify=pki.ca_bundle, cert=pki.good, timeout=10).json() for _ in range(5)]
    assert {body["dn"] for body in bodies} == {"CN=user,O=AMS tests"}
    assert len({body["port"] for body in bodies}) == 1  # one connection


# ---------------------------------------------------------------------- hostile clients --------
def test_silent_client_does_not_block_others(authn: AuthnServer, pki: Pki) -> None:
    with socket.create_connection(("127.0.0.1", authn.port), timeout=10) as silent:
        assert get(authn, pki, pki.good)["dn"] == "CN=user,O=AMS tests"
        assert wait_closed(silent, CLIENT_SECONDS + 3)  # the idle timeout, no handshake needed


def test_trickled_client_hello_is_cut_off(authn: AuthnServer, pki: Pki) -> None:
    hello = client_hello()
    started = time.monotonic()
    closed = False
    with socket.create_connection(("127.0.0.1", authn.port), timeout=10) as slow:
        for index, byte in enumerate(hello):  # 0.3 s a byte: each within client_timeout
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if index == 2:
                assert get(authn, pki, pki.good)["dn"] == "CN=user,O=AMS tests"  # others are served meanwhile
            if wait_closed(slow, 0.3):
                closed = True
                break
    elapsed = time.monotonic() - started
    assert closed, "the whole ClientHello got through"
    assert elapsed < HANDSHAKE_SECONDS + CLIENT_SECONDS + 3, elapsed


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="plain-http"),
        pytest.param(bytes(range(256)) * 8, id="random-bytes"),
        pytest.param(b"\x16\x03\x01\xff\xff" + b"\x01" * 2000, id="bogus-record"),
        pytest.param(client_hello()[:40], id="truncated-hello"),
    ],
)
def test_garbage_instead_of_a_client_hello(authn: AuthnServer, pki: Pki, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", authn.port), timeout=10) as bad:
        with contextlib.suppress(OSError):  # the server may have hung up already
            bad.sendall(payload)
            bad.shutdown(socket.SHUT_WR)
        assert wait_closed(bad, CLIENT_SECONDS + 3)
    assert get(authn, pki, pki.good)["dn"] == "CN=user,O=AMS tests"


def huge_cert(pki: Pki, stem: str, kilobytes: int) -> tuple[str, str]:
    subject = [(NameOID.ORGANIZATIONAL_UNIT_NAME, f"{i:04d}" + "u" * 996) for i in range(kilobytes)]
    return client_cert(new_ca("Huge CA"), [*subject, (NameOID.COMMON_NAME, "huge")]).write(pki.directory, stem)


def test_huge_certificate(authn: AuthnServer, pki: Pki) -> None:
    body = get(authn, pki, huge_cert(pki, "huge", 60))
    assert body["certs"] in (1, 2)
    assert body["dn"].startswith("CN=huge,OU=0059uuu")
    assert get(authn, pki, pki.good)["dn"] == "CN=user,O=AMS tests"


def test_oversized_certificate_fails_alone(authn: AuthnServer, pki: Pki) -> None:
    with pytest.raises(requests.RequestException):
        requests.get(authn.url, verify=pki.ca_bundle, cert=huge_cert(pki, "oversized", 200), timeout=10)
    assert get(authn, pki, pki.good)["dn"] == "CN=user,O=AMS tests"
