"""Reads of the Kafka log through its per-topic readers (ams_app/backends/kafka/log.py), in-process
against the real broker of ``make services-up``: whatever the order and the concurrency of the
reads, each answers exactly the records of its range, in order, whole; a reader caught up with its
partition gives its consumer back and reads on from its place; idle and surplus readers give their
consumer back; a read interrupted while its broker call runs leaves the reader to that call."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import gevent
import pytest

from ams_app.backends.kafka import log as kafka_log
from ams_app.backends.log import NewMessage, StoredMessage
from tests.api.test_kafka_backend import kafka_stopped
from tests.conftest import require_backend
from tests.helpers import service_settings, unique

pytestmark = pytest.mark.slow

COUNT = 600


def payload(index: int) -> str:
    return base64.b64encode(f"message {index} ".encode() * 40).decode()


@pytest.fixture
def log() -> Iterator[kafka_log.KafkaMessageLog]:
    require_backend("kafka")
    messages = kafka_log.KafkaMessageLog(service_settings()["AMS_KAFKA_BOOTSTRAP_SERVERS"], timeout_seconds=3)
    created: list[str] = []
    messages.created = created  # type: ignore[attr-defined]
    yield messages
    for key in created:
        messages.drop_topic(key)
    messages.close()


def topic(log: kafka_log.KafkaMessageLog, count: int = COUNT) -> str:
    key = unique("reads").replace("-", "") + ".t"
    log.create_topic(key)
    log.created.append(key)  # type: ignore[attr-defined]
    for first in range(0, count, 200):
        log.append(key, [NewMessage(payload(i), {"i": str(i)}) for i in range(first, min(first + 200, count))])
    return key


def check(messages: list[StoredMessage], start: int, end: int) -> None:
    assert [m.offset for m in messages] == list(range(start, end))
    assert [m.data for m in messages] == [payload(i) for i in range(start, end)]
    assert [m.attributes for m in messages] == [{"i": str(i)} for i in range(start, end)]


def test_consecutive_reads_get_every_record_once_in_order(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log)
    for start in range(0, COUNT, 100):
        check(log.read(key, start, start + 100, 10**7), start, start + 100)
    assert log._readers[key].position == COUNT


def test_reads_that_jump_about_and_go_back_are_answered_exactly(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log)
    for start, end in [(0, 50), (400, 450), (50, 100), (450, 500), (10, 20), (590, 600), (0, 600), (300, 301)]:
        check(log.read(key, start, end, 10**7), start, end)


def test_reads_that_keep_coming_from_behind_move_the_reader_back(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log)
    check(log.read(key, 500, 600, 10**7), 500, 600)
    for start in range(100, 100 + 10 * (kafka_log._BEHIND_IN_A_ROW + 2), 10):  # a replay from 100
        check(log.read(key, start, start + 10, 10**7), start, start + 10)
    reader = log._readers[key]
    assert reader.offsets[0] < 500  # it moved back to where the reads are
    assert reader.behind_in_a_row == 0


def test_two_topics_read_in_turn(log: kafka_log.KafkaMessageLog) -> None:
    first, second = topic(log, 300), topic(log, 300)
    for start in range(0, 300, 60):
        check(log.read(first, start, start + 60, 10**7), start, start + 60)
        check(log.read(second, start, start + 60, 10**7), start, start + 60)


def test_the_byte_limit_cuts_a_read_and_the_next_goes_on_from_there(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log, 100)
    record = len(log.read(key, 0, 1, 10**7)[0].data)
    start = 0
    while start < 100:
        got = log.read(key, start, 100, record * 7)
        assert 1 <= len(got) <= 7
        check(got, start, start + len(got))
        start += len(got)


def test_concurrent_reads_of_consecutive_ranges_each_get_their_own(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log)
    reads = [gevent.spawn(log.read, key, start, start + 50, 10**7) for start in range(0, COUNT, 50)]
    gevent.joinall(reads, raise_error=True)
    for index, read in enumerate(reads):
        check(read.value, index * 50, index * 50 + 50)


def test_a_reader_caught_up_gives_its_consumer_back_and_reads_on_from_its_place(
    log: kafka_log.KafkaMessageLog,
) -> None:
    key = topic(log, 100)
    check(log.read(key, 0, 100, 10**7), 0, 100)
    reader = log._readers[key]
    assert reader.consumer is None  # at the partition's end: no consumer asking the broker
    assert all(not c.assignment() for c in log._consumers)
    log.append(key, [NewMessage(payload(i), {"i": str(i)}) for i in range(100, 130)])
    check(log.read(key, 100, 130, 10**7), 100, 130)
    check(log.read(key, 50, 130, 10**7), 50, 130)  # what it held stays


def test_idle_readers_give_their_consumer_back(log: kafka_log.KafkaMessageLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log, "_READER_IDLE_SECONDS", 0.5)
    key = topic(log, 50)
    check(log.read(key, 0, 50, 10**7), 0, 50)
    assert key in log._readers
    log._sweeper.kill()
    log._sweeper = gevent.spawn(log._sweep_readers)  # its pace from the patched idle time
    gevent.sleep(2.0)
    assert key not in log._readers
    assert len(log._consumers) >= 1  # back in the pool, unassigned
    assert all(not c.assignment() for c in log._consumers)
    check(log.read(key, 10, 40, 10**7), 10, 40)  # a new reader for the next read


def test_surplus_readers_go_least_recently_used_first(
    log: kafka_log.KafkaMessageLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kafka_log, "_READERS", 2)
    keys = [topic(log, 20) for _ in range(3)]
    for key in keys:
        check(log.read(key, 0, 20, 10**7), 0, 20)
    assert list(log._readers) == keys[1:]
    gevent.sleep(0.5)  # the retired reader's consumer goes back to the pool
    check(log.read(keys[0], 5, 15, 10**7), 5, 15)
    assert list(log._readers) == [keys[2], keys[0]]


def test_a_read_interrupted_during_its_broker_call_leaves_the_reader_to_it(log: kafka_log.KafkaMessageLog) -> None:
    key = topic(log, 10)
    with kafka_stopped():  # the broker does not answer: the read waits in its pool thread
        waiting = gevent.spawn(log.read, key, 0, 10, 10**7)
        gevent.sleep(0.5)
        reader = log._readers[key]
        waiting.kill(gevent.GreenletExit("the caller gave up"))
        assert reader.lock.locked()  # its broker call still runs in the pool and owns the reader
    check(log.read(key, 0, 10, 10**7), 0, 10)  # waits for that call to end, then reads
    assert not reader.lock.locked()


def test_a_topic_made_with_a_retention_of_its_own_tells_the_broker(log: kafka_log.KafkaMessageLog) -> None:
    """messageRetentionDuration is the Kafka topic's retention.ms; made again without one, the
    topic goes back to the log's."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    key = unique("retention").replace("-", "") + ".t"
    log.create_topic(key, 3600)
    log.created.append(key)  # type: ignore[attr-defined]

    def retention_ms() -> str:
        resource = ConfigResource(ResourceType.TOPIC, key)
        for future in log._admin.describe_configs([resource]).values():
            return str(future.result(10)["retention.ms"].value)
        raise AssertionError("no answer")

    assert retention_ms() == "3600000"
    log.create_topic(key)
    assert retention_ms() == str(log.retention_ms)
