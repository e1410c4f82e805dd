"""The Kafka log's patience with a partition that has no leader yet (a moment after the topic is
created on several brokers, or after its leader was lost, or on a broker that has just started): the
offsets are asked again, briefly, then the failure is reported; never taken for an empty topic;
other errors are not retried. The broker's answers are played by a stand-in consumer; the multi-host
scenario (molecule/multinode) meets the real thing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

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
    clock = iter(range(0, 1000, 4))  # every look at the clock is 4 s later
    monkeypatch.setattr(kafka_log.time, "monotonic", lambda: float(next(clock)))
    consumer = _Answers(*[_error(KafkaError.LEADER_NOT_AVAILABLE)] * 10)
    with pytest.raises(KafkaException):
        _log_with(consumer)._watermarks("p.t")
    assert consumer.calls == 3  # at 4 s and 8 s within the 10 s, not at 12 s
