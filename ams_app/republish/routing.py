"""The routing decision: a pure function of one message and the rules (docs/republisher.md)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ams_app.service.validation import valid_name

#: The placeholder of the target topic template.
PLACEHOLDER = "{value}"


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
