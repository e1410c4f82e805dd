"""The outbound side of push: what a push endpoint receives (docs/push.md), the proof of ownership
of the endpoint, and the HTTP client that posts both. The service verifies endpoints with it; the
push workers deliver with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from ams_app import __version__
from ams_app.backends.log import StoredMessage
from ams_app.models import PushConfig
from ams_app.settings import Settings
from ams_app.wire import message_json, message_text

USER_AGENT = f"ams-push-worker/{__version__}"
#: Most bytes read of a verification answer (a hash is 64).
_MAX_HASH_BYTES = 4096


@dataclass
class Outcome:
    ok: bool
    detail: str  # "HTTP 204", "HTTP 503", "timed out", ...


def endpoint_body(config: PushConfig, subscription: str, messages: list[StoredMessage]) -> dict[str, Any]:
    """One message: ``{"message", "subscription"}``; with maxMessages > 1: ``{"messages": [...]}``."""
    wrapped = [{"message": message_json(m, config.base64_decode), "subscription": subscription} for m in messages]
    if max(config.max_messages, 1) == 1 and len(wrapped) == 1:
        return wrapped[0]
    return {"messages": wrapped}


def mattermost_body(config: PushConfig, message: StoredMessage) -> dict[str, Any]:
    return {
        "text": message_text(message.data, config.base64_decode),
        "username": config.mattermost_username,
        "channel": config.mattermost_channel,
    }


#: Most bytes of an endpoint's answer read (and dropped): reading a small answer to its end lets
#: the connection go back to the pool; a larger one costs its connection instead.
_MAX_ANSWER_BYTES = 1024 * 1024


def _drain(response: requests.Response) -> None:
    read = 0
    for chunk in response.iter_content(64 * 1024):
        read += len(chunk)
        if read > _MAX_ANSWER_BYTES:
            break


def _failure(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return f"TLS error: {exc}"[:300]
    if isinstance(exc, requests.ConnectionError):
        return f"connection failed: {exc}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]


class PushClient:
    """One pooled HTTPS client per worker; certificates verified unless configured off."""

    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.push_timeout_seconds
        self.verify: bool | str = (settings.push_ca_file or True) if settings.push_tls_verify else False
        self.session = requests.Session()
        self.session.headers["User-Agent"] = USER_AGENT
        size = max(settings.push_max_in_flight, 1)
        adapter = HTTPAdapter(pool_connections=size, pool_maxsize=size, max_retries=0)
        self.session.mount("https://", adapter)
        self.session.mount("http://", adapter)

    def close(self) -> None:
        self.session.close()

    def post(self, url: str, body: dict[str, Any], authorization: str = "") -> Outcome:
        """POST ``body`` as JSON: any 2xx (or 102) is a success; redirects are not followed."""
        headers = {"Authorization": authorization} if authorization else {}
        try:
            with self.session.post(
                url,
                json=body,
                headers=headers,
                timeout=self.timeout,
                verify=self.verify,
                allow_redirects=False,
                stream=True,
            ) as response:
                code = response.status_code
                _drain(response)
        except requests.RequestException as exc:
            return Outcome(False, _failure(exc))
        return Outcome(200 <= code < 300 or code == 102, f"HTTP {code}")

    def deliver(self, config: PushConfig, subscription: str, messages: list[StoredMessage]) -> Outcome:
        if config.type == "mattermost":
            outcome = Outcome(True, "nothing to send")
            for message in messages:  # one post each (mattermost configs take one at a time)
                outcome = self.post(config.mattermost_url, mattermost_body(config, message))
                if not outcome.ok:
                    return outcome
            return outcome
        authorization = config.authorization_value if config.authorization_type == "autogen" else ""
        return self.post(config.push_endpoint, endpoint_body(config, subscription, messages), authorization)

    def verification_failure(self, endpoint: str, expected: str) -> str | None:
        """GET ``{scheme}://{host[:port]}/ams_verification_hash``; None when it answers 200 with
        exactly the hash (surrounding whitespace aside), else why not."""
        parts = urlsplit(endpoint)
        url = f"{parts.scheme}://{parts.netloc}/ams_verification_hash"
        try:
            with self.session.get(
                url, timeout=self.timeout, verify=self.verify, allow_redirects=False, stream=True
            ) as response:
                if response.status_code != 200:
                    return "Wrong response status code"
                raw = response.raw.read(_MAX_HASH_BYTES + 1, decode_content=True)
        except requests.RequestException as exc:
            return _failure(exc)
        if raw.decode("utf-8", errors="replace").strip() != expected:
            return "Wrong verification hash"
        return None
