"""The Kafka log's patience with a partition that has no leader yet (a moment after the topic is
created on several brokers, or after its leader was lost, or on a broker that has just started): the
offsets are asked again, briefly, then the failure is reported; never taken for an empty topic;
other errors are not retried. The broker's answers are played by a stand-in consumer; the multi-host
scenario (molecule/multinode) meets the real thing."""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from ams_app.backends.errors import BackendUnavailable
from ams_app.backends.kafka import log as kafka_log


class _Answers:
    """get_watermark_offsets answers: an exception to raise or the offsets to return, in turn."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls = 0

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        self.calls += 1
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


def _log_with(consumer: _Answers) -> kafka_log.KafkaMessageLog:
    log = object.__new__(kafka_log.KafkaMessageLog)  # no producer, no admin client: no broker needed
    log.timeout = 30.0

    @contextmanager
    def pooled() -> Iterator[_Answers]:
        yield consumer

    log._consumer = pooled  # type: ignore[method-assign]
    log._discarded = set()
    return log


@pytest.fixture(autouse=True)
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(kafka_log, "_os_sleep", slept.append)
    return slept


def _error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        # a broker that has just started knows no topic until the controller tells it
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        # a leader just elected that has not learnt the high watermark yet
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        # a pooled consumer's connection to a broker that was restarted
        KafkaError._TRANSPORT,
    ],
)
def test_no_leader_yet_is_asked_again(code: int, slept: list[float]) -> None:
    consumer = _Answers(_error(code), _error(code), (0, 7))
    assert _log_with(consumer)._watermarks("p.t") == (0, 7)
    assert consumer.calls == 3
    assert slept == [0.05, 0.1]  # backing off


def test_what_librdkafka_flags_retriable_is_asked_again() -> None:
    flagged = KafkaException(KafkaError(KafkaError.NOT_ENOUGH_REPLICAS, "a moment", retriable=True))
    consumer = _Answers(flagged, (3, 9))
    assert _log_with(consumer)._watermarks("p.t") == (3, 9)
    assert consumer.calls == 2


def test_an_unknown_topic_is_never_taken_for_an_empty_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # (0, 0) would tell a consumer draining the topic that it is at the end, with messages left
    clock = iter(range(0, 1000, 4))
    monkeypatch.setattr(kafka_log.time, "monotonic", lambda: float(next(clock)))
    consumer = _Answers(*[_error(KafkaError.UNKNOWN_TOPIC_OR_PART)] * 10)
    with pytest.raises(KafkaException):
        _log_with(consumer)._watermarks("p.t")


def test_other_errors_are_not_retried() -> None:
    consumer = _Answers(_error(KafkaError.TOPIC_AUTHORIZATION_FAILED), (0, 7))
    with pytest.raises(KafkaException):
        _log_with(consumer)._watermarks("p.t")
    assert consumer.calls == 1


def test_no_leader_for_too_long_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 1000, 12))  # every look at the clock is 12 s later
    monkeypatch.setattr(kafka_log.time, "monotonic", lambda: float(next(clock)))
    consumer = _Answers(*[_error(KafkaError.LEADER_NOT_AVAILABLE)] * 10)
    with pytest.raises(KafkaException):
        _log_with(consumer)._watermarks("p.t")
    assert consumer.calls == 3  # at 12 s and 24 s within the 25 s, not at 36 s


class _Record:
    def __init__(self, offset: int = 0, error: KafkaError | None = None, topic: str | None = "p.t") -> None:
        self._offset, self._error, self._topic = offset, error, topic

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str | None:
        return self._topic

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b'{"data": "eA==", "attributes": {}, "publishTime": "2026-11-24T00:00:00Z"}'

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class _Reader:
    """consume() answers, in turn; then nothing."""

    def __init__(self, *batches: list[_Record]) -> None:
        self.batches = list(batches)

    def assign(self, partitions: Any) -> None:
        pass

    def unassign(self) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        return self.batches.pop(0) if self.batches else []

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return (-1001, -1001)  # librdkafka's "not known yet"


class _Done:
    """What ThreadPool.spawn returns, for a call made at once in this thread."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.error: BaseException | None = None
        try:
            self.value = fn(*args)
        except Exception as exc:
            self.error = exc

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def ready(self) -> bool:
        return True


def _reading_log(reader: _Reader) -> kafka_log.KafkaMessageLog:
    """A log whose every consumer is ``reader``, its pool calls made in this thread."""
    log = _log_with(reader)  # type: ignore[arg-type]
    log._run = lambda fn, *args: fn(*args)  # type: ignore[method-assign]
    log._pool = types.SimpleNamespace(spawn=_Done)  # type: ignore[assignment]
    log._readers = {}
    log._consumers, log._consumers_lock = [], threading.Lock()
    log._borrow = lambda: reader  # type: ignore[method-assign, assignment, return-value]
    return log


def test_news_about_a_broker_queued_in_a_pooled_consumer_does_not_fail_a_read() -> None:
    # "kafka2:9092/2: Disconnected", reported while the consumer sat in the pool (no topic)
    disconnected = _Record(error=KafkaError(KafkaError._TRANSPORT), topic=None)
    reader = _Reader([disconnected], [_Record(4), _Record(5)])
    assert [m.offset for m in _reading_log(reader).read("p.t", 4, 6, 1 << 20)] == [4, 5]


def test_a_read_from_behind_the_topics_reader_takes_the_same_news_in_its_stride() -> None:
    disconnected = _Record(error=KafkaError(KafkaError._TRANSPORT), topic=None)
    moving = _Record(error=KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    reader = _Reader([disconnected], [moving], [_Record(4), _Record(5)])
    assert [m.offset for m in _reading_log(reader)._read_once("p.t", 4, 6, 1 << 20)] == [4, 5]


def test_a_leader_changing_under_a_read_is_waited_for() -> None:
    moving = _Record(error=KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    reader = _Reader([moving], [_Record(0)])
    assert [m.offset for m in _reading_log(reader).read("p.t", 0, 1, 1 << 20)] == [0]


def test_a_read_that_gets_nothing_but_errors_reports_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 1000, 4))
    monkeypatch.setattr(kafka_log.time, "monotonic", lambda: float(next(clock)))
    reader = _Reader(*[[_Record(error=KafkaError(KafkaError._ALL_BROKERS_DOWN), topic=None)]] * 5)
    with pytest.raises(BackendUnavailable, match=r"ALL_BROKERS_DOWN|All broker"):  # told 503
        _reading_log(reader).read("p.t", 0, 1, 1 << 20)


def test_a_partition_error_that_will_not_pass_fails_the_read_at_once() -> None:
    reader = _Reader([_Record(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))], [_Record(0)])
    with pytest.raises(BackendUnavailable):  # told 503
        _reading_log(reader).read("p.t", 0, 1, 1 << 20)
    assert len(reader.batches) == 1  # at once: the next batch is never asked for


class _Stale:
    """A consumer whose view of the cluster is stale: the first one made knows no new topic."""

    made: ClassVar[list[_Stale]] = []

    def __init__(self, config: Any) -> None:
        self.stale = not _Stale.made
        self.closed = False
        _Stale.made.append(self)

    def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> tuple[int, int]:
        if self.stale:
            raise _error(KafkaError._UNKNOWN_PARTITION)
        return (0, 7)

    def close(self) -> None:
        self.closed = True


def test_a_consumer_that_keeps_failing_is_replaced_by_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    _Stale.made = []
    monkeypatch.setattr(kafka_log, "Consumer", _Stale)
    log = object.__new__(kafka_log.KafkaMessageLog)
    log.timeout = 30.0
    log._consumer_config = {}
    log._consumers = []
    log._consumers_lock = threading.Lock()
    log._discarded = set()
    assert log._watermarks("p.t") == (0, 7)
    first, second = _Stale.made
    assert first.closed  # not pooled again
    assert log._consumers == [second]
