"""ams_app/jsoncodec.py: orjson where it can, and the same values as the standard library's json
where it cannot."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from ams_app import jsoncodec

PULL_ANSWER = {
    "receivedMessages": [
        {
            "ackId": f"projects/p/subscriptions/s:{i}",
            "message": {
                "messageId": str(i),
                "attributes": {"k": "välue ☃", "emoji": "\U0001f600"},
                "data": "aGVsbG8=",
                "publishTime": "2026-11-26T10:00:00.123456789Z",
            },
        }
        for i in range(3)
    ]
}

ENCODED: list[Any] = [
    PULL_ANSWER,
    {},
    [],
    {"n": 1.5, "big": 2**63 - 1, "neg": -(2**63), "t": True, "f": False, "z": None},
    {"beyond 64 bits": 2**64},  # orjson refuses: json's turn
    {1: "a non-string key"},  # orjson refuses: json turns the key into "1"
    {"lone": "\ud800"},  # orjson refuses: json escapes it as \ud800
    "a string",
]


@pytest.mark.parametrize("value", ENCODED, ids=range(len(ENCODED)))
def test_dumps_reads_back_as_json_dumps_does(value: Any) -> None:
    out = jsoncodec.dumps(value)
    assert isinstance(out, bytes)
    assert json.loads(out) == json.loads(json.dumps(value))


def test_dumps_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError):
        jsoncodec.dumps({"a set": {1, 2}})


DECODED = [
    b'{"attributes": {"a": "b"}, "data": "aGVsbG8=", "publishTime": "2026-11-26T10:00:00.000000001Z"}',
    b'{"big": 18446744073709551616, "small": 1e2}',  # orjson reads a float: json's turn
    b'{"negative": -18446744073709551616}',
    b'{"u64": 18446744073709551615}',
    b'{"n": NaN, "i": -Infinity}',  # orjson refuses; json accepts
    b'{"lone": "\\ud800"}',  # orjson refuses; json lets it through (the API's body check refuses it)
    "☃ as str".join(['"', '"']).encode(),
    b'{"dup": 1, "dup": 2}',
    b"[" * 900 + b"]" * 900,
    b"[" * 5000 + b"]" * 5000,  # deeper than orjson's limit and than json's: RecursionError
    # not JSON: the same exception as json's (ValueError: JSONDecodeError, UnicodeDecodeError)
    b"",
    b"{",
    b'{"a": }',
    b"\xff",
    b'{"a": 1} x',
]


def _outcome(decode: Any, text: bytes) -> str:
    try:
        return repr(decode(text))  # repr: NaN is not equal to itself
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__  # orjson's JSONDecodeError is json's, subclassed


@pytest.mark.parametrize("text", DECODED, ids=range(len(DECODED)))
def test_loads_gives_what_json_loads_gives(text: bytes) -> None:
    assert _outcome(jsoncodec.loads, text) == _outcome(json.loads, text)
    with contextlib.suppress(UnicodeDecodeError):  # the same as text, if text is UTF-8
        as_str = text.decode()
        assert _outcome(jsoncodec.loads, as_str) == _outcome(json.loads, as_str)


@pytest.mark.parametrize(
    "text",
    [b'"\\ud800"', b'"\\udc00\\ud800"', b'"\xed\xa0\x80"', b'{"a": ["\\udfff"]}', b'{"a": 1.5, "b": "\\ud800"}'],
)
def test_parse_never_calls_a_text_with_a_lone_surrogate_free_of_them(text: bytes) -> None:
    """The API skips its search for lone surrogates when parse says orjson read the text
    (ams_app/api/pipeline.py): a text holding one must never be said to be free of them."""
    value, surrogate_free = jsoncodec.parse(text)
    assert not surrogate_free
    assert value == json.loads(text)


@pytest.mark.parametrize("text", [b'"\\ud83d\\ude00"', '"😀"'.encode(), b'{"a": [1, 2.5, "x"]}'])
def test_parse_says_orjson_read_a_text_without_one(text: bytes) -> None:
    assert jsoncodec.parse(text) == (json.loads(text), True)
