"""Shape checks for request bodies: JSON values in, typed values out, AmsError otherwise."""

from __future__ import annotations

import re
from typing import Any

from ams_app.errors import AmsError

NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
#: Longest name: a Kafka topic is named "{36-character project uuid}.{topic}" in 249 characters.
MAX_NAME_LENGTH = 200


def valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME_LENGTH and bool(NAME_RE.fullmatch(name))


def as_object(value: Any, error: AmsError) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise error
    return value


def opt_str(body: dict[str, Any], key: str, error: AmsError) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise error
    return value


def opt_str_list(body: dict[str, Any], key: str, error: AmsError) -> list[str] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise error
    return list(value)


def opt_int(body: dict[str, Any], key: str, error: AmsError) -> int | None:
    """An integer, or a string holding one; never a bool or a float with a fraction."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        raise error
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise error


def opt_bool(body: dict[str, Any], key: str, error: AmsError) -> bool | None:
    """A boolean, or the strings "true"/"false" (any case)."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise error
