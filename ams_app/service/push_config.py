"""Push configuration: parse and validate ``pushConfig`` bodies (docs/push.md)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import urlsplit

from ams_app.auth import new_token
from ams_app.errors import AmsError
from ams_app.models import PushConfig
from ams_app.service.validation import opt_bool, opt_int, opt_str

_BAD = AmsError.invalid_argument("Subscription")
DEFAULT_RETRY_PERIOD_MS = 3000


#: A host name, an IPv4 address or an IPv6 one (urlsplit drops its brackets).
_HOST = re.compile(r"[A-Za-z0-9._~-]+|[0-9A-Fa-f:.]+")


def _valid_https_url(url: str) -> bool:
    """An absolute https URL with a well-formed host and port (what Go's ParseRequestURI takes)."""
    if any(c.isspace() or ord(c) < 32 for c in url):
        return False
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        return False
    return parts.scheme == "https" and bool(parts.hostname) and bool(_HOST.fullmatch(parts.hostname or ""))


def is_empty(raw: dict[str, Any]) -> bool:
    """The Go zero value: every field empty, 0 or false (nested objects included)."""

    def empty(value: Any) -> bool:
        if isinstance(value, dict):
            return all(empty(v) for v in value.values())
        return value in (None, "", 0, False)

    return empty(raw)


def parse(raw: Any, old: PushConfig | None = None) -> PushConfig:
    """Turn a ``pushConfig`` request object into a stored config (pull mode when empty)."""
    if raw is None:
        return PushConfig()
    if not isinstance(raw, dict):
        raise _BAD
    if is_empty(raw):
        return PushConfig()
    kind = opt_str(raw, "type", _BAD) or ""
    endpoint = opt_str(raw, "pushEndpoint", _BAD) or ""
    max_messages = opt_int(raw, "maxMessages", _BAD) or 0
    base64_decode = opt_bool(raw, "base64Decode", _BAD) or False
    auth = raw.get("authorizationHeader") or {}
    retry = raw.get("retryPolicy") or {}
    if not isinstance(auth, dict) or not isinstance(retry, dict):
        raise _BAD
    auth_type = opt_str(auth, "type", _BAD) or ""
    retry_type = opt_str(retry, "type", _BAD) or "linear"
    retry_period = opt_int(retry, "period", _BAD) or 0
    mm_url = opt_str(raw, "mattermostUrl", _BAD) or ""
    mm_user = opt_str(raw, "mattermostUsername", _BAD) or ""
    mm_channel = opt_str(raw, "mattermostChannel", _BAD) or ""

    if retry_type not in ("linear", "slowstart"):
        raise AmsError.invalid_data("Retry policy can only be of 'linear' or 'slowstart' type")
    if kind not in ("http_endpoint", "mattermost"):
        raise AmsError.invalid_data("Push configuration type can only be of 'http_endpoint' or 'mattermost'")
    if retry_type == "slowstart":
        retry_period = 0
    elif retry_period <= 0:
        retry_period = DEFAULT_RETRY_PERIOD_MS

    if kind == "mattermost":
        if not mm_url:
            raise AmsError.invalid_data("Field mattermostUrl cannot be empty")
        return PushConfig(
            type=kind,
            max_messages=1,
            authorization_type="disabled",
            retry_type=retry_type,
            retry_period=retry_period,
            verified=True,
            mattermost_url=mm_url,
            mattermost_username=mm_user,
            mattermost_channel=mm_channel,
            base64_decode=base64_decode,
        )

    if not _valid_https_url(endpoint):
        raise AmsError.invalid_data("Push endpoint should be addressed by a valid https url")
    previous = old if old is not None and old.type == "http_endpoint" else None
    auth_value = ""
    if not auth_type:
        # No type given: an existing push subscription keeps its header, a new one gets autogen.
        auth_type = previous.authorization_type if previous and previous.authorization_type else "autogen"
        if previous and previous.authorization_type == "autogen":
            auth_value = previous.authorization_value
    if auth_type not in ("autogen", "disabled"):
        raise AmsError.invalid_data("Authorization header type can only be of 'autogen' or 'disabled' type")
    if auth_type == "autogen" and not auth_value:
        auth_value = new_token()
    if max_messages <= 0:
        max_messages = previous.max_messages if previous and previous.max_messages > 0 else 1
    config = PushConfig(
        type=kind,
        push_endpoint=endpoint,
        max_messages=max_messages,
        authorization_type=auth_type,
        authorization_value=auth_value,
        retry_type=retry_type,
        retry_period=retry_period,
        verification_hash=new_token(),
        verified=False,
        base64_decode=base64_decode,
    )
    if previous and previous.push_endpoint == endpoint:
        # Same endpoint: it stays verified under the hash it was verified with.
        config = dataclasses.replace(config, verification_hash=previous.verification_hash, verified=previous.verified)
    return config
