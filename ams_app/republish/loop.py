"""The I/O loop: pull a batch, publish it grouped per target topic, acknowledge it only when every
message of it is republished. At least once: a crash anywhere loses nothing and duplicates at most
the batch in flight. And the entry point, ``ams republish CONFIG``."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from types import FrameType
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from ams_app.republish.config import Config, ConfigError, load_config
from ams_app.republish.routing import Message, Routed, route
from ams_app.republish.transport import HttpTransport, Reply, Transient, Transport, is_transient

log = logging.getLogger("ams.republish")

#: Backoff of transient failures: the first pause, and its ceiling (seconds).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
#: A pull that answers empty sooner than this is followed by a pause (a server without long polls).
IDLE_PAUSE = 1.0
#: Exit codes of :func:`main`.
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


class Fatal(Exception):
    """Going on cannot help (no access, a missing subscription, a refused unroutable copy):
    stop without acknowledging, so nothing is lost."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT while waiting: stop now (a BaseException, so no handler swallows it)."""


class Stopper:
    """Signal handling: a stop request ends the run after the batch in flight; while the loop
    waits (long poll, backoff pause) it ends the wait at once."""

    def __init__(self) -> None:
        self.requested = False
        self.waiting = False
        self.signal = 0

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.handle)

    def handle(self, signum: int, frame: FrameType | None) -> None:
        # no logging here: the signal may have come in the middle of a write to the same stream
        self.requested = True
        self.signal = signum
        if self.waiting:
            self.waiting = False
            raise Interrupted

    def wait(self, call: Callable[[], Any]) -> Any:
        """Run ``call`` (a long poll, a pause), giving it up on a stop request."""
        if self.requested:
            raise Interrupted
        self.waiting = True
        try:
            return call()
        finally:
            self.waiting = False


@dataclass
class Counters:
    republished: int = 0
    unroutable: int = 0
    batches: int = 0
    late_acks: int = 0

    def summary(self) -> str:
        return (
            f"{self.republished} republished, {self.unroutable} unroutable, {self.batches} batches, "
            f"{self.late_acks} acknowledgements too late"
        )


@dataclass
class _Outgoing:
    """A message on its way to a topic: its index in the batch keeps the order."""

    index: int
    message: Message
    reason: str = ""


class Republisher:
    """The loop: pull, route, publish per target topic, acknowledge."""

    def __init__(
        self,
        config: Config,
        transport: Transport,
        stopper: Stopper | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.rules = config.rules
        self.http = transport
        self.stopper = stopper or Stopper()
        self.sleep = sleep
        self.counters = Counters()
        self.sub_path = f"/projects/{config.project}/subscriptions/{config.subscription}"
        self.source_name = f"projects/{config.project}/subscriptions/{config.subscription}"

    # --- the run ---------------------------------------------------------------------------
    def run(self) -> int:
        """Until a stop request (0) or a fatal error (1)."""
        code = EXIT_OK
        in_flight = False
        try:
            self.preflight()
            log.info("republishing %s: %s", self.source_name, self._describe())
            while not self.stopper.requested:
                batch = self.pull()
                in_flight = bool(batch)
                if batch:
                    self.handle(batch)
                in_flight = False
        except Interrupted:
            if in_flight:
                log.warning("stopping with a batch unacknowledged: it will be delivered again")
        except Fatal as exc:
            log.error("%s", exc)
            code = EXIT_FAILED
        if self.stopper.requested:
            log.info("signal %d: stopped", self.stopper.signal)
        log.info("totals: %s", self.counters.summary())
        return code

    def _describe(self) -> str:
        if self.rules.attribute is not None:
            by = f"attribute {self.rules.attribute!r}"
        else:
            by = f"JSON field {'.'.join(self.rules.json_field or ())!r}"
        return (
            f"by {by} to projects/{self.config.target_project}/topics/{self.rules.template}, "
            f"unroutable to {self.config.unroutable_topic!r}, {self.config.max_messages} messages a batch"
        )

    def preflight(self) -> None:
        """The subscription exists (its topic must never be a target) and so does the
        unroutable topic (created if create_topics)."""
        reply = self.call("GET", self.sub_path)
        if reply.ok:
            topic = str(reply.body.get("topic", "")) if isinstance(reply.body, dict) else ""
            project, _, name = topic.removeprefix("/projects/").partition("/topics/")
            if project == self.config.target_project and name:
                self.rules = replace(self.rules, loop_topic=name)
                if name == self.config.unroutable_topic:
                    raise Fatal(f"target.unroutable_topic {name!r} is the topic of the source subscription")
        elif reply.status != 403:  # a consumer may lack the right to look: the pull will tell
            raise Fatal(f"subscription {self.source_name}: {reply.message}")
        unroutable = self._topic_path(self.config.unroutable_topic)
        reply = self.call("GET", unroutable)
        if reply.status == 404 and self.config.create_topics:
            refusal = self.create_topic(self.config.unroutable_topic)
            if refusal is not None:
                raise Fatal(f"cannot create the unroutable topic {self.config.unroutable_topic!r}: {refusal.message}")
        elif reply.status == 404:
            raise Fatal(f"the unroutable topic {self.config.unroutable_topic!r} does not exist")
        elif not reply.ok and reply.status != 403:
            raise Fatal(f"the unroutable topic {self.config.unroutable_topic!r}: {reply.message}")

    # --- one batch -------------------------------------------------------------------------
    def pull(self) -> list[Message]:
        body = {"maxMessages": str(self.config.max_messages), "returnImmediately": "false"}
        started = time.monotonic()
        reply = self.call("POST", self.sub_path + ":pull", body, interruptible=True)
        if not reply.ok:
            raise Fatal(f"pull from {self.source_name}: {reply.message}")
        received = reply.body.get("receivedMessages") if isinstance(reply.body, dict) else None
        if not isinstance(received, list):
            raise Fatal(f"pull from {self.source_name}: unexpected answer {str(reply.body)[:200]}")
        if not received and time.monotonic() - started < IDLE_PAUSE:
            self.pause(IDLE_PAUSE)
        return [_message(item) for item in received]

    def handle(self, batch: list[Message]) -> None:
        """Republish every message of ``batch``, then acknowledge it."""
        groups: dict[str, list[_Outgoing]] = {}
        refused: list[_Outgoing] = []
        for index, message in enumerate(batch):
            decision = route(message, self.rules)
            if isinstance(decision, Routed):
                groups.setdefault(decision.topic, []).append(_Outgoing(index, message))
            else:
                refused.append(_Outgoing(index, message, decision.reason))
        counts: dict[str, int] = {}
        for topic, group in groups.items():
            failed = self.deliver(topic, group)
            refused += failed
            if len(group) > len(failed):
                counts[topic] = len(group) - len(failed)
                self.counters.republished += counts[topic]
        if refused:
            self.deliver_unroutable(sorted(refused, key=lambda o: o.index))
            self.counters.unroutable += len(refused)
        self.acknowledge(batch)
        self.counters.batches += 1
        listed = ", ".join(f"{topic} {n}" for topic, n in counts.items()) or "none routed"
        log.info("batch %d: %d messages: %s; unroutable %d", self.counters.batches, len(batch), listed, len(refused))

    def deliver(self, topic: str, group: list[_Outgoing]) -> list[_Outgoing]:
        """Publish ``group`` (in order) to ``topic``; the messages it refused, with the reason.
        A refusal of several messages is split in halves until it names the messages at fault."""
        reply = self.publish(topic, group)
        if reply.status == 404 and self.config.create_topics:
            created = self.create_topic(topic)
            if created is not None:
                return _refusals(group, f"cannot create topic {topic!r}: {created.message}")
            reply = self.publish(topic, group)
        if reply.ok:
            return []
        if reply.status == 404:
            return _refusals(group, f"topic {topic!r} does not exist in project {self.config.target_project!r}")
        if reply.status in (400, 413) and len(group) > 1:
            half = len(group) // 2
            return self.deliver(topic, group[:half]) + self.deliver(topic, group[half:])
        return _refusals(group, f"topic {topic!r} refused it: {reply.message}")

    def deliver_unroutable(self, refused: list[_Outgoing]) -> None:
        topic = self.config.unroutable_topic
        reply = self.publish(topic, refused, with_reason=True)
        if reply.status in (400, 413) and len(refused) > 1:
            half = len(refused) // 2
            self.deliver_unroutable(refused[:half])
            self.deliver_unroutable(refused[half:])
        elif not reply.ok:
            first = refused[0].message.message_id
            raise Fatal(f"the unroutable topic {topic!r} refused message {first}: {reply.message}")

    def publish(self, topic: str, group: list[_Outgoing], *, with_reason: bool = False) -> Reply:
        messages = [self._copy(out, with_reason) for out in group]
        reply = self.call("POST", self._topic_path(topic) + ":publish", {"messages": messages})
        if reply.status == 401:
            raise Fatal(f"publish to {topic!r}: {reply.message}")
        return reply

    def _copy(self, out: _Outgoing, with_reason: bool) -> dict[str, Any]:
        attributes = dict(out.message.attributes)
        if self.config.source_attribute:
            attributes[self.config.source_attribute] = f"{self.source_name}/messages/{out.message.message_id}"
        if with_reason:
            attributes["republish_error"] = out.reason
        copy: dict[str, Any] = {"data": out.message.data}
        if attributes:
            copy["attributes"] = attributes
        return copy

    def create_topic(self, topic: str) -> Reply | None:
        """Create ``topic`` (one that exists already is fine): None, or the refusal."""
        reply = self.call("PUT", self._topic_path(topic))
        if reply.ok or reply.status == 409:
            if reply.ok:
                log.info("created topic %r", topic)
            return None
        if reply.status == 401:
            raise Fatal(f"create topic {topic!r}: {reply.message}")
        return reply

    def acknowledge(self, batch: list[Message]) -> None:
        reply = self.call("POST", self.sub_path + ":acknowledge", {"ackIds": [m.ack_id for m in batch]})
        if reply.ok:
            return
        if reply.status in (401, 403, 404):
            raise Fatal(f"acknowledge on {self.source_name}: {reply.message}")
        if reply.status == 408:
            self.counters.late_acks += 1
        # 408 (the ack deadline passed), 409 (no ack pending), 400 (wrong ack): the server let the
        # lease go, so the batch comes again; the copies are duplicates, nothing is lost.
        log.warning("acknowledge: %s; the batch of %d will be delivered again", reply.message, len(batch))

    # --- requests --------------------------------------------------------------------------
    def call(self, method: str, path: str, body: Any | None = None, *, interruptible: bool = False) -> Reply:
        """One request, again and again while the failure is transient (capped exponential
        backoff); a stop request ends the pauses (and, if ``interruptible``, the request)."""
        pause = BACKOFF_FIRST
        while True:
            try:
                if interruptible:
                    reply: Reply = self.stopper.wait(lambda: self.http(method, path, body))
                else:
                    reply = self.http(method, path, body)
                if not is_transient(reply.status):
                    return reply
                problem = f"{method} {path}: {reply.message}"
            except Transient as exc:
                problem = str(exc)
            log.warning("%s; again in %.1fs", problem, pause)
            self.pause(pause)
            pause = min(pause * 2, BACKOFF_MAX)

    def pause(self, seconds: float) -> None:
        """Sleep, unless a stop is requested (before or during the pause)."""
        self.stopper.wait(lambda: self.sleep(seconds))

    def _topic_path(self, topic: str) -> str:
        return f"/projects/{self.config.target_project}/topics/{topic}"


def _message(item: Any) -> Message:
    """A pulled item ``{ackId, message: {messageId, data, attributes}}``."""
    try:
        inner = item["message"]
        attributes = inner.get("attributes") or {}
        return Message(str(item["ackId"]), str(inner["messageId"]), str(inner.get("data", "")), dict(attributes))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise Fatal(f"pull: unexpected message {str(item)[:200]}") from exc


def _refusals(group: list[_Outgoing], reason: str) -> list[_Outgoing]:
    return [_Outgoing(out.index, out.message, reason) for out in group]


def main(config_path: str) -> int:
    """``ams republish CONFIG``: 0 after SIGTERM/SIGINT, 1 on a fatal error, 2 on a bad config."""
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"ams republish: bad configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    stopper = Stopper()
    stopper.install()
    transport = HttpTransport(config)
    republisher = Republisher(config, transport, stopper)
    page = serve_metrics(republisher.counters, config.metrics_address) if config.metrics_address else None
    try:
        return republisher.run()
    finally:
        transport.close()
        if page is not None:
            page.shutdown()


class _CountersCollector(Collector):
    def __init__(self, counters: Counters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        c = self.counters
        messages = CounterMetricFamily(
            "ams_republish_messages",
            "Messages the republisher handled: republished to their site topic, or unroutable.",
            labels=["outcome"],
        )
        messages.add_metric(["republished"], c.republished)
        messages.add_metric(["unroutable"], c.unroutable)
        yield messages
        yield CounterMetricFamily("ams_republish_batches", "Batches pulled, republished and acknowledged.", c.batches)
        yield CounterMetricFamily(
            "ams_republish_late_acks",
            "Batches acknowledged after their ack deadline (delivered again: at-least-once).",
            c.late_acks,
        )


def serve_metrics(counters: Counters, address: tuple[str, int]) -> Any:
    """The republisher's Prometheus page at ``http://host:port/metrics``, in a thread."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=True)
    registry.register(_CountersCollector(counters))
    server, _thread = start_http_server(address[1], addr=address[0], registry=registry)
    log.info("metrics on http://%s:%d/metrics", *address)
    return server
