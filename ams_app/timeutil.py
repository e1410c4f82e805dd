"""Time formats of the AMS API."""

from __future__ import annotations

import functools
import re
import time
from datetime import UTC, datetime

_NS = 1_000_000_000


def now_ns() -> int:
    return time.time_ns()


def zulu_seconds(ns: int) -> str:
    """Resource timestamps: ``YYYY-MM-DDTHH:MM:SSZ`` in UTC."""
    return datetime.fromtimestamp(ns // _NS, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def zulu_nanos(ns: int) -> str:
    """Message ``publishTime``: UTC with all nine fractional digits, ending in ``Z``."""
    seconds, frac = divmod(ns, _NS)
    return f"{_zulu_second(seconds)}.{frac:09d}Z"


@functools.lru_cache(maxsize=4096)
def _zulu_second(seconds: int) -> str:
    """The messages of a pull were mostly published within the same few seconds."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"(Z|[+-]\d{2}:?\d{2})?$",
    re.IGNORECASE,
)


def parse_iso8601_ns(text: str) -> int:
    """Parse an ISO 8601 timestamp to UTC nanoseconds since the epoch.

    Accepts ``T`` or a space between date and time, any number of fractional digits up to
    nine, and ``Z``, ``+HH:MM`` or no zone (taken as UTC). Raises ``ValueError`` otherwise.
    """
    m = _ISO.match(text.strip())
    if not m:
        raise ValueError(f"not an ISO 8601 timestamp: {text!r}")
    year, month, day, hour, minute = (int(m.group(i)) for i in range(1, 6))
    second = int(m.group(6) or 0)
    frac = (m.group(7) or "").ljust(9, "0")
    zone = (m.group(8) or "Z").upper()
    dt = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    offset_s = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_s = sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return (int(dt.timestamp()) - offset_s) * _NS + int(frac or "0")


def parse_zulu_nanos(text: str) -> int:
    """:func:`parse_iso8601_ns`, fast for :func:`zulu_nanos`'s own shape (every record of the Kafka
    log carries one, and a pull decodes a hundred): the date and time part is parsed once per
    second and cached. Any other text goes through :func:`parse_iso8601_ns`, with its result or
    its ``ValueError``."""
    if len(text) == 30 and text[19] == "." and text[29] == "Z":
        fraction = text[20:29]
        if fraction.isascii() and fraction.isdigit():
            seconds = _zulu_epoch_seconds(text[:19])
            if seconds is not None:
                return seconds * _NS + int(fraction)
    return parse_iso8601_ns(text)


@functools.lru_cache(maxsize=4096)
def _zulu_epoch_seconds(prefix: str) -> int | None:
    try:
        return parse_iso8601_ns(prefix + "Z") // _NS
    except ValueError:
        return None
