"""A message as the API shows it: in pull answers and in push deliveries (docs/push.md,
openapi.yaml ``ReceivedMessage``). One definition, so that the two never differ."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ams_app.backends.log import StoredMessage
from ams_app.timeutil import zulu_nanos


def message_text(data: str, decode: bool) -> str:
    if not decode:
        return data
    try:
        return base64.b64decode(data, validate=True).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return data


def message_json(message: StoredMessage, decode: bool) -> dict[str, Any]:
    """A message as pull shows it (``data`` decoded when the config says base64Decode)."""
    out: dict[str, Any] = {"messageId": str(message.offset)}
    if message.attributes:
        out["attributes"] = message.attributes
    out["data"] = message_text(message.data, decode)
    out["publishTime"] = zulu_nanos(message.publish_ns)
    if message.ordering_key:
        out["orderingKey"] = message.ordering_key
    return out
