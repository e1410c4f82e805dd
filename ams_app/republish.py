"""``ams republish CONFIG``: consume one subscription, republish each message to a topic chosen
from a routing value (an attribute, or a field of the JSON payload).

A client of the AMS HTTP API, nothing more. Three parts, kept apart:

- the configuration: YAML in, a checked :class:`Config` out (:func:`load_config`);
- the routing decision, a pure function of one message (:func:`route`);
- the I/O loop (:class:`Republisher`): pull a batch, publish it grouped per target topic,
  acknowledge it only when every message of it is republished. At least once: a crash
  anywhere loses nothing and duplicates at most the batch in flight.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, Protocol

import requests
import yaml

from ams_app.service.validation import valid_name

log = logging.getLogger("ams.republish")

#: The placeholder of the target topic template.
PLACEHOLDER = "{value}"
#: Backoff of transient failures: the first pause, and its ceiling (seconds).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
#: A pull that answers empty sooner than this is followed by a pause (a server without long polls).
IDLE_PAUSE = 1.0
#: Exit codes of :func:`main`.
EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or wrong; the message says where."""


# ------------------------------------------------------------------------ routing (pure) ----
@dataclass(frozen=True)
class Rules:
    """How a message finds its target topic."""

    #: The routing value is this attribute...
    attribute: str | None = None
    #: ...or the field at this path of the JSON object in the data (exactly one of the two).
    json_field: tuple[str, ...] | None = None
    #: Target topic name, ``{value}`` replaced by the routing value.
    template: str = PLACEHOLDER
    #: A target topic that would feed the source subscription again (set once that is known).
    loop_topic: str | None = None


@dataclass(frozen=True)
class Message:
    """A pulled message: what the republisher needs of it."""

    ack_id: str
    message_id: str
    data: str  # base64, as received
    attributes: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Routed:
    topic: str


@dataclass(frozen=True)
class Unroutable:
    reason: str


Decision = Routed | Unroutable


def valid_topic(name: str) -> bool:
    """The API's name rule, on the whole name (its regex would let a trailing newline through)."""
    return valid_name(name) and "\n" not in name


def route(message: Message, rules: Rules) -> Decision:
    """The target topic of ``message``, or why it has none."""
    value = _routing_value(message, rules)
    if isinstance(value, Unroutable):
        return value
    topic = rules.template.replace(PLACEHOLDER, value)
    if not valid_topic(topic):
        return Unroutable(f"{value!r} makes an invalid topic name {topic!r}")
    if topic == rules.loop_topic:
        return Unroutable(f"{value!r} routes back to the source topic {topic!r}")
    return Routed(topic)


def _routing_value(message: Message, rules: Rules) -> str | Unroutable:
    if rules.attribute is not None:
        value = message.attributes.get(rules.attribute)
        if value is None:
            return Unroutable(f"no attribute {rules.attribute!r}")
        return value or Unroutable(f"attribute {rules.attribute!r} is empty")
    assert rules.json_field is not None
    return _json_value(message.data, rules.json_field)


def _json_value(data: str, path: tuple[str, ...]) -> str | Unroutable:
    dotted = ".".join(path)
    try:
        document = json.loads(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError, RecursionError):  # ValueError: also bad UTF-8; too deep
        return Unroutable("the data is not JSON")
    if not isinstance(document, dict):
        return Unroutable("the data is not a JSON object")
    value: Any = document
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return Unroutable(f"no field {dotted!r} in the data")
        value = value[key]
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return Unroutable(f"field {dotted!r} is not a string or an integer")
    return value or Unroutable(f"field {dotted!r} is empty")


# ---------------------------------------------------------------------------- config ----
@dataclass(frozen=True)
class Config:
    url: str
    token: str
    verify: bool | str
    timeout: float
    project: str
    subscription: str
    rules: Rules
    target_project: str
    unroutable_topic: str
    create_topics: bool
    source_attribute: str
    max_messages: int


_KEYS = {
    "ams": {"url", "token", "token_file", "verify", "timeout_seconds"},
    "source": {"project", "subscription"},
    "route": {"attribute", "json_field"},
    "target": {"project", "topic", "unroutable_topic", "create_topics", "source_attribute"},
    "batch": {"max_messages"},
}
_REQUIRED_SECTIONS = ("ams", "source", "route", "target")


def load_config(path: str) -> Config:
    """Read and check the YAML file at ``path``."""
    try:
        with open(path, encoding="utf-8") as stream:
            raw = yaml.safe_load(stream)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with the sections {', '.join(_KEYS)}")
    return parse_config(raw)


def parse_config(raw: Mapping[str, Any]) -> Config:
    """A checked :class:`Config` from the parsed YAML document."""
    unknown = sorted(set(map(str, raw)) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}")
    sections = {name: _section(raw, name) for name in _KEYS}
    ams, source, target = sections["ams"], sections["source"], sections["target"]
    project = _name(source, "source", "project")
    return Config(
        url=_url(ams),
        token=_token(ams),
        verify=_verify(ams),
        timeout=_positive(ams, "ams", "timeout_seconds", 30.0),
        project=project,
        subscription=_name(source, "source", "subscription"),
        rules=_rules(sections["route"], target),
        target_project=_name(target, "target", "project", project),
        unroutable_topic=_name(target, "target", "unroutable_topic"),
        create_topics=_bool(target, "target", "create_topics", False),
        source_attribute=_str(target, "target", "source_attribute", "republish_source"),
        max_messages=int(_positive(sections["batch"], "batch", "max_messages", 100, integer=True)),
    )


def _section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    section = raw.get(name)
    if section is None:
        if name in _REQUIRED_SECTIONS:
            raise ConfigError(f"the section {name!r} is missing")
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{name}: expected a mapping")
    unknown = sorted(set(map(str, section)) - _KEYS[name])
    if unknown:
        raise ConfigError(f"{name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS[name]))})")
    return section


def _str(section: Mapping[str, Any], where: str, key: str, default: str | None = None) -> str:
    value = section.get(key, default)
    if value is None:
        raise ConfigError(f"{where}.{key} is required")
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string")
    return value


def _name(section: Mapping[str, Any], where: str, key: str, default: str | None = None) -> str:
    value = _str(section, where, key, default)
    if not valid_topic(value):
        raise ConfigError(f"{where}.{key}: {value!r} is not a valid name (letters, digits, '_' and '-')")
    return value


def _bool(section: Mapping[str, Any], where: str, key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false")
    return value


def _positive(section: Mapping[str, Any], where: str, key: str, default: float, *, integer: bool = False) -> float:
    value = section.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ConfigError(f"{where}.{key} must be a positive {'integer' if integer else 'number'}")
    return float(value)


def _url(ams: Mapping[str, Any]) -> str:
    url = _str(ams, "ams", "url").rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise ConfigError(f"ams.url: {url!r} must start with https:// (or http://)")
    if url.endswith("/v1"):
        raise ConfigError(f"ams.url: give the base URL without /v1 (e.g. {url[:-3]!r})")
    return url


def _token(ams: Mapping[str, Any]) -> str:
    if ("token" in ams) == ("token_file" in ams):
        raise ConfigError("ams: set exactly one of token and token_file")
    if "token" in ams:
        token = _str(ams, "ams", "token").strip()
    else:
        path = _str(ams, "ams", "token_file")
        try:
            with open(path, encoding="utf-8") as stream:
                token = stream.read().strip()
        except OSError as exc:
            raise ConfigError(f"ams.token_file: cannot read {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ConfigError("ams: the token is empty")
    return token


def _verify(ams: Mapping[str, Any]) -> bool | str:
    value = ams.get("verify", True)
    if isinstance(value, bool):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError("ams.verify must be true, false or the path of a CA bundle")
    if not os.path.exists(value):
        raise ConfigError(f"ams.verify: no CA bundle at {value}")
    return value


def _rules(route_section: Mapping[str, Any], target: Mapping[str, Any]) -> Rules:
    if ("attribute" in route_section) == ("json_field" in route_section):
        raise ConfigError("route: set exactly one of attribute and json_field")
    template = _str(target, "target", "topic", PLACEHOLDER)
    if (
        PLACEHOLDER not in template
        or "{" in template.replace(PLACEHOLDER, "")
        or "}" in template.replace(PLACEHOLDER, "")
    ):
        raise ConfigError(f"target.topic: {template!r} must hold {PLACEHOLDER} and no other braces")
    if not valid_topic(template.replace(PLACEHOLDER, "x")):
        raise ConfigError(
            f"target.topic: {template!r} cannot make a valid topic name (letters, digits, '_' and '-', "
            "as the API's names)"
        )
    if "attribute" in route_section:
        attribute = _str(route_section, "route", "attribute")
        if not attribute:
            raise ConfigError("route.attribute must not be empty")
        return Rules(attribute=attribute, template=template)
    path = tuple(_str(route_section, "route", "json_field").split("."))
    if not all(path):
        raise ConfigError("route.json_field must be a dotted path like meta.site")
    return Rules(json_field=path, template=template)


# ------------------------------------------------------------------------------- HTTP ----
class Transient(Exception):
    """The request may not have reached the service, or it could not answer: try again."""


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the decoded JSON, or None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def message(self) -> str:
        """The error message of the AMS envelope (or the status alone)."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        text = error.get("message") if isinstance(error, dict) else None
        return f"{self.status} {text}" if isinstance(text, str) else str(self.status)


class Transport(Protocol):
    """One HTTP request to the API: ``path`` is below ``/v1``."""

    def __call__(self, method: str, path: str, body: Any | None) -> Reply: ...


def is_transient(status: int) -> bool:
    return status >= 500 or status == 429


class HttpTransport:
    """The API over ``requests`` with one Session (kept-alive connections)."""

    def __init__(self, config: Config) -> None:
        self.base = config.url + "/v1"
        self.verify = config.verify
        self.timeout = config.timeout
        self.session = requests.Session()
        self.session.headers["x-api-key"] = config.token

    def __call__(self, method: str, path: str, body: Any | None) -> Reply:
        try:
            response = self.session.request(
                method,
                self.base + path,
                json=body,
                timeout=self.timeout,
                verify=self.verify,  # per request: a session's verify loses to REQUESTS_CA_BUNDLE
            )
        except requests.RequestException as exc:
            raise Transient(f"{method} {path}: {exc}") from exc
        try:
            decoded = response.json() if response.content else None
        except ValueError as exc:
            if not is_transient(response.status_code):  # e.g. a proxy's page: not the API
                raise Transient(f"{method} {path}: {response.status_code} answer is not JSON") from exc
            decoded = None
        return Reply(response.status_code, decoded)

    def close(self) -> None:
        self.session.close()


# ------------------------------------------------------------------------------ loop ----
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


# ------------------------------------------------------------------------ entry point ----
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
    try:
        return Republisher(config, transport, stopper).run()
    finally:
        transport.close()
