"""The copy of the original's Kafka records into the embedded log (ams_app/migrate/messages.py)
with a stand-in consumer: records that are no message counted and skipped, records of another
topic ignored, the end reported when the copy began kept, the report's lines; and an unreachable
Kafka refused before anything is written. The copy against a real Kafka, through argo-ams-library:
tests/api/test_migrate_argo.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ams_app.backends.sqlite.log import SqliteMessageLog
from ams_app.migrate.messages import CopyError, MessageCopy, report_lines

KEY = "0c6a.events"


class _Record:
    def __init__(self, topic: str, offset: int, value: bytes | None) -> None:
        self._topic, self._offset, self._value = topic, offset, value

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)


class _Consumer:
    """Kafka's partition 0 of KEY: offsets 3-9 retained (0-2 gone), 10 and 11 published after
    the copy began; two records per consume, and a stray record of another topic first."""

    def __init__(self) -> None:
        self.records = {o: _Record(KEY, o, _value(o)) for o in range(3, 12)}
        self.records[5] = _Record(KEY, 5, b"not json")
        self.records[6] = _Record(KEY, 6, None)
        self.position = 0
        self.stray = True

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={KEY: SimpleNamespace(error=None, partitions={0: None})})

    def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return (3, 10)

    def assign(self, partitions: list[Any]) -> None:
        self.position = partitions[0].offset

    def unassign(self) -> None:
        pass

    def consume(self, count: int, timeout: float) -> list[Any]:
        if self.stray:
            self.stray = False
            return [_Record("other.topic", 0, _value(0))]
        out = [self.records[o] for o in range(self.position, min(self.position + min(count, 2), 12))]
        self.position += len(out)
        return out

    def close(self) -> None:
        pass


def _value(offset: int) -> bytes:
    body: dict[str, Any] = {"messageId": "7", "data": "eA==", "publishTime": f"2026-11-20T10:00:0{offset % 10}.5Z"}
    if offset % 2:
        body["attributes"] = {"n": str(offset)}
    return json.dumps(body, indent=3).encode()


def _copier(log: SqliteMessageLog) -> MessageCopy:
    copier = MessageCopy.__new__(MessageCopy)
    copier.log, copier.timeout = log, 5.0
    copier._consumer = _Consumer()
    copier._topics = None
    return copier


def test_the_records_land_at_their_offsets_and_what_is_no_message_is_counted(tmp_path: Path) -> None:
    log = SqliteMessageLog(str(tmp_path / "messages.db"))
    try:
        dry = _copier(log).copy(KEY, "ARGO", "events", dry_run=True)
        assert (dry.copied, dry.held) == (7, 0)
        assert log.bounds(KEY) == (0, 0)  # the dry run wrote nothing
        done = _copier(log).copy(KEY, "ARGO", "events", dry_run=False)
        assert (done.copied, done.skipped, done.first_skipped) == (5, 2, 5)
        assert log.bounds(KEY) == (3, 10)  # 10 and 11 came after the copy began: the next run's
        stored = log.read(KEY, 0, 100, 1 << 20)
        assert [m.offset for m in stored] == [3, 4, 7, 8, 9]
        assert stored[0].attributes == {"n": "3"}
        assert stored[1].attributes == {}
        at = datetime(2026, 11, 20, 10, 0, 3, tzinfo=UTC)
        assert stored[0].publish_ns == int(at.timestamp()) * 1_000_000_000 + 500_000_000  # the record's, exactly
        lines, unmapped = report_lines([done], dry_run=False)
        assert lines == [
            "messages: copied 5, already there 0",
            "messages of ARGO/events: copied 5, already there 0 (Kafka offsets 3 to 9)",
        ]
        assert unmapped == [
            f"messages of ARGO/events: 2 record(s) of {KEY} that are no message (the first at offset 5), not copied"
        ]
        again = _copier(log).copy(KEY, "ARGO", "events", dry_run=False)
        assert (again.copied, again.held) == (0, 7)
    finally:
        log.close()


def test_a_topic_that_kafka_does_not_have_starts_empty(tmp_path: Path) -> None:
    log = SqliteMessageLog(str(tmp_path / "messages.db"))
    try:
        done = _copier(log).copy("0c6a.logs", "ARGO", "logs", dry_run=False)
        assert not done.exists
        assert log.bounds("0c6a.logs") == (0, 0)
        assert report_lines([done], dry_run=False)[0][1] == (
            "messages of ARGO/logs: no Kafka topic 0c6a.logs (never published to)"
        )
    finally:
        log.close()


def test_an_unreachable_kafka_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    log = SqliteMessageLog(str(tmp_path / "messages.db"))
    copier = MessageCopy("127.0.0.1:1", {}, log, 1.0)
    try:
        with pytest.raises(CopyError, match="Kafka cannot be read"):
            copier.check()
    finally:
        copier.close()
        log.close()
