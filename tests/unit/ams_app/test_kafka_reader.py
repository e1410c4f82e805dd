"""What a topic's reader holds between reads (ams_app/backends/kafka/log.py, ``_Reader``): a read
inside what it holds is answered from it, in offset order, within the read's end and byte limit;
one that starts outside it is not; the oldest messages go first when it is over its limits, never
one a read still needs. The reads themselves meet a real broker in tests/api/test_kafka_backend.py."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ams_app.backends.kafka import log as kafka_log
from ams_app.backends.log import StoredMessage


def _reader(offsets: list[int], size: int = 10, position: int | None = None) -> kafka_log._Reader:
    reader = kafka_log._Reader("p.t")
    reader.clear(offsets[0] if offsets else 0)
    for offset in offsets:
        reader.keep(StoredMessage(offset, 0, f"m{offset}", {}), size)
    if position is not None:
        reader.position = position
    return reader


def _offsets(messages: list[StoredMessage]) -> list[int]:
    return [m.offset for m in messages]


def test_a_read_inside_what_the_reader_holds_is_answered_from_it() -> None:
    reader = _reader(list(range(100, 200)))
    out, done = reader.take(120, 130, 10_000)
    assert (_offsets(out), done) == (list(range(120, 130)), True)


def test_a_read_past_what_it_holds_gets_the_held_part_and_is_not_complete() -> None:
    reader = _reader(list(range(100, 200)))
    out, done = reader.take(190, 250, 10_000)
    assert (_offsets(out), done) == (list(range(190, 200)), False)


@pytest.mark.parametrize("start", [99, 200, 500])
def test_a_read_outside_what_it_holds_gets_nothing_from_it(start: int) -> None:
    assert _reader(list(range(100, 200))).take(start, start + 10, 10_000) == ([], False)


def test_an_empty_reader_holds_nothing() -> None:
    reader = _reader([])
    assert not reader.covers(0)
    assert reader.take(0, 10, 10_000) == ([], False)


def test_the_byte_limit_cuts_the_answer_but_the_first_message_always_comes() -> None:
    reader = _reader(list(range(10)), size=100)
    assert _offsets(reader.take(0, 10, 250)[0]) == [0, 1]
    assert reader.take(0, 10, 250)[1] is True
    assert _offsets(reader.take(3, 10, 5)[0]) == [3]


def test_a_gap_in_the_partition_is_skipped_as_the_broker_would() -> None:
    reader = _reader([10, 11, 14, 15])  # 12 and 13: records no consumer sees (transaction markers)
    assert _offsets(reader.take(12, 20, 10_000)[0]) == [14, 15]
    assert _offsets(reader.take(11, 15, 10_000)[0]) == [11, 14]


def test_a_reader_that_read_up_to_the_end_of_a_read_completes_it_though_nothing_more_is_held() -> None:
    reader = _reader([0, 1, 2], position=5)  # 3 and 4 do not exist (the consumer went past them)
    assert reader.take(1, 5, 10_000) == (reader.messages[1:], True)


def test_over_its_limits_it_forgets_the_oldest_first_and_never_what_a_read_needs() -> None:
    limit = 2 * kafka_log._AHEAD_MESSAGES  # the read-ahead, and as much behind the latest read
    reader = _reader(list(range(limit + 50)))
    reader.trim(needed_from=20)
    assert reader.offsets[0] == 20  # 50 over, but 20 onwards is still wanted
    reader.trim(needed_from=10_000)
    assert len(reader.offsets) == limit
    assert reader.offsets[-1] == limit + 49
    assert reader.take(reader.offsets[0] - 1, 10_000, 10**9) == ([], False)


def test_over_its_byte_limit_it_forgets_too() -> None:
    big = kafka_log._AHEAD_BYTES // 2
    reader = _reader(list(range(10)), size=big)
    reader.trim(needed_from=100)
    assert reader.offsets == [6, 7, 8, 9]
    assert len(reader.messages) == len(reader.sizes) == 4


def test_clear_forgets_everything_and_moves_the_position() -> None:
    reader = _reader(list(range(5)))
    reader.clear(42)
    assert (reader.offsets, reader.messages, reader.position) == ([], [], 42)
    assert not reader.covers(42)


@pytest.mark.parametrize(
    ("attributes", "data"),
    [({}, "QUJD"), ({"k": "v"}, ""), ({'é"\\': "line\nbreak\u2028"}, 'not "base64" \\ é \x00')],
)
def test_a_record_value_is_the_json_of_the_original_payload(attributes: dict[str, str], data: str) -> None:
    stamp = "2026-11-25T16:00:00.123456789Z"
    value = kafka_log.payload(attributes, data, stamp)
    assert value == json.dumps({"attributes": attributes, "data": data, "publishTime": stamp}).encode()


@given(st.binary(max_size=64), st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3))
def test_checked_base64_data_makes_the_same_record_unescaped(raw: bytes, attributes: dict[str, str]) -> None:
    data = base64.b64encode(raw).decode()
    stamp = "2026-11-29T05:00:00.000000001Z"
    fast = kafka_log.payload(attributes, data, stamp, "key", base64=True)
    assert fast == kafka_log.payload(attributes, data, stamp, "key")
    assert json.loads(fast) == {"attributes": attributes, "data": data, "publishTime": stamp, "orderingKey": "key"}
