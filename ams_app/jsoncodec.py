"""JSON on the hot paths: the API's answers, request bodies and the Kafka records a pull decodes.

orjson does the work: encoding a pull answer of 100 messages of 1 KB takes about 15 µs against
610 µs for ``json.dumps``, and decoding its 100 records 0.14 ms against 0.26 ms (docs/benchmarks.md,
"orjson on the owner's path"). What orjson refuses, the standard library is asked next, so that
the result is what ``json`` gives, byte for byte in meaning:

- ``dumps``: integers beyond 64 bits, dict keys that are not strings, and strings holding a lone
  surrogate (which ``json.dumps`` escapes as ``\\udXXX``). orjson writes compact separators and
  UTF-8 rather than ``\\u`` escapes; both are the same JSON to any reader.
- ``loads``: ``NaN`` and ``Infinity``, nesting deeper than orjson's limit (``json.loads`` then
  raises ``RecursionError`` or decodes it), and lone surrogates (``json.loads`` lets them through;
  the API's body check refuses them afterwards, ams_app/api/pipeline.py). And a text whose value
  holds a float is read again by ``json``: orjson turns an integer beyond 64 bits into a float
  without refusing it, and the API's bodies and records hold no floats but by mistake. (A scan of
  the text for long runs of digits would cost more than the decoding: 13 µs for a record of 1 KB.)
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> bytes:
    """``value`` as UTF-8 JSON text."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value).encode()


def loads(text: bytes | str) -> Any:
    """The value of the JSON ``text``; ValueError (or RecursionError) as ``json.loads`` raises."""
    return parse(text)[0]


def parse(text: bytes | str) -> tuple[Any, bool]:
    """``loads``, and whether orjson read the text: then it holds no lone surrogate (orjson
    refuses them, escaped or as bytes), and the API's body check need not look for one."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text), False
    return (json.loads(text) if _holds_float(value) else value), True


def _holds_float(value: Any) -> bool:
    """Whether a float is anywhere in ``value`` (without recursion: nesting may be 1,024 deep)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is float:
            return True
        if kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
    return False
