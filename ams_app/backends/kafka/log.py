"""MessageLog on Apache Kafka.

An AMS topic is the Kafka topic ``{project uuid}.{topic}``, one partition (order is per
topic, as in the original), replicated ``kafka_replication_factor`` times, with the retention
of ``log_retention_seconds``. Message ids are Kafka offsets, taken from the broker's delivery
reports (exact, never estimated). The payload is the original's JSON
``{"attributes", "data", "publishTime"}``.

librdkafka calls that block run on a small pool of OS threads: the gevent hub keeps serving while
a broker answers slowly or not at all. Publishing uses one idempotent producer with ``acks=all``
and answers only after the broker acknowledged every message of the request. Producing only
queues, so a request's greenlet produces itself and then waits, holding no pool thread, for the
delivery reports, which a poll thread of the producer's own hands back as the broker answers
(docs/benchmarks.md, "Where a publish spends its time").
Reads go through a *reader* per topic: a consumer kept assigned to the topic's partition (never a
member of a consumer group: offsets live in the metadata store) and the messages it has decoded
ahead of the last read. Consecutive pulls of a subscription ask for consecutive ranges, so most
are answered from what the reader holds or what librdkafka has already prefetched behind it,
without a seek or a broker round trip of their own (docs/benchmarks.md). Readers are few
(``_READERS``, least recently used retired first) and let go of their consumer after
``_READER_IDLE_SECONDS`` unused; consumers come from a pool, so none is created per request.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import gevent
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from gevent import monkey
from gevent.event import Event
from gevent.lock import Semaphore
from gevent.threadpool import ThreadPool

from ams_app import jsoncodec
from ams_app.backends.errors import BackendUnavailable, MessageTooLarge
from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.backends.notify import AppendNotifier
from ams_app.timeutil import now_ns, parse_zulu_nanos, zulu_nanos

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
#: a lock of OS threads (monkey-patching makes threading.Lock a greenlet's lock)
_os_lock = monkey.get_original("threading", "Lock")
#: a str as a JSON string, as json.dumps writes it (ASCII, escaped)
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii
#: Topics with a reader at once; the least recently used gives its consumer back first.
_READERS = 16
#: A reader unused this long gives its consumer back (an assigned consumer keeps asking the broker).
_READER_IDLE_SECONDS = 5.0
#: Reads in a row behind what a topic's reader holds that are read apart; the next moves the reader.
_BEHIND_IN_A_ROW = 2
#: How long the first offset of a topic, as the broker last said, stands for it in known_bounds
#: (retention moves it; a lease below it is found out by the read and asked again)
_LOW_SECONDS = 1.0
#: What a reader keeps decoded ahead of the reads, at most: what librdkafka had already fetched
#: when a read was answered, taken without waiting.
_AHEAD_MESSAGES = 1000
_AHEAD_BYTES = 2 * 1024 * 1024


class _Reader:
    """A topic's consumer kept assigned at ``position``, and the records it returned before that
    position, decoded, from ``messages[0]`` on: every record of the partition in that range is
    there, so a read that starts inside it is answered from it. Used by one read at a time
    (``lock``, a greenlet lock); its fields change only while it is held."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lock = Semaphore()
        self.consumer: Consumer | None = None
        self.position = -1  # the offset the consumer reads next; -1: not assigned
        self.messages: list[StoredMessage] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.used = time.monotonic()
        self.behind_in_a_row = 0  # reads behind what it holds since the last one from it
        self.low = 0  # the partition's first offset, as the broker said at low_at
        self.low_at = -_LOW_SECONDS

    def behind(self, offset: int) -> bool:
        """Whether ``offset`` comes before what the reader holds or will read next."""
        return offset < (self.offsets[0] if self.offsets else self.position)

    def covers(self, offset: int) -> bool:
        return bool(self.offsets) and self.offsets[0] <= offset < self.position

    def take(self, start: int, end: int, max_bytes: int) -> tuple[list[StoredMessage], bool]:
        """The held messages from ``start`` before ``end`` within ``max_bytes`` (the first one
        whatever its size), and whether the read is complete without asking the broker."""
        if not self.covers(start):
            return [], False
        first = bisect.bisect_left(self.offsets, start)
        out: list[StoredMessage] = []
        size = 0
        for index in range(first, len(self.offsets)):
            if self.offsets[index] >= end:
                return out, True
            size += self.sizes[index]
            if out and size > max_bytes:
                return out, True
            out.append(self.messages[index])
        return out, self.position >= end

    def keep(self, message: StoredMessage, size: int) -> None:
        self.messages.append(message)
        self.offsets.append(message.offset)
        self.sizes.append(size)
        self.position = message.offset + 1

    def trim(self, needed_from: int) -> None:
        """Forget the oldest messages beyond twice the read-ahead limits (what is behind the
        latest read may still be wanted by a read that leased it before), never one at or after
        ``needed_from``."""
        excess = len(self.offsets) - 2 * _AHEAD_MESSAGES
        total = sum(self.sizes)
        drop = 0
        while (
            drop < len(self.offsets) and self.offsets[drop] < needed_from and (excess > 0 or total > 2 * _AHEAD_BYTES)
        ):
            total -= self.sizes[drop]
            excess -= 1
            drop += 1
        if drop:
            del self.messages[:drop], self.offsets[:drop], self.sizes[:drop]

    def clear(self, position: int) -> None:
        self.messages, self.offsets, self.sizes = [], [], []
        self.position = position


class _Delivery:
    """The delivery reports of one publish. librdkafka runs ``reporter``'s callbacks on the
    producer's poll thread; the request's greenlet waits on ``done``, set through an async
    watcher of its hub (gevent's one wake-up that another OS thread may send), started before the
    first message is produced so that no report can come before it listens."""

    def __init__(self, count: int) -> None:
        self._results: list[tuple[KafkaError | None, int] | None] = [None] * count
        self._left = count
        self.done = Event()
        self._lock = _os_lock()  # the poll thread reports while the greenlet may close
        self._watcher: Any = gevent.get_hub().loop.async_()
        self._watcher.start(self.done.set)
        if not count:
            self.done.set()

    def reporter(self, index: int) -> Callable[[KafkaError | None, Any], None]:
        def report(err: KafkaError | None, msg: Any) -> None:
            with self._lock:
                self._results[index] = (err, msg.offset() if err is None else -1)
                self._left -= 1
                if self._left == 0 and self._watcher is not None:
                    self._watcher.send()

        return report

    def reports(self) -> list[tuple[KafkaError | None, int]]:
        """(error, offset) of each message, in order; only once ``done`` is set."""
        return [r for r in self._results if r is not None]

    def close(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
        watcher.stop()
        watcher.close()


def _backend_error(exc: BaseException) -> BackendUnavailable:
    log.warning("kafka: %s", exc)
    return BackendUnavailable(f"Kafka: {exc}")


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
        security: Mapping[str, str] | None = None,
    ) -> None:
        self.timeout = timeout_seconds
        self.replication_factor = replication_factor
        self.retention_ms = retention_seconds * 1000 if retention_seconds > 0 else -1
        # base64 grows data by 4/3; attributes and JSON framing need room too
        self.max_record_bytes = max_message_bytes * 2 + 64 * 1024
        # security: the client's TLS and SASL options (connect.client_security)
        base: dict[str, str | int | float | bool] = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": "ams",
            **(security or {}),
        }
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
        producing = base | {
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": self.max_record_bytes,
            "delivery.timeout.ms": int(timeout_seconds * 1000),
        }
        # Two producers (docs/benchmarks.md "Publishing against the raw producer"): a publish that
        # finds no other one under way goes out at once (linger.ms 0: a lone message is answered
        # as soon as the broker acknowledges it, where waiting for company cost it more than a
        # millisecond); publishes that come while one is under way wait up to a millisecond to
        # share the broker's requests, which is what amortises them under load.
        self._eager = Producer(producing | {"linger.ms": 0})
        self._producer = Producer(producing | {"linger.ms": 1})
        self._eager_busy = 0  # publishes under way on the eager producer
        self._admin = AdminClient(base)
        self._pool = ThreadPool(threads)
        # the health check's own thread: a ping queued behind busy pool threads (reads that wait
        # out a leader election, for instance) would time out and call a working broker down
        self._ping_pool = ThreadPool(1)
        # the producer's own poll thread, which runs the delivery reports as they come
        self._closing = False
        self._delivery_pool = ThreadPool(2)
        self._delivery_pool.spawn(self._poll_deliveries, self._eager)
        self._delivery_pool.spawn(self._poll_deliveries, self._producer)
        self._consumers: list[Consumer] = []
        # taken only inside the pool's OS threads: a real lock, not the greenlet lock that
        # monkey-patching puts in threading (one of those left a pool thread waiting for ever)
        self._consumers_lock = _os_lock()
        self._discarded: set[int] = set()  # ids of consumers to close when given back
        self._notifier = AppendNotifier(_RECHECK_SECONDS)
        self._readers: dict[str, _Reader] = {}  # least recently used first
        self._sweeper = gevent.spawn(self._sweep_readers)

    # ----------------------------------------------------------------- plumbing -------------
    def _run(self, fn: Callable[..., R], *args: Any) -> R:
        """Run a blocking call on the pool; Kafka errors become 503 Backend Error."""
        try:
            return self._pool.apply(fn, args)  # type: ignore[no-any-return]
        except (KafkaException, BufferError, TimeoutError, RuntimeError) as exc:
            raise _backend_error(exc) from exc

    def _borrow(self) -> Consumer:
        with self._consumers_lock:
            consumer = self._consumers.pop() if self._consumers else None
        return consumer if consumer is not None else Consumer(self._consumer_config)

    def _give_back(self, consumer: Consumer) -> None:
        if id(consumer) in self._discarded:
            self._discarded.discard(id(consumer))
            with contextlib.suppress(Exception):
                consumer.close()
        else:
            with self._consumers_lock:
                self._consumers.append(consumer)

    @contextmanager
    def _consumer(self) -> Iterator[Consumer]:
        consumer = self._borrow()
        try:
            yield consumer
        finally:
            self._give_back(consumer)

    def _discard(self, consumer: Consumer) -> None:
        """Close ``consumer`` instead of pooling it: after a broker restarts a pooled consumer can
        keep a stale view (its broker handles destroyed, a new topic unknown to it for seconds)."""
        self._discarded.add(id(consumer))

    def ping(self) -> None:
        try:
            self._ping_pool.apply(lambda: self._admin.list_topics(timeout=min(self.timeout, 5)))
        except (KafkaException, TimeoutError, RuntimeError) as exc:
            raise _backend_error(exc) from exc

    def close(self) -> None:
        self._notifier.wake_all()
        self._sweeper.kill()
        readers, self._readers = list(self._readers.values()), {}

        def shut() -> None:
            self._eager.flush(min(self.timeout, 10))
            self._producer.flush(min(self.timeout, 10))
            for reader in readers:
                self._release(reader)
            with self._consumers_lock:
                for consumer in self._consumers:
                    consumer.close()
                self._consumers.clear()

        try:
            self._pool.apply(shut)
        finally:
            self._closing = True  # the poll thread ends within its poll's timeout
            self._pool.kill()
            self._ping_pool.kill()
            self._delivery_pool.kill()

    # ----------------------------------------------------------------- topics ---------------
    def create_topic(self, key: str, retention_seconds: int = 0) -> None:
        retention_ms = retention_seconds * 1000 if retention_seconds > 0 else self.retention_ms

        def create() -> None:
            config = {"retention.ms": str(retention_ms), "max.message.bytes": str(self.max_record_bytes)}
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
                    self._set_retention(key, retention_ms)  # made again: this topic's retention
            self._wait_for_leader(key)

        self._run(create)

    def _set_retention(self, key: str, retention_ms: int) -> None:
        entry = ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, key, incremental_configs=[entry])
        for future in self._admin.incremental_alter_configs([resource]).values():
            future.result(self.timeout)

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

        self._forget_reader(key)

        def purge() -> None:
            low, high = self._watermarks(key)
            if high > low:
                for future in self._admin.delete_records([TopicPartition(key, 0, high)]).values():
                    future.result(self.timeout)

        self._run(purge)

    def drop_topic(self, key: str) -> None:
        self._forget_reader(key)

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
        """Hand the messages to the producer from this greenlet (librdkafka only queues them) and
        wait, holding no pool thread, for the broker's delivery reports, which the producer's poll
        thread collects as they come (``_Delivery``)."""
        ns = now_ns()
        stamp = zulu_nanos(ns)
        delivery = _Delivery(len(messages))
        eager = not self._eager_busy  # greenlets of one thread: no race between test and count
        producer = self._eager if eager else self._producer
        self._eager_busy += eager
        try:
            deadline = time.monotonic() + self.timeout
            for index, message in enumerate(messages):
                value = payload(message.attributes, message.data, stamp, message.ordering_key, message.base64_checked)
                self._produce(producer, key, value, ns // _NS_PER_MS, delivery.reporter(index), deadline)
            if not delivery.done.wait(max(deadline - time.monotonic(), 0) + 5):
                raise TimeoutError("the broker did not acknowledge the messages in time")
        except (KafkaException, BufferError, TimeoutError, RuntimeError) as exc:
            raise _backend_error(exc) from exc
        finally:
            self._eager_busy -= eager
            delivery.close()
        failed = [err for err, _ in delivery.reports() if err is not None]
        if failed:
            if any(err.code() == KafkaError.MSG_SIZE_TOO_LARGE for err in failed):
                raise MessageTooLarge("the broker refuses a message this large")
            raise _backend_error(KafkaException(failed[0]))
        self._notifier.notify(key)
        return [
            StoredMessage(offset, ns, m.data, m.attributes, m.ordering_key)
            for (_, offset), m in zip(delivery.reports(), messages, strict=True)
        ]

    def _produce(
        self, producer: Producer, key: str, value: bytes, ms: int, report: Callable[..., None], deadline: float
    ) -> None:
        while True:
            try:
                producer.produce(key, value, partition=0, timestamp=ms, on_delivery=report)
                return
            except BufferError:  # the local queue is full: let the poll thread drain deliveries
                if time.monotonic() > deadline:
                    raise
                gevent.sleep(0.005)

    def _poll_deliveries(self, producer: Producer) -> None:
        """A producer's poll thread: runs the delivery reports as the broker acknowledges."""
        while not self._closing:
            try:
                producer.poll(0.2)
            except Exception:  # a callback that failed: keep serving the others
                log.exception("kafka: delivery report")

    def read(self, key: str, start: int, end: int, max_bytes: int) -> list[StoredMessage]:
        reader = self._readers.get(key)
        if reader is not None and reader.behind(start):
            # a redelivery or another subscription further back: read it apart, and leave the
            # reader where it is, unless reads keep coming from back there (a replay)
            reader.behind_in_a_row += 1
            if reader.behind_in_a_row <= _BEHIND_IN_A_ROW:
                return self._run(self._read_once, key, start, end, max_bytes)
        reader = self._reader(key)
        reader.lock.acquire()  # one read per topic at a time here: the next finds what it read ahead
        job = None
        try:
            reader.used = time.monotonic()
            reader.behind_in_a_row = 0  # a read from behind gets here only to move the reader back
            out, done = reader.take(start, end, max_bytes)
            if done:
                return out
            job = self._pool.spawn(self._fill, reader, start, end)
            try:
                job.get()
            except (KafkaException, BufferError, TimeoutError, RuntimeError) as exc:
                raise _backend_error(exc) from exc
            return reader.take(start, end, max_bytes)[0]
        finally:
            if job is None or job.ready():
                reader.lock.release()
            else:  # this greenlet was interrupted: the thread still uses the reader, which stays locked
                job.rawlink(lambda _: reader.lock.release())

    def peek(self, key: str, offset: int) -> StoredMessage | None:
        low, high = self.bounds(key)
        if max(offset, low) >= high:
            return None
        found = self._run(self._read_once, key, max(offset, low), high, 1)  # a pooled consumer: no reader moves
        return found[0] if found else None

    def _read_once(self, key: str, start: int, end: int, max_bytes: int) -> list[StoredMessage]:
        """In a pool thread: a read behind what the topic's reader holds (a redelivery, a replay),
        with a pooled consumer assigned for it alone, so that the reader keeps its place."""
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
                        error = _triaged(record)
                        if error is _END:
                            return out
                        if error is not None:
                            passing = error
                            continue
                        offset = record.offset()
                        if offset is None or offset >= end:
                            return out
                        value = record.value() or b"{}"
                        size += len(value)
                        if out and size > max_bytes:
                            return out
                        out.append(_decoded(record, offset, value))
                        if offset + 1 >= end:
                            return out
                if not out and passing is not None:  # nothing came, and the broker said why
                    self._discard(consumer)
                    raise KafkaException(passing)
                return out
            finally:
                consumer.unassign()

    def _fill(self, reader: _Reader, start: int, end: int) -> None:
        """In a pool thread: have ``reader`` hold the records from ``start`` up to ``end`` (or to
        the partition's end, or what came within the read's deadline), and after them what
        librdkafka has already fetched, up to the limits. A failed read gives the consumer up."""
        try:
            self._fetch(reader, max(start, reader.position) if reader.covers(start) else start, end, start)
            reader.trim(start)
        except BaseException:
            self._release(reader, failed=True)
            raise

    def _fetch(self, reader: _Reader, start: int, end: int, needed_from: int) -> None:
        consumer = reader.consumer
        if consumer is None or reader.position != start:
            if consumer is None:
                consumer = reader.consumer = self._borrow()
            consumer.assign([TopicPartition(reader.key, 0, start)])
            if reader.position != start:
                reader.clear(start)
        passing: KafkaError | None = None  # the last error librdkafka recovers from itself
        end_seen: int | None = None  # the partition's end, as the last end-of-partition event said
        deadline = time.monotonic() + min(self.timeout, 10)
        while reader.position < end and time.monotonic() < deadline:
            wanted = min(max(end - reader.position, 1), 500)
            before = reader.position
            eof, error = self._keep(reader, consumer.consume(num_messages=wanted, timeout=0.2))
            passing = error or passing
            end_seen = eof if eof is not None or reader.position != before else end_seen
            if end_seen is not None and end_seen >= end:  # what is left before ``end`` is no record
                break
        if reader.position == start and passing is not None:  # nothing came, and the broker said why
            raise KafkaException(passing)
        if reader.position >= end:  # and what is already here, without waiting
            reader.trim(needed_from)
            room = _AHEAD_MESSAGES - (len(reader.offsets) - bisect.bisect_left(reader.offsets, needed_from))
            if room > 0:
                before = reader.position
                eof, _ = self._keep(reader, consumer.consume(num_messages=room, timeout=0))
                end_seen = eof if eof is not None or reader.position != before else end_seen
        caught_up = end_seen is not None and end_seen >= reader.position
        if not caught_up:
            with contextlib.suppress(KafkaException):
                _, high = consumer.get_watermark_offsets(TopicPartition(reader.key, 0), cached=True)
                caught_up = 0 <= high <= reader.position
        if caught_up:
            # An assigned consumer at the partition's end asks the broker every fetch.wait.max.ms:
            # it goes back to the pool, and the next read assigns one at the position (as a read
            # did each time before readers). The messages held stay. (Pausing it instead stalled
            # the read after the resume for about a second, now and then.)
            reader.consumer = None
            self._unassign(consumer)

    def _keep(self, reader: _Reader, batch: list[Any]) -> tuple[int | None, KafkaError | None]:
        """Decode ``batch`` into ``reader``: the partition's end when an end-of-partition event
        came after its last record (an older one is news no more), and the last error librdkafka
        recovers from itself (a broker disconnected, a leader changing; it may have been queued
        while the consumer sat in the pool)."""
        passing: KafkaError | None = None
        end_seen: int | None = None
        for record in batch:
            error = _triaged(record)
            if error is _END:
                end_seen = record.offset()
                continue
            if error is not None:
                passing = error
                continue
            offset = record.offset()
            if offset is None or offset < reader.position:
                continue
            value = record.value() or b"{}"
            reader.keep(_decoded(record, offset, value), len(value))
            end_seen = None
        return end_seen, passing

    # --- readers ---------------------------------------------------------------------------------
    def _reader(self, key: str) -> _Reader:
        reader = self._readers.pop(key, None)
        if reader is None:
            reader = _Reader(key)
            if len(self._readers) >= _READERS:
                self._retire(next(iter(self._readers.values())))
        self._readers[key] = reader  # now the most recently used
        return reader

    def _retire(self, reader: _Reader) -> None:
        """Give ``reader``'s consumer back once no read uses it (the read in progress keeps it)."""
        if self._readers.get(reader.key) is reader:
            del self._readers[reader.key]
        gevent.spawn(self._retire_when_free, reader)

    def _retire_when_free(self, reader: _Reader) -> None:
        with reader.lock:
            if reader.consumer is not None:
                with contextlib.suppress(BackendUnavailable):
                    self._run(self._release, reader)

    def _release(self, reader: _Reader, failed: bool = False) -> None:
        """In a pool thread: unassign ``reader``'s consumer and give it back (closed when it failed
        a read: its view of the cluster may be stale after a broker restart)."""
        consumer, reader.consumer = reader.consumer, None
        reader.clear(-1)
        if consumer is not None:
            self._unassign(consumer, failed)

    def _unassign(self, consumer: Consumer, failed: bool = False) -> None:
        try:
            consumer.unassign()
        except Exception:
            failed = True
        if failed:
            self._discard(consumer)
        self._give_back(consumer)

    def _forget_reader(self, key: str) -> None:
        reader = self._readers.get(key)
        if reader is not None:
            self._retire(reader)

    def _sweep_readers(self) -> None:
        while True:
            gevent.sleep(_READER_IDLE_SECONDS / 5)
            idle = time.monotonic() - _READER_IDLE_SECONDS
            for reader in [r for r in self._readers.values() if r.used < idle and not r.lock.locked()]:
                self._retire(reader)

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
        asked = time.monotonic()
        low, high = self._run(self._watermarks, key)
        reader = self._readers.get(key)
        if reader is not None:
            reader.low, reader.low_at = low, asked
        return low, high

    def known_bounds(self, key: str) -> tuple[int, int] | None:
        """The first offset as ``bounds`` said within the last _LOW_SECONDS, and the offset the
        topic's reader has read up to: no broker round trip (docs/benchmarks.md)."""
        reader = self._readers.get(key)
        if reader is None or reader.position < 0 or time.monotonic() - reader.low_at > _LOW_SECONDS:
            return None
        return reader.low, reader.position

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

    def wake(self, key: str) -> None:
        self._notifier.notify(key)


#: What _triaged answers for an end-of-partition event.
_END = KafkaError(KafkaError._PARTITION_EOF)


def _triaged(record: Any) -> KafkaError | None:
    """What a consumed item is to a read: a message (None), the partition's end (``_END``; the
    item's offset is the end), or an error the read goes on after (``_passing``, returned). Any
    other error is raised (KafkaException)."""
    error: KafkaError | None = record.error()
    if error is None:
        return None
    if error.code() == KafkaError._PARTITION_EOF:
        return _END
    if _passing(record, error):
        return error
    raise KafkaException(error)


def _passing(record: Any, error: KafkaError) -> bool:
    """An error a read goes on after: news about the client rather than the partition (a broker
    disconnected, all brokers down for a moment; it may have been queued while the consumer sat
    in the pool), or a partition's leader changing. librdkafka reconnects and refetches on its
    own; only if nothing is read before the read's deadline is it reported (503)."""
    return record.topic() is None or error.code() in _NO_LEADER_YET or error.retriable()


def payload(attributes: dict[str, str], data: str, stamp: str, ordering_key: str = "", base64: bool = False) -> bytes:
    """A message's record value: the bytes of ``json.dumps({"attributes", "data", "publishTime"})``
    (the original's payload), made without json.dumps's per-call work (about a tenth of the request
    thread's samples in the profile of docs/benchmarks.md): the data goes through the JSON
    encoder's C function alone. A message with an ordering key has ``"orderingKey"`` last (only
    then: the original's readers see the payload they know). ``base64``: the data is known to be
    base64 text, which JSON takes between quotes as it is (3 of the 4 µs of a record of 1 KB)."""
    attrs = json.dumps(attributes) if attributes else "{}"
    key = f', "orderingKey": {_json_string(ordering_key)}' if ordering_key else ""
    text = f'"{data}"' if base64 else _json_string(data)
    return f'{{"attributes": {attrs}, "data": {text}, "publishTime": "{stamp}"{key}}}'.encode()


def _decoded(record: Any, offset: int, value: bytes) -> StoredMessage:
    payload = jsoncodec.loads(value)
    return StoredMessage(
        offset,
        _publish_ns(payload, record),
        payload["data"],
        payload.get("attributes") or {},
        payload.get("orderingKey") or "",
    )


def _publish_ns(payload: dict[str, Any], record: Any) -> int:
    try:
        return parse_zulu_nanos(str(payload["publishTime"]))
    except (KeyError, ValueError):  # written by someone else: the broker's timestamp
        return int(record.timestamp()[1]) * _NS_PER_MS
