"""A real HTTPS push endpoint for the tests: records what it receives, fails or stalls on demand."""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import trustme


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    status: int  # what the receiver answered
    at: float = field(default_factory=time.monotonic)


class Receiver:
    """``https://127.0.0.1:{port}``, its certificate issued by ``ca`` (the tests' CA, which the
    servers trust; another CA makes an endpoint they must refuse).

    Behaviour, changeable at any time: ``fail_first`` POSTs answer ``fail_status``; every POST
    waits ``delay`` seconds before answering; ``verification`` is the (status, body) of
    ``GET /ams_verification_hash``."""

    def __init__(self, ca: trustme.CA) -> None:
        self.lock = threading.Lock()
        self.received: list[Received] = []
        self.verification_requests: list[str] = []
        self.fail_first = 0
        self.fail_status = 503
        self.delay = 0.0
        self.ok_status = 200
        self.verification: tuple[int, str] = (404, "")
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _answer(self, status: int, text: str = "") -> None:
                raw = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                with receiver.lock:
                    receiver.verification_requests.append(self.path)
                    status, text = receiver.verification
                self._answer(status, text if self.path == "/ams_verification_hash" else "")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    failing = receiver.fail_first > 0
                    if failing:
                        receiver.fail_first -= 1
                    status = receiver.fail_status if failing else receiver.ok_status
                    delay = receiver.delay
                if delay:
                    time.sleep(delay)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode(errors="replace")
                with receiver.lock:
                    receiver.received.append(Received(self.path, dict(self.headers.items()), body, status))
                self._answer(status)

        cert = ca.issue_cert("127.0.0.1", "localhost")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/push") -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- what arrived ------------------------------------------------------------------------
    def accepted(self) -> list[Received]:
        """The POSTs answered with success, in arrival order."""
        with self.lock:
            return [r for r in self.received if 200 <= r.status < 300]

    def failed(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if not 200 <= r.status < 300]

    def accepted_messages(self) -> list[dict[str, Any]]:
        """Every message of the accepted POSTs, in order (either body shape)."""
        out: list[dict[str, Any]] = []
        for r in self.accepted():
            if isinstance(r.body, dict) and "messages" in r.body:
                out += [m["message"] for m in r.body["messages"]]
            elif isinstance(r.body, dict) and "message" in r.body:
                out.append(r.body["message"])
        return out

    def wait_for(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Accepted messages once there are at least ``count`` (fails after ``timeout``: stuck)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.accepted_messages()
            if len(got) >= count:
                return got
            time.sleep(0.05)
        raise AssertionError(f"only {len(self.accepted_messages())} of {count} messages arrived in {timeout}s")
