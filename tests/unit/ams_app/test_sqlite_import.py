"""Messages copied into the embedded log at given offsets (``ams migrate from-argo
--copy-messages-from``): each at its own offset and publish time, what is there already kept, the
topic's bounds those of the log copied from; an append afterwards continues after them."""

from __future__ import annotations

from pathlib import Path

from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.backends.sqlite.log import SqliteMessageLog


def _message(offset: int, data: str = "eA==") -> StoredMessage:
    return StoredMessage(offset, 1_700_000_000_000_000_000 + offset, data, {"n": str(offset)} if offset % 2 else {})


def test_messages_land_at_their_offsets_and_a_second_import_keeps_them(tmp_path: Path) -> None:
    log = SqliteMessageLog(str(tmp_path / "messages.db"))
    try:
        # the copy of a Kafka topic whose offsets 0-9 are gone (retention), 10-19 held, end 20:
        # a first run stopped after 10-14, a second one went on
        assert log.import_messages("p.t", [_message(i) for i in range(10, 15)], 15) == 5
        assert log.bounds("p.t") == (10, 15)
        assert log.import_messages("p.t", [_message(i, "eQ==") for i in range(12, 20)], 20) == 5
        assert log.bounds("p.t") == (10, 20)
        got = log.read("p.t", 0, 100, 1 << 20)
        assert [m.offset for m in got] == list(range(10, 20))
        assert got[2] == _message(12)  # the first copy kept, not overwritten
        assert got[1].attributes == {"n": "11"}
        assert got[1].publish_ns == 1_700_000_000_000_000_011
        assert log.import_messages("p.t", [], 20) == 0  # nothing missing: nothing stored
        assert log.append("p.t", [NewMessage("eg==", {})])[0].offset == 20
    finally:
        log.close()


def test_an_empty_topic_takes_the_end_of_the_log_copied_from(tmp_path: Path) -> None:
    log = SqliteMessageLog(str(tmp_path / "messages.db"))
    try:
        log.import_messages("p.empty", [], 42)  # every message expired there: ids go on from 42
        assert log.bounds("p.empty") == (42, 42)
        assert log.append("p.empty", [NewMessage("eA==", {})])[0].offset == 42
    finally:
        log.close()
