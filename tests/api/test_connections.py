"""Hostile connections against ``ams serve`` (ams_app/serve.py) over real sockets: idle and
trickling clients cannot starve the others, a request's head and body have deadlines of their own
(not per byte), and a full server answers at once instead of queueing.

The assertions are on whether a request was served and what it was told, never on how long it
took: every client call has a generous timeout, and a request that is not served fails by it."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.helpers import AmsServer, Api, sample

LIMIT = 40  # max_connections of the server under test
HEAD_SECONDS = 2
BODY_SECONDS = 2


@pytest.fixture
def srv(make_server: Any) -> AmsServer:
    server: AmsServer = make_server(
        tls=False,
        ams_max_connections=str(LIMIT),
        ams_request_head_timeout=str(HEAD_SECONDS),
        ams_request_body_timeout=str(BODY_SECONDS),
        ams_pull_wait_seconds="8",
    )
    return server


@contextlib.contextmanager
def idle_connections(srv: AmsServer, count: int, first_bytes: bytes = b"") -> Iterator[list[socket.socket]]:
    held = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            if first_bytes:
                sock.sendall(first_bytes)
            held.append(sock)
        yield held
    finally:
        for sock in held:
            sock.close()


def status_served(srv: AmsServer) -> int:
    return int(requests.get(f"{srv.url}/status", timeout=20).status_code)


def read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the one answer the server sends before closing."""
    data = b""
    sock.settimeout(20)
    while True:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_more_idle_connections_than_the_limit_do_not_starve_a_real_request(srv: AmsServer) -> None:
    """Five times the limit of connections that send nothing (the issue's 1,000 idle sockets)."""
    with idle_connections(srv, 5 * LIMIT):
        for _ in range(3):
            assert status_served(srv) == 200


def test_trickling_heads_do_not_starve_a_real_request(srv: AmsServer) -> None:
    """Connections that keep sending a header byte now and then: each one resets a per-byte timeout,
    not the whole-head deadline, and they are idle to the limit (no request under way)."""
    with idle_connections(srv, 2 * LIMIT, first_bytes=b"GET /v1/status HTTP/1.1\r\nX-Slow: ") as held:
        for sock in held:
            sock.sendall(b"a")
        assert status_served(srv) == 200


def trickle(sock: socket.socket, byte: bytes, seconds: float) -> None:
    """Send ``byte`` every 0.3 s for at most ``seconds``, stopping as soon as the server answers."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.3)
        if readable:
            return
        sock.sendall(byte)


def test_a_request_head_past_its_deadline_gets_408_and_the_connection_closes(srv: AmsServer) -> None:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Trickle: ")
        trickle(sock, b"a", 5 * HEAD_SECONDS)  # never silent for long: a per-byte timeout never fires
        status, body = read_answer(sock)
    assert (status, body) == (
        408,
        {"error": {"code": 408, "message": "Request headers took too long", "status": "REQUEST_TIMEOUT"}},
    )
    assert sample(srv.api().scrape(), "ams_http_connections_refused_total", reason="head_timeout") == 1


def test_a_request_body_past_its_deadline_gets_408_and_the_connection_closes(srv: AmsServer) -> None:
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/projects/slow HTTP/1.1\r\nHost: x\r\nx-api-key: "
            + srv.token.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        trickle(sock, b" ", 5 * BODY_SECONDS)
        status, body = read_answer(sock)
    assert (status, body) == (
        408,
        {"error": {"code": 408, "message": "Request body took too long", "status": "REQUEST_TIMEOUT"}},
    )
    assert requests.get(f"{srv.url}/projects/slow", headers={"x-api-key": srv.token}, timeout=20).status_code == 404
    assert sample(srv.api().scrape(), "ams_http_connections_refused_total", reason="body_timeout") == 1


def test_a_full_server_answers_503_at_once_and_serves_again_after(srv: AmsServer) -> None:
    """Every slot busy with a long-poll pull: a new connection is told 503, not queued."""
    api = srv.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"})
    api.session.close()  # its idle keep-alive connection would be closed to make room, not refused
    answers: list[int] = []
    started = threading.Barrier(LIMIT + 1)

    def long_poll() -> None:
        with requests.Session() as session:
            started.wait()
            r = session.post(
                f"{srv.url}/projects/{project}/subscriptions/s:pull",
                json={"maxMessages": "1", "returnImmediately": "false"},
                headers={"x-api-key": srv.token},
                timeout=30,
            )
            answers.append(r.status_code)

    pulls = [threading.Thread(target=long_poll) for _ in range(LIMIT)]
    for thread in pulls:
        thread.start()
    started.wait()
    time.sleep(1.5)  # the pulls are waiting on the server (8 s each)
    r = requests.get(f"{srv.url}/status", timeout=20)
    assert r.status_code == 503, r.text
    assert r.json() == {"error": {"code": 503, "message": "Too many connections", "status": "UNAVAILABLE"}}
    for thread in pulls:
        thread.join()
    assert answers == [200] * LIMIT  # the busy ones were served, none cut
    assert status_served(srv) == 200
    assert sample(srv.api().scrape(), "ams_http_connections_refused_total", reason="full") == 1


def test_an_idle_tls_client_that_never_says_hello_does_not_hold_a_slot(make_server: Any) -> None:
    server: AmsServer = make_server(ams_max_connections=str(LIMIT), ams_request_head_timeout=str(HEAD_SECONDS))
    with idle_connections(server, 3 * LIMIT):  # TCP connected, no TLS handshake
        assert status_served(server) == 200


# moved from test_pull_ack.py, which runs in-process on the embedded backend: waiting pulls on a
# real server's greenlets, other requests on connections of their own
def test_waiting_pulls_do_not_block_other_requests(api: Api, project: str, topic: str, sub: str) -> None:
    waiters = [threading.Thread(target=api.as_(api.token).pull, args=(project, sub, 1, False)) for _ in range(20)]
    for w in waiters:
        w.start()
    time.sleep(0.3)
    for _ in range(5):
        # a request stuck behind the waiting pulls would wait out their 2 s; unblocked ones take milliseconds
        for path in ("/status", f"/projects/{project}/topics/{topic}"):
            started = time.monotonic()
            assert api.get(path).status_code == 200
            assert time.monotonic() - started < 1.0, path
    for w in waiters:
        w.join(10)


def test_tls_clients_that_hang_up_during_the_answer_leave_no_traceback(make_server: Any) -> None:
    """A TLS client that asks for a large answer and goes before reading it (a health checker, a
    killed consumer) is not a server fault: the log says so in a line, without a traceback, and the
    server serves on."""
    server: AmsServer = make_server()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = f"GET /v1/openapi.json HTTP/1.1\r\nHost: {server.host}\r\n\r\n".encode()
    for abrupt in (False, True) * 10:
        raw = socket.socket()
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the answer cannot all fit in it
        raw.settimeout(10)
        raw.connect(("127.0.0.1", server.port))
        tls = context.wrap_socket(raw)  # takes over the socket
        tls.sendall(request)
        tls.recv(1)  # the answer has begun
        if abrupt:  # a reset, not a FIN
            tls.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        tls.close()  # no close_notify: the connection just ends
    assert status_served(server) == 200
    assert server.stop() == 0  # whatever the server buffered is written
    log = server.log()
    assert "Traceback" not in log, log
    departures = [line for line in log.splitlines() if "went away during the answer" in line]
    assert departures, log
    assert all(" INFO " in line for line in departures), departures  # the client's doing, not an error
