"""Publishing to the Kafka log (ams_app/backends/kafka/log.py), in-process against the real broker
of ``make services-up``: each append is answered with the offsets the broker gave its messages, in
order, whatever the concurrency; an append waits for its delivery reports without a pool thread, so
publishes go on while every pool thread is busy; a stalled broker is a 503 after the timeout."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import gevent
import pytest
from gevent import monkey

from ams_app.backends.errors import BackendUnavailable
from ams_app.backends.kafka import log as kafka_log
from ams_app.backends.log import NewMessage
from tests.api.test_kafka_backend import kafka_stopped
from tests.conftest import require_backend
from tests.helpers import service_settings, unique

pytestmark = pytest.mark.slow


@pytest.fixture
def log() -> Iterator[kafka_log.KafkaMessageLog]:
    require_backend("kafka")
    messages = kafka_log.KafkaMessageLog(service_settings()["AMS_KAFKA_BOOTSTRAP_SERVERS"], timeout_seconds=3)
    key = unique("publish").replace("-", "") + ".t"
    messages.create_topic(key)
    messages.key = key  # type: ignore[attr-defined]
    yield messages
    messages.drop_topic(key)
    messages.close()


def message(sender: int, index: int) -> NewMessage:
    return NewMessage(base64.b64encode(f"{sender}/{index}".encode()).decode(), {"s": str(sender), "i": str(index)})


def test_concurrent_appends_get_the_offsets_their_messages_were_stored_at(log: kafka_log.KafkaMessageLog) -> None:
    key: str = log.key  # type: ignore[attr-defined]
    senders, each = 20, 30
    jobs = [gevent.spawn(log.append, key, [message(s, i) for i in range(each)]) for s in range(senders)]
    gevent.joinall(jobs, timeout=30, raise_error=True)
    answered = {s: job.value for s, job in enumerate(jobs)}
    offsets = sorted(m.offset for stored in answered.values() for m in stored)
    assert offsets == list(range(senders * each))  # every message once, no gap
    stored = {m.offset: m for m in log.read(key, 0, senders * each, 10**8)}
    for s, answer in answered.items():
        assert [m.offset for m in answer] == sorted(m.offset for m in answer)  # in the request's order
        for i, m in enumerate(answer):
            assert (stored[m.offset].data, stored[m.offset].attributes) == (
                message(s, i).data,
                message(s, i).attributes,
            )
            assert stored[m.offset].publish_ns == m.publish_ns


def test_an_append_needs_no_pool_thread_while_it_waits_for_the_broker(log: kafka_log.KafkaMessageLog) -> None:
    """Reads stuck on a broker call hold pool threads; a publish must not queue behind them."""
    key: str = log.key  # type: ignore[attr-defined]
    gates = [monkey.get_original("threading", "Lock")() for _ in range(log._pool.maxsize)]
    for gate in gates:
        gate.acquire()
    busy = [log._pool.spawn(gate.acquire) for gate in gates]  # each pool thread waits on its gate
    try:
        probe = log._pool.spawn(lambda: None)
        gevent.sleep(0.3)
        assert not probe.ready()  # the pool is saturated
        with gevent.Timeout(10):
            stored = log.append(key, [message(0, i) for i in range(5)])
        assert [m.offset for m in stored] == list(range(5))
    finally:
        for gate in gates:
            gate.release()
        gevent.joinall(busy, timeout=10)


def test_a_stalled_broker_answers_503_after_the_timeout_and_publishing_resumes(
    log: kafka_log.KafkaMessageLog,
) -> None:
    key: str = log.key  # type: ignore[attr-defined]
    log.append(key, [message(0, 0)])
    with kafka_stopped():
        started = time.monotonic()
        with pytest.raises(BackendUnavailable):  # told 503 Backend Error (ams_app/errors_http.py)
            log.append(key, [message(1, 0)])
        assert time.monotonic() - started < log.timeout + 10
    with gevent.Timeout(30):
        while True:  # the stalled message may still be delivered once the broker runs again
            try:
                stored = log.append(key, [message(2, 0)])
                break
            except BackendUnavailable:
                gevent.sleep(0.5)
    assert stored[0].offset >= 1
