"""MessageLog on Apache Kafka.

An AMS topic is the Kafka topic ``{project uuid}.{topic}``, one partition (order is per
topic, as in the original), replicated ``kafka_replication_factor`` times, with the retention
of ``log_retention_seconds``. Message ids are Kafka offsets, taken from the broker's delivery
reports (exact, never estimated). The payload is the original's JSON
``{"attributes", "data", "publishTime"}``.

librdkafka calls block, so every one runs on a small pool of OS threads: the gevent hub keeps
serving while a broker answers slowly or not at all. Publishing uses one idempotent producer
with ``acks=all`` and answers only after the broker acknowledged every message of the request.
Reads use a pool of consumers (assigned to a partition and offset per read, never members of a
consumer group: offsets live in the metadata store), so no consumer is created per request.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from gevent import monkey
from gevent.threadpool import ThreadPool

from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.backends.notify import AppendNotifier
from ams_app.errors import AmsError
from ams_app.timeutil import now_ns, parse_iso8601_ns, zulu_nanos

R = TypeVar("R")
log = logging.getLogger("ams")

#: How often waiting pulls look at the broker again (other nodes publish too).
_RECHECK_SECONDS = 0.5
_NS_PER_MS = 1_000_000
#: Answers that mean "no leader for the partition yet", as for a moment after a topic is created on
#: several brokers or after its leader was lost; "no such topic" from a broker that has just
#: started and has not had the cluster's metadata yet; "offset not available" from a leader just
#: elected that has not yet learnt the partition's high watermark; "leader epoch fenced/unknown"
#: while the clients' and the brokers' views of a leader change differ; and a broken connection to
#: a broker that was restarted (the pooled consumers outlive it). Asked again, for up to
#: _LEADER_WAIT_SECONDS, then reported (503), as is any error librdkafka itself flags retriable.
#: Never taken for an empty topic: every AMS topic has its Kafka topic (it is created first), and
#: offsets of 0 for a topic that has messages would end a consumer's drain early and move a
#: subscription's view of the topic's end.
_NO_LEADER_YET = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._TRANSPORT,
        KafkaError._DESTROY_BROKER,
    }
)
_LEADER_WAIT_SECONDS = 25.0
#: time.sleep for the pool's OS threads (monkey-patching makes time.sleep a greenlet's sleep)
_os_sleep = monkey.get_original("time", "sleep")


def _backend_error(exc: BaseException) -> AmsError:
    log.warning("kafka: %s", exc)
    return AmsError(503, "Backend Error", "UNAVAILABLE")


def discover_brokers(zookeeper_hosts: str, znode: str, timeout: float) -> str:
    """Bootstrap servers from ZooKeeper's ``{znode}/brokers/ids/*``, as the original does."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper_hosts, timeout=timeout, read_only=True)
    client.start(timeout=timeout)
    try:
        root = znode.rstrip("/")
        servers = []
        for broker_id in sorted(client.get_children(f"{root}/brokers/ids")):
            data, _ = client.get(f"{root}/brokers/ids/{broker_id}")
            info = json.loads(data)
            endpoints = info.get("endpoints") or []
            if endpoints:
                servers.append(str(endpoints[0]).split("://", 1)[-1])
            elif info.get("host"):
                servers.append(f"{info['host']}:{info['port']}")
        if not servers:
            raise RuntimeError(f"no Kafka brokers registered under {root}/brokers/ids")
        return ",".join(servers)
    finally:
        client.stop()
        client.close()


class KafkaMessageLog:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        replication_factor: int = 1,
        retention_seconds: int = 0,
        max_message_bytes: int = 1024 * 1024,
        timeout_seconds: float = 30.0,
        threads: int = 8,
    ) -> None:
        self.timeout = timeout_seconds
        self.replication_factor = replication_factor
        self.retention_ms = retention_seconds * 1000 if retention_seconds > 0 else -1
        # base64 grows data by 4/3; attributes and JSON framing need room too
        self.max_record_bytes = max_message_bytes * 2 + 64 * 1024
        base: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap_servers, "client.id": "ams"}
        self._consumer_config = base | {
            "group.id": "ams-reader",  # required by librdkafka; never joined: partitions are assigned
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 10,
            # A read wants one pull's worth from an offset, then the consumer goes back to the
            # pool unassigned and what it prefetched is dropped. librdkafka's defaults prefetch up
            # to 64 MB per read (and these were 8 MB per fetch): most of the broker's CPU went to
            # data thrown away (docs/benchmarks.md). A larger record still comes whole: the
            # broker always returns the first batch, whatever its size.
            "fetch.max.bytes": 1024 * 1024,
            "max.partition.fetch.bytes": 1024 * 1024,
            "queued.min.messages": 1000,
            "queued.max.messages.kbytes": 2048,
            "fetch.queue.backoff.ms": 5,  # the default 1000 stalls a read that crossed the limits
        }
        self._producer = Producer(
            base
            | {
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 1,
                "message.max.bytes": self.max_record_bytes,
                "delivery.timeout.ms": int(timeout_seconds * 1000),
            }
        )
        self._admin = AdminClient(base)
        self._pool = ThreadPool(threads)
        self._consumers: list[Consumer] = []
        # taken only inside the pool's OS threads: a real lock, not the greenlet lock that
        # monkey-patching puts in threading (one of those left a pool thread waiting for ever)
        self._consumers_lock = monkey.get_original("threading", "Lock")()
        self._discarded: set[int] = set()  # ids of consumers to close when given back
        self._notifier = AppendNotifier(_RECHECK_SECONDS)

    # ----------------------------------------------------------------- plumbing -------------
    def _run(self, fn: Callable[..., R], *args: Any) -> R:
        """Run a blocking call on the pool; Kafka errors become 503 Backend Error."""
        try:
            return self._pool.apply(fn, args)  # type: ignore[no-any-return]
        except (KafkaException, BufferError, TimeoutError, RuntimeError) as exc:
            raise _backend_error(exc) from exc

    @contextmanager
    def _consumer(self) -> Iterator[Consumer]:
        with self._consumers_lock:
            consumer = self._consumers.pop() if self._consumers else None
        if consumer is None:
            consumer = Consumer(self._consumer_config)
        try:
            yield consumer
        finally:
            if id(consumer) in self._discarded:
                self._discarded.discard(id(consumer))
                with contextlib.suppress(Exception):
                    consumer.close()
            else:
                with self._consumers_lock:
                    self._consumers.append(consumer)

    def _discard(self, consumer: Consumer) -> None:
        """Close ``consumer`` instead of pooling it: after a broker restarts a pooled consumer can
        keep a stale view (its broker handles destroyed, a new topic unknown to it for seconds)."""
        self._discarded.add(id(consumer))

    def ping(self) -> None:
        self._run(lambda: self._admin.list_topics(timeout=min(self.timeout, 5)))

    def close(self) -> None:
        self._notifier.wake_all()

        def shut() -> None:
            self._producer.flush(min(self.timeout, 10))
            with self._consumers_lock:
                for consumer in self._consumers:
                    consumer.close()
                self._consumers.clear()

        try:
            self._pool.apply(shut)
        finally:
            self._pool.kill()

    # ----------------------------------------------------------------- topics ---------------
    def create_topic(self, key: str) -> None:
        def create() -> None:
            config = {"retention.ms": str(self.retention_ms), "max.message.bytes": str(self.max_record_bytes)}
            futures = self._admin.create_topics(
                [NewTopic(key, num_partitions=1, replication_factor=self.replication_factor, config=config)],
                request_timeout=self.timeout,
            )
            for future in futures.values():
                try:
                    future.result(self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
            self._wait_for_leader(key)

        self._run(create)

    def _wait_for_leader(self, key: str) -> None:
        """Return once the cluster's metadata names a leader for the topic's partition: the brokers
        elect one a moment after the topic is created, and a subscription made right away asks the
        leader for the topic's offsets. Gives up quietly after _LEADER_WAIT_SECONDS (the reads
        that follow wait and report on their own)."""
        deadline = time.monotonic() + min(self.timeout, _LEADER_WAIT_SECONDS)
        while True:
            metadata = self._admin.list_topics(topic=key, timeout=min(self.timeout, 5))
            topic = metadata.topics.get(key)
            partition = topic.partitions.get(0) if topic is not None and topic.error is None else None
            if partition is not None and partition.leader >= 0 and partition.error is None:
                return
            if time.monotonic() > deadline:
                log.warning("kafka: no leader for %s yet", key)
                return
            _os_sleep(0.1)

    def delete_topic(self, key: str) -> None:
        """Remove the messages but keep the topic, so its offsets (message ids) continue."""

        def purge() -> None:
            low, high = self._watermarks(key)
            if high > low:
                for future in self._admin.delete_records([TopicPartition(key, 0, high)]).values():
                    future.result(self.timeout)

        self._run(purge)

    def drop_topic(self, key: str) -> None:
        def drop() -> None:
            for future in self._admin.delete_topics([key], operation_timeout=self.timeout).values():
                try:
                    future.result(self.timeout)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise

        self._run(drop)

    # ----------------------------------------------------------------- messages -------------
    def append(self, key: str, messages: list[NewMessage]) -> list[StoredMessage]:
        def produce() -> list[StoredMessage]:
            ns = now_ns()
            stamp = zulu_nanos(ns)
            results: list[tuple[KafkaError | None, int] | None] = [None] * len(messages)

            def delivered(index: int) -> Callable[[KafkaError | None, Any], None]:
                def report(err: KafkaError | None, msg: Any) -> None:
                    results[index] = (err, msg.offset() if err is None else -1)

                return report

            for index, message in enumerate(messages):
                value = json.dumps({"attributes": message.attributes, "data": message.data, "publishTime": stamp})
                while True:
                    try:
                        self._producer.produce(
                            key, value.encode(), partition=0, timestamp=ns // _NS_PER_MS, on_delivery=delivered(index)
                        )
                        break
                    except BufferError:  # the local queue is full: let deliveries drain
                        self._producer.poll(0.05)
            deadline = time.monotonic() + self.timeout + 5
            while any(r is None for r in results):
                if time.monotonic() > deadline:
                    raise TimeoutError("the broker did not acknowledge the messages in time")
                self._producer.poll(0.01)
            failed = [r[0] for r in results if r is not None and r[0] is not None]
            if failed:
                if any(err.code() == KafkaError.MSG_SIZE_TOO_LARGE for err in failed if err is not None):
                    raise _TooLarge()
                raise KafkaException(failed[0])
            return [
                StoredMessage(r[1], ns, m.data, m.attributes)
                for r, m in zip(results, messages, strict=True)
                if r is not None
            ]

        try:
            stored = self._run(produce)
        except _TooLarge as exc:
            raise AmsError.too_large() from exc
        self._notifier.notify(key)
        return stored

    def read(self, key: str, start: int, end: int, max_bytes: int) -> list[StoredMessage]:
        def fetch() -> list[StoredMessage]:
            out: list[StoredMessage] = []
            size = 0
            with self._consumer() as consumer:
                consumer.assign([TopicPartition(key, 0, start)])
                passing: KafkaError | None = None  # the last error librdkafka recovers from itself
                try:
                    deadline = time.monotonic() + min(self.timeout, 10)
                    while time.monotonic() < deadline:
                        batch = consumer.consume(num_messages=min(max(end - start, 1), 500), timeout=0.2)
                        for record in batch:
                            error = record.error()
                            if error is not None:
                                if error.code() == KafkaError._PARTITION_EOF:
                                    return out
                                if _passing(record, error):
                                    passing = error
                                    continue
                                raise KafkaException(error)
                            offset = record.offset()
                            if offset is None or offset >= end:
                                return out
                            value = record.value() or b"{}"
                            size += len(value)
                            if out and size > max_bytes:
                                return out
                            payload = json.loads(value)
                            publish_ns = _publish_ns(payload, record)
                            out.append(
                                StoredMessage(offset, publish_ns, payload["data"], payload.get("attributes") or {})
                            )
                            if offset + 1 >= end:
                                return out
                    if not out and passing is not None:  # nothing came, and the broker said why
                        self._discard(consumer)
                        raise KafkaException(passing)
                    return out
                finally:
                    consumer.unassign()

        return self._run(fetch)

    def _watermarks(self, key: str) -> tuple[int, int]:
        deadline = time.monotonic() + min(self.timeout, _LEADER_WAIT_SECONDS)
        pause = 0.05
        failures = 0
        while True:
            with self._consumer() as consumer:
                try:
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(key, 0), timeout=self.timeout, cached=False
                    )
                    return int(low), int(high)
                except KafkaException as exc:
                    error = exc.args[0]
                    transient = error.code() in _NO_LEADER_YET or error.retriable()
                    if not transient or time.monotonic() >= deadline:
                        self._discard(consumer)
                        raise
                    failures += 1
                    if failures >= 2:  # its view of the cluster may be stale: a new consumer asks afresh
                        self._discard(consumer)
            _os_sleep(pause)  # a leader is being elected: ask again
            pause = min(pause * 2, 1.0)

    def bounds(self, key: str) -> tuple[int, int]:
        return self._run(self._watermarks, key)

    def offset_for_time(self, key: str, publish_ns: int) -> int | None:
        def lookup() -> int | None:
            with self._consumer() as consumer:
                ms = max(publish_ns // _NS_PER_MS, 0)
                (found,) = consumer.offsets_for_times([TopicPartition(key, 0, ms)], timeout=self.timeout)
                if found.error is not None:
                    raise KafkaException(found.error)
                return int(found.offset) if found.offset >= 0 else None

        return self._run(lookup)

    def marker(self, key: str) -> int:
        return self._notifier.marker(key)

    def wait_for_append(self, key: str, marker: int, timeout: float) -> None:
        self._notifier.wait(key, marker, timeout)


def _passing(record: Any, error: KafkaError) -> bool:
    """An error a read goes on after: news about the client rather than the partition (a broker
    disconnected, all brokers down for a moment; it may have been queued while the consumer sat
    in the pool), or a partition's leader changing. librdkafka reconnects and refetches on its
    own; only if nothing is read before the read's deadline is it reported (503)."""
    return record.topic() is None or error.code() in _NO_LEADER_YET or error.retriable()


class _TooLarge(Exception):
    """The broker refused a message as too large."""


def _publish_ns(payload: dict[str, Any], record: Any) -> int:
    try:
        return parse_iso8601_ns(str(payload["publishTime"]))
    except (KeyError, ValueError):  # written by someone else: the broker's timestamp
        return int(record.timestamp()[1]) * _NS_PER_MS
