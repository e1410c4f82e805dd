"""``ams migrate from-argo --copy-messages-from``: the messages of the original ARGO AMS's Kafka
topics into the embedded backend's message log (docs/migration.md, "Messages into the embedded
backend").

The original keeps a topic's messages in the Kafka topic ``{project uuid}.{topic}``, partition 0,
and a message's id is its Kafka offset; subscriptions' offsets are those offsets. So each message
goes into the embedded log at its Kafka offset, with the publish time, attributes and data its
record holds (read as the Kafka backend reads the same records), and the topic's next offset
becomes Kafka's end: consumers resume at the same message, with the same ids, and new messages get
the ids Kafka would have given them.

Kafka is only read: a consumer assigned to the partition (never a member of a group, nothing
committed). A copy starts at the embedded topic's next offset (or Kafka's oldest retained offset,
when that is later) and writes a batch per transaction, so a second run copies only what is
missing and an interrupted one goes on where it stopped. It stops at the end Kafka reported when
it started: what the original publishes meanwhile is for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ams_app.backends.log import StoredMessage
from ams_app.backends.sqlite.log import SqliteMessageLog

#: Records read and written per transaction, at most.
BATCH = 500
#: librdkafka's options for a reader that is assigned partitions (as the Kafka backend's readers:
#: the group is the one the appliance's ACLs let the ams user read with, and never joined).
_READER = {
    "group.id": "ams-reader",
    "client.id": "ams-migrate",
    "enable.auto.commit": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "earliest",
    "allow.auto.create.topics": False,
}


class CopyError(RuntimeError):
    """Kafka cannot be read (the copy can run again); ``report``: what the run had done by then."""

    report: Any = None


@dataclass
class TopicCopy:
    """What the copy of one topic did (or, dry, would do)."""

    project: str  # name, for the report
    topic: str
    kafka_topic: str
    exists: bool = True
    low: int = 0  # Kafka's oldest retained offset
    high: int = 0  # Kafka's end (the next offset) when the copy started
    start: int = 0  # the first offset copied
    copied: int = 0
    skipped: int = 0  # records that are no message
    first_skipped: int = -1
    partitions: int = 1

    @property
    def held(self) -> int:
        """Messages of Kafka's range already in the embedded log (below where the copy started)."""
        return max(min(self.start, self.high) - self.low, 0)


class MessageCopy:
    """Kafka (``bootstrap``, with librdkafka's ``security`` options) into ``log``."""

    def __init__(
        self, bootstrap: str, security: Mapping[str, str], log: SqliteMessageLog, timeout_seconds: float
    ) -> None:
        from confluent_kafka import Consumer, KafkaException

        self.log = log
        self.timeout = timeout_seconds
        try:
            self._consumer = Consumer({"bootstrap.servers": bootstrap, **_READER, **security})
        except KafkaException as exc:  # options librdkafka refuses (a file it cannot read, say)
            raise CopyError(f"Kafka: {exc}") from exc
        self._topics: dict[str, int] | None = None

    def close(self) -> None:
        self._consumer.close()

    def check(self) -> None:
        """Reach Kafka and list its topics (before anything is written): CopyError if it cannot."""
        from confluent_kafka import KafkaException

        try:
            metadata = self._consumer.list_topics(timeout=self.timeout)  # all of them: none is created
        except KafkaException as exc:
            raise CopyError(f"Kafka cannot be read: {exc}") from exc
        self._topics = {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}

    def copy(self, key: str, project: str, topic: str, dry_run: bool) -> TopicCopy:
        """Copy (unless dry) what the embedded log lacks of the Kafka topic ``key``."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._topics is None:
            self.check()
        assert self._topics is not None
        done = TopicCopy(project, topic, key)
        if key not in self._topics:
            done.exists = False  # never published to (the original makes it on the first publish)
            if not dry_run:
                self.log.import_messages(key, [], 0)
            return done
        done.partitions = self._topics[key]
        try:
            done.low, done.high = self._consumer.get_watermark_offsets(
                TopicPartition(key, 0), timeout=self.timeout, cached=False
            )
            done.start = max(done.low, self.log.bounds(key)[1])
            if dry_run:
                done.copied = max(done.high - done.start, 0)
                return done
            if done.start < done.high:
                self._read(done)
            self.log.import_messages(key, [], done.high)
        except KafkaException as exc:
            raise CopyError(f"Kafka topic {key}: {exc}") from exc
        finally:
            self._consumer.unassign()
        return done

    def _read(self, done: TopicCopy) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        self._consumer.assign([TopicPartition(done.kafka_topic, 0, done.start)])
        position = done.start
        progress = time.monotonic()
        while position < done.high:
            if time.monotonic() - progress > self.timeout:
                raise CopyError(
                    f"Kafka topic {done.kafka_topic}: nothing read at offset {position} in {self.timeout:g} s "
                    f"(its end was {done.high}); run again to go on"
                )
            records = self._consumer.consume(min(BATCH, done.high - position), timeout=self.timeout)
            batch: list[StoredMessage] = []
            before = position
            for record in records:
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF and record.topic() == done.kafka_topic:
                        position = done.high  # nothing more below the end (what is left are no records)
                        break
                    if record.topic() is None or error.retriable():
                        continue  # news about the client (a broker away for a moment): librdkafka retries
                    raise KafkaException(error)
                if record.topic() != done.kafka_topic:
                    continue  # left over from the topic before
                offset: int = record.offset() or 0  # a record that is no error has its offset
                if offset >= done.high:
                    position = done.high
                    break
                position = offset + 1
                message = _message(record, offset)
                if message is None:
                    done.skipped += 1
                    done.first_skipped = offset if done.first_skipped < 0 else done.first_skipped
                else:
                    batch.append(message)
            if position > before:
                progress = time.monotonic()
                done.copied += self.log.import_messages(done.kafka_topic, batch, min(position, done.high))


def _message(record: Any, offset: int) -> StoredMessage | None:
    """The message a record of the original holds; None for a record that is none."""
    from ams_app.backends.kafka.log import _decoded  # the Kafka backend's own reading of a record

    value = record.value()
    if not value:
        return None
    try:
        message = _decoded(record, offset, value)
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    if not isinstance(message.data, str) or not isinstance(message.attributes, dict):
        return None
    return message


def report_lines(copies: list[TopicCopy], dry_run: bool) -> tuple[list[str], list[str]]:
    """The report's lines on the messages: a total, then one per topic; and the ``not mapped``
    lines (records that are no message, partitions besides 0)."""
    verb = "would copy" if dry_run else "copied"
    lines = [f"messages: {verb} {sum(c.copied for c in copies)}, already there {sum(c.held for c in copies)}"]
    unmapped: list[str] = []
    for c in copies:
        name = f"{c.project}/{c.topic}"
        if not c.exists:
            lines.append(f"messages of {name}: no Kafka topic {c.kafka_topic} (never published to)")
            continue
        where = f"Kafka offsets {c.low} to {c.high - 1}" if c.high > c.low else f"no message in Kafka, its end {c.high}"
        lines.append(f"messages of {name}: {verb} {c.copied}, already there {c.held} ({where})")
        if c.skipped:
            unmapped.append(
                f"messages of {name}: {c.skipped} record(s) of {c.kafka_topic} that are no message "
                f"(the first at offset {c.first_skipped}), not copied"
            )
        if c.partitions > 1:
            unmapped.append(
                f"messages of {name}: {c.kafka_topic} has {c.partitions} partitions; only partition 0, the one "
                "the original writes, was copied"
            )
    return lines, unmapped
