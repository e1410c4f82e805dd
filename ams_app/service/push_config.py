"""Push configuration: ``pushConfig`` bodies read into a PushRequest (their shape), then built
into the stored PushConfig (the rules, over the subscription's current one; docs/push.md)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class PushRequest:
    """A ``pushConfig`` object of a request, its fields typed; nothing checked beyond their shape."""

    type: str = ""
    push_endpoint: str = ""
    max_messages: int = 0
    base64_decode: bool = False
    authorization_type: str = ""
    retry_type: str = "linear"
    retry_period: int = 0
    mattermost_url: str = ""
    mattermost_username: str = ""
    mattermost_channel: str = ""


def read(raw: Any) -> PushRequest | None:
    """The shape of a ``pushConfig`` object: None (pull mode) when absent or empty."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _BAD
    if is_empty(raw):
        return None
    auth = raw.get("authorizationHeader") or {}
    retry = raw.get("retryPolicy") or {}
    if not isinstance(auth, dict) or not isinstance(retry, dict):
        raise _BAD
    return PushRequest(
        type=opt_str(raw, "type", _BAD) or "",
        push_endpoint=opt_str(raw, "pushEndpoint", _BAD) or "",
        max_messages=opt_int(raw, "maxMessages", _BAD) or 0,
        base64_decode=opt_bool(raw, "base64Decode", _BAD) or False,
        authorization_type=opt_str(auth, "type", _BAD) or "",
        retry_type=opt_str(retry, "type", _BAD) or "linear",
        retry_period=opt_int(retry, "period", _BAD) or 0,
        mattermost_url=opt_str(raw, "mattermostUrl", _BAD) or "",
        mattermost_username=opt_str(raw, "mattermostUsername", _BAD) or "",
        mattermost_channel=opt_str(raw, "mattermostChannel", _BAD) or "",
    )


def parse(raw: Any, old: PushConfig | None = None) -> PushConfig:
    """A ``pushConfig`` request object, read and built at once (pull mode when empty)."""
    return build(read(raw), old)


def build(request: PushRequest | None, old: PushConfig | None = None) -> PushConfig:
    """The stored config a request asks for, over ``old`` (the subscription's current one): an
    endpoint that stays keeps its verification, an omitted header type keeps the old header."""
    if request is None:
        return PushConfig()
    kind, endpoint, max_messages = request.type, request.push_endpoint, request.max_messages
    base64_decode, auth_type = request.base64_decode, request.authorization_type
    retry_type, retry_period = request.retry_type, request.retry_period
    mm_url, mm_user, mm_channel = request.mattermost_url, request.mattermost_username, request.mattermost_channel

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
