"""Time formats of the API (ams_app.timeutil)."""

from __future__ import annotations

import pytest

from ams_app.timeutil import parse_iso8601_ns, zulu_nanos, zulu_seconds

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
