"""The service in the test process: ``create_app`` over the embedded stores in a temporary
directory, reached through Flask's test client instead of a socket (docs/testing.md).

``requests`` stays the client: a transport adapter hands each prepared request to the app's test
client and turns the answer back into a ``requests.Response``. So the tests, their helpers
(tests/helpers.py ``Api``) and the OpenAPI response check are the same as over a socket; only the
server process, TLS and the network are gone. What needs those (connections, TLS, restarts,
the official client, push deliveries) stays with tests/helpers.py ``AmsServer``.

The service is gevent-based and the test process is not monkey-patched: its background greenlets
run while a request waits on the hub (a long poll, a store call on the thread pool). A test that
drives the service from several threads at once needs a real server."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers

from ams_app.app import create_app
from ams_app.settings import Settings
from tests.helpers import Api

#: The base URL of an in-process service: never dialled, the adapter answers for it.
BASE = "http://127.0.0.1:9/v1"


class WsgiAdapter(HTTPAdapter):
    """A ``requests`` transport that calls a Flask app in-process."""

    def __init__(self, app: Any) -> None:
        super().__init__()
        self.client = app.test_client()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        url = urlsplit(request.url or "")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        answer = self.client.open(
            url.path,
            method=request.method or "GET",
            query_string=url.query,
            headers=dict(request.headers),
            data=body or b"",
        )
        response = requests.Response()
        response.status_code = answer.status_code
        response.reason = answer.status.partition(" ")[2]
        response.headers = CaseInsensitiveDict(dict(answer.headers))
        response._content = answer.get_data()
        response.url = request.url or ""
        response.request = request
        response.encoding = get_encoding_from_headers(response.headers)
        answer.close()
        return response


class InProcessServer:
    """What tests/helpers.py ``AmsServer`` offers the rules tests (``api()``, ``token``,
    ``backend``), with the service built in this process on the embedded backend."""

    backend = "embedded"
    url = BASE

    def __init__(self, data_dir: Path, token: str = "test-service-token", **settings: Any) -> None:
        self.token = token
        self.settings = Settings(
            data_dir=str(data_dir),
            service_token=token,
            pull_wait_seconds=2.0,  # as tests/helpers.py AmsServer's
            **settings,
        )
        self.app = create_app(self.settings)
        self.adapter = WsgiAdapter(self.app)

    def api(self, token: str | None = None) -> Api:
        return Api(self.url, self.token if token is None else token, transport=self.adapter)

    def stop(self) -> None:
        self.app.extensions["ams"].close()
