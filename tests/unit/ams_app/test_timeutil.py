"""Time formats of the API (ams_app.timeutil)."""

from __future__ import annotations

import random

import pytest

from ams_app.timeutil import parse_iso8601_ns, parse_zulu_nanos, zulu_nanos, zulu_seconds

NS = 1_000_000_000
BASE = 1_704_103_200 * NS  # 2024-01-01T10:00:00Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-01T10:00:00.123Z", BASE + 123_000_000),
        ("2024-01-01 10:00:00.000Z", BASE),  # argo-ams-library when microseconds are 0
        ("2024-01-01T10:00:00Z", BASE),
        ("2024-01-01T10:00:00.123456789Z", BASE + 123_456_789),
        ("2024-01-01T10:00:00.5", BASE + 500_000_000),
        ("2024-01-01T12:00:00+02:00", BASE),
        ("2024-01-01T10:00Z", BASE),
        ("2024-01-01t10:00:00z", BASE),
    ],
)
def test_parse_iso8601(text: str, expected: int) -> None:
    assert parse_iso8601_ns(text) == expected


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2024-13-01T00:00:00Z", "2024-01-01", "2024-01-01T10:00:00.1234567890Z"]
)
def test_parse_iso8601_rejects(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - the message is the input
        parse_iso8601_ns(text)


def test_publish_time_has_nine_digits_and_z() -> None:
    assert zulu_nanos(BASE + 5) == "2024-01-01T10:00:00.000000005Z"


def test_resource_time_has_seconds() -> None:
    assert zulu_seconds(BASE + 999_999_999) == "2024-01-01T10:00:00Z"


def test_parse_zulu_nanos_inverts_zulu_nanos() -> None:
    rng = random.Random(7)
    for ns in [0, BASE, BASE + 999_999_999] + [rng.randrange(0, 4_000_000_000 * NS) for _ in range(2000)]:
        text = zulu_nanos(ns)
        assert parse_zulu_nanos(text) == ns == parse_iso8601_ns(text)


@pytest.mark.parametrize(
    "text",
    [
        "2024-01-01T10:00:00.123Z",
        "2024-01-01 10:00:00.000000000Z",
        "2024-01-01t10:00:00.000000000z",
        "2024-01-01T12:00:00.000000000+02:00",
        "2024-13-01T10:00:00.000000000Z",  # the fast path's shape, not a date
        "2024-01-01T10:00:00.00000000xZ",
        "2024-01-01T10:00:00.\u0661\u0662\u0663456789Z",  # digits, but not ASCII ones
        "2024-01-01T10:00:00,123456789Z",
        "",
    ],
)
def test_parse_zulu_nanos_agrees_with_parse_iso8601_elsewhere(text: str) -> None:
    try:
        expected: int | type[ValueError] = parse_iso8601_ns(text)
    except ValueError:
        expected = ValueError
    if expected is ValueError:
        with pytest.raises(ValueError):  # noqa: PT011 - the message is the input
            parse_zulu_nanos(text)
    else:
        assert parse_zulu_nanos(text) == expected
