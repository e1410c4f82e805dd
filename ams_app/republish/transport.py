"""The republisher's HTTP: one request, and which failures are worth another try."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import requests

from ams_app.republish.config import Config


class Transient(Exception):
    """The request may not have reached the service, or it could not answer: try again."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the decoded JSON, or None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The error message of the AMS envelope (or the status alone)."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        return f"{self.status} {text}" if isinstance(text, str) else str(self.status)


class Transport(Protocol):
    """One HTTP request to the API: ``path`` is below ``/v1``."""

    def __call__(self, method: str, path: str, body: Any | None) -> Reply: ...


def is_transient(status: int) -> bool:
    return status >= 500 or status == 429


class HttpTransport:
    """The API over ``requests`` with one Session (kept-alive connections)."""

    def __init__(self, config: Config) -> None:
        self.base = config.url + "/v1"
        self.verify = config.verify
        self.timeout = config.timeout
        self.session = requests.Session()
        self.session.headers["x-api-key"] = config.token

    def __call__(self, method: str, path: str, body: Any | None) -> Reply:
        try:
            response = self.session.request(
                method,
                self.base + path,
                json=body,
                timeout=self.timeout,
                verify=self.verify,  # per request: a session's verify loses to REQUESTS_CA_BUNDLE
            )
        except requests.RequestException as exc:
            raise Transient(f"{method} {path}: {exc}") from exc
        try:
            decoded = response.json() if response.content else None
        except ValueError as exc:
            if not is_transient(response.status_code):  # e.g. a proxy's page: not the API
                raise Transient(f"{method} {path}: {response.status_code} answer is not JSON") from exc
            decoded = None
        return Reply(response.status_code, decoded)

    def close(self) -> None:
        self.session.close()
