"""Typed requests: the input of each operation that takes a request body, parsed from the body's
JSON at the HTTP edge (ams_app/api/) into values the service takes.

A parser checks shape only: JSON types, required fields, names that must be well formed, and
references ``projects/{project}/{kind}/{name}`` to the URL's project. It looks nothing up, so
it can run before or after the route's lookups. Each raises the error the route has always
answered a bad body with (docs/compatibility.md, openapi.yaml). Where a route looks a resource up
before it reads the body (publish, pull, acknowledge, ACLs, attaching a schema, updating a user
or a schema), its handler calls the parser after that lookup: the handler spells the route's
order of checks, and the service method takes what was found and what was parsed.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from ams_app import auth
from ams_app.backends.log import NewMessage
from ams_app.errors import AmsError
from ams_app.service import filters, push_config, schema_check
from ams_app.service.push_config import PushRequest
from ams_app.service.validation import as_object, opt_bool, opt_int, opt_str, opt_str_list, valid_name
from ams_app.settings import Settings
from ams_app.timeutil import parse_iso8601_ns

_BAD_MESSAGE = AmsError.invalid_argument("Message")
_BAD_SUB = AmsError.invalid_argument("Subscription")
_BAD_DEADLINE = AmsError.invalid_argument("ackDeadlineSeconds(needs value between 0 and 600)")
_BAD_PULL = AmsError.invalid_argument("Pull Parameters")
_BAD_OFFSET = AmsError.invalid_argument("Offset")
_BAD_USER = AmsError.invalid_argument("User")
_BAD_PROJECT = AmsError.invalid_argument("Project")
_BAD_SCHEMA = AmsError.invalid_argument("Schema")
_USER_TEXT = ("email", "first_name", "last_name", "organization", "description")
#: base64's alphabet (RFC 4648, section 4), as bytes.translate deletes it
_BASE64_ALPHABET = (string.ascii_letters + string.digits + "+/").encode()


def base64_size(data: str) -> int | None:
    """How many bytes the base64 text ``data`` decodes to; None when it is not base64: the verdict
    of ``binascii.a2b_base64(data, strict_mode=True)``, which the service has always given (RFC
    4648's alphabet, the last group completed by its padding; more padding after a whole group,
    as in "YWJj=", passes as it always did, since messages stored so would otherwise stop a
    republisher that copies them). Nothing is decoded: a translate deletes the alphabet, what is
    left must be padding at the end, and the size follows from the lengths, in a third of the
    decoder's time for a message of 1 KB (docs/benchmarks.md, "Checking base64 without decoding
    it"). A unit test holds it to the decoder's verdict."""
    if not data.isascii():
        return None
    raw = data.encode()
    rest = raw.translate(None, _BASE64_ALPHABET)
    if rest and (rest.strip(b"=") or not raw.endswith(rest)):
        return None  # another character, or padding before the end
    chars = len(raw) - len(rest)
    tail = chars % 4  # characters of the last, incomplete group
    if tail == 0:
        return None if rest and not chars else chars // 4 * 3  # padding alone: refused
    if tail == 1 or len(rest) != 4 - tail:  # a lone character, or not the padding it needs
        return None
    return chars // 4 * 3 + tail - 1


#: An ack id: the message's offset, and on a subscription with per-message delivery the delivery's
#: attempt after a dot (docs/delivery.md).
_ACK_ID = re.compile(r"^projects/([^/]+)/subscriptions/([^/:]+):(\d+)(?:\.(\d+))?$")
_BAD_ACK = AmsError.invalid_data("Invalid ack id")


def _bad_body() -> AmsError:
    return AmsError.invalid_request_body()


#: Pub/Sub's limit on an ordering key.
MAX_ORDERING_KEY_BYTES = 1024


def _object_or_empty(raw: Any, error: AmsError) -> dict[str, Any]:
    """An object; an empty body counts as ``{}``."""
    return as_object({} if raw is None else raw, error)


# --- references ---------------------------------------------------------------------------------
def schema_ref(project_name: str, ref: Any) -> str:
    """``projects/{project}/schemas/{name}`` -> name (the project must be the URL's)."""
    parts = ref.split("/") if isinstance(ref, str) else []
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "schemas" or parts[1] != project_name or not parts[3]:
        raise AmsError.invalid_data("wrong schema name declaration")
    return parts[3]


def resource_ref(ref: str, kind: str) -> tuple[str, str] | None:
    """``projects/{project}/{kind}/{name}`` -> (project, name), both well formed; None otherwise."""
    parts = ref.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != kind:
        return None
    return (parts[1], parts[3]) if valid_name(parts[1]) and valid_name(parts[3]) else None


def topic_ref(project_name: str, ref: str) -> str:
    """``projects/{project}/topics/{name}`` -> name (the project must be the URL's)."""
    parts = ref.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != "topics" or parts[1] != project_name:
        raise AmsError.invalid_name("Topic")
    return parts[3]


# --- topics -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NewTopic:
    schema: str  # the name of the schema its messages must satisfy; "" for none
    retention_s: int = 0  # messageRetentionDuration; 0: the log's
    schema_encoding: str = ""  # schemaEncoding: "JSON" or "BINARY"; "" for the schema type's own


#: Pub/Sub's bounds of a topic's messageRetentionDuration: 10 minutes to 31 days.
RETENTION_BOUNDS_S = (600, 31 * 24 * 3600)


def new_topic(raw: Any, project_name: str) -> NewTopic:
    body = _object_or_empty(raw, _bad_body())
    if not all(isinstance(v, str) for v in body.values()):
        raise _bad_body()
    ref = body.get("schema") or ""
    encoding = _schema_encoding(body, ref)
    retention_s = 0
    if body.get("messageRetentionDuration"):
        retention_ms = duration_ms(body["messageRetentionDuration"], "messageRetentionDuration")
        low, high = RETENTION_BOUNDS_S
        if retention_ms % 1000 or not low <= retention_ms // 1000 <= high:
            raise AmsError.invalid_data(
                f"messageRetentionDuration must be whole seconds between {low}s and {high}s (10 minutes to 31 days)"
            )
        retention_s = retention_ms // 1000
    return NewTopic(schema_ref(project_name, ref) if ref else "", retention_s, encoding)


def _schema_encoding(body: dict[str, Any], ref: str) -> str:
    """The optional schemaEncoding beside a schema (which it needs)."""
    encoding = body.get("schemaEncoding") or ""
    if not encoding:
        return ""
    if not ref:
        raise AmsError.invalid_data("schemaEncoding needs a schema")
    return schema_check.check_encoding(encoding)


def messages(raw: Any, limits: Settings) -> list[NewMessage]:
    """A publish body: its messages, each with data (base64, checked) or attributes, in limits."""
    body = as_object(raw, _BAD_MESSAGE)
    items = body.get("messages")
    if not isinstance(items, list):
        raise _BAD_MESSAGE
    if len(items) > limits.max_publish_messages:
        raise AmsError.invalid_data(f"Too many messages in one request (the limit is {limits.max_publish_messages})")
    return [_message(index, item, limits) for index, item in enumerate(items)]


def _message(index: int, item: Any, limits: Settings) -> NewMessage:
    item = as_object(item, _BAD_MESSAGE)
    data = item.get("data", "")
    attributes = item.get("attributes") or {}
    ordering_key = item.get("orderingKey") or ""
    if not isinstance(data, str) or not isinstance(attributes, dict) or not isinstance(ordering_key, str):
        raise _BAD_MESSAGE
    if len(ordering_key.encode()) > MAX_ORDERING_KEY_BYTES:
        raise AmsError.invalid_data(f"Message {index} has an orderingKey longer than {MAX_ORDERING_KEY_BYTES} bytes")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
        raise _BAD_MESSAGE
    if len(attributes) > limits.max_attributes:
        raise AmsError.invalid_data(f"Message {index} has too many attributes (the limit is {limits.max_attributes})")
    decoded = base64_size(data)
    if decoded is None:
        raise AmsError.invalid_data(f"Message {index} is not in valid base64 encoding")
    if not decoded and not attributes:
        raise AmsError.invalid_data(f"Message {index} has neither data nor attributes")
    size = decoded + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())
    if size > limits.max_message_bytes:
        raise AmsError.too_large()
    return NewMessage(data, dict(attributes), ordering_key, base64_checked=True)


def acl_names(raw: Any, what: str) -> list[str]:
    """A modifyAcl body: the user names, each once, in the order given."""
    bad = AmsError.invalid_argument(f"{what} ACL")
    body = as_object(raw, bad)
    if "authorized_users" not in body:
        raise bad
    return list(dict.fromkeys(opt_str_list(body, "authorized_users", bad) or []))


@dataclass(frozen=True)
class AttachedSchema:
    schema: str  # the schema's name; "" (detach) when the body names none
    encoding: str = ""  # schemaEncoding: "JSON" or "BINARY"; "" for the schema type's own


def attached_schema(raw: Any, project_name: str) -> AttachedSchema:
    """An attachSchema body: the schema's name, and how messages are encoded against it."""
    body = _object_or_empty(raw, _bad_body())
    ref = opt_str(body, "schema", _bad_body()) or ""
    encoding = _schema_encoding({"schemaEncoding": opt_str(body, "schemaEncoding", _bad_body())}, ref)
    return AttachedSchema(schema_ref(project_name, ref) if ref else "", encoding)


# --- subscriptions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RetryPolicy:
    """A subscription's retryPolicy (not push's): the backoff before a message given back is
    delivered again, in milliseconds."""

    min_backoff_ms: int
    max_backoff_ms: int


@dataclass(frozen=True)
class DeadLetterPolicy:
    project: str  # the dead-letter topic's project, by name
    topic: str
    max_delivery_attempts: int


@dataclass(frozen=True)
class NewSubscription:
    topic: str
    ack_deadline: int | None  # None: the configured default
    push: PushRequest | None  # None: pull mode
    retry: RetryPolicy | None = None
    dead_letter: DeadLetterPolicy | None = None
    filter: str = ""  # checked by ams_app/service/filters.py
    ordered: bool = False
    exactly_once: bool = False
    retain_acked: bool = False


def _deadline(body: dict[str, Any]) -> int | None:
    """ackDeadlineSeconds in 0..600; None when absent or 0 (the configured default)."""
    value = opt_int(body, "ackDeadlineSeconds", _BAD_DEADLINE)
    if not value:
        return None
    if not 0 <= value <= 600:
        raise _BAD_DEADLINE
    return value


_MAX_BACKOFF_MS = 600_000


def duration_ms(value: Any, field: str) -> int:
    """A protobuf Duration in JSON ("10s", "1.5s", "600s") as milliseconds."""
    bad = AmsError.invalid_data(f'{field} must be a duration in seconds such as "10s"')
    if not isinstance(value, str) or not value.endswith("s"):
        raise bad
    number = value[:-1]
    whole, _, fraction = number.partition(".")
    if not whole.isdigit() or not (fraction == "" or (fraction.isdigit() and len(fraction) <= 9)):
        raise bad
    return int(whole) * 1000 + int((fraction + "000")[:3])


def _retry_policy(raw: Any) -> RetryPolicy | None:
    if raw is None:
        return None
    bad = AmsError.invalid_data("retryPolicy must be an object with minimumBackoff and maximumBackoff")
    body = as_object(raw, bad)
    if set(body) - {"minimumBackoff", "maximumBackoff"}:
        raise bad
    low = duration_ms(body.get("minimumBackoff", "10s"), "retryPolicy.minimumBackoff")
    high = duration_ms(body.get("maximumBackoff", "600s"), "retryPolicy.maximumBackoff")
    if not 0 <= low <= high <= _MAX_BACKOFF_MS or high == 0:
        raise AmsError.invalid_data(
            "retryPolicy needs 0s <= minimumBackoff <= maximumBackoff <= 600s, and maximumBackoff above 0s"
        )
    return RetryPolicy(low, high)


def _dead_letter_policy(raw: Any) -> DeadLetterPolicy | None:
    if raw is None:
        return None
    bad = AmsError.invalid_data("deadLetterPolicy must be an object with deadLetterTopic and maxDeliveryAttempts")
    body = as_object(raw, bad)
    if set(body) - {"deadLetterTopic", "maxDeliveryAttempts"}:
        raise bad
    found = resource_ref(opt_str(body, "deadLetterTopic", bad) or "", "topics")
    if found is None:
        raise AmsError.invalid_data("deadLetterPolicy.deadLetterTopic must be projects/{project}/topics/{topic}")
    attempts = opt_int(body, "maxDeliveryAttempts", bad) or 5
    if not 5 <= attempts <= 100:
        raise AmsError.invalid_data("deadLetterPolicy.maxDeliveryAttempts must be between 5 and 100")
    return DeadLetterPolicy(*found, attempts)


def new_subscription(raw: Any, project_name: str) -> NewSubscription:
    body = as_object(raw, _BAD_SUB)
    topic = topic_ref(project_name, opt_str(body, "topic", _BAD_SUB) or "")
    deadline = _deadline(body)
    push = push_config.read(body.get("pushConfig"))
    retain_acked = bool(
        opt_bool(body, "retainAckedMessages", AmsError.invalid_data("retainAckedMessages must be a boolean"))
    )
    if body.get("messageRetentionDuration") is not None:
        raise AmsError.invalid_data(
            "messageRetentionDuration is a topic's on this server (its log keeps the messages): set it on the topic"
        )
    filter_text = opt_str(body, "filter", AmsError.invalid_data("filter must be a string")) or ""
    if filter_text:
        try:
            filters.parse(filter_text)
        except filters.FilterError as exc:
            raise AmsError.invalid_data(str(exc)) from exc
    ordered = bool(
        opt_bool(body, "enableMessageOrdering", AmsError.invalid_data("enableMessageOrdering must be a boolean"))
    )
    exactly_once = bool(
        opt_bool(
            body, "enableExactlyOnceDelivery", AmsError.invalid_data("enableExactlyOnceDelivery must be a boolean")
        )
    )
    new = NewSubscription(
        topic,
        deadline,
        push,
        _retry_policy(body.get("retryPolicy")),
        _dead_letter_policy(body.get("deadLetterPolicy")),
        filter_text,
        ordered,
        exactly_once,
        retain_acked,
    )
    if push is not None and push.type and per_message(new):
        raise AmsError.invalid_data(PUSH_PER_MESSAGE)
    return new


#: Push delivers from the subscription's offset, in order, without the per-message rules.
PUSH_PER_MESSAGE = (
    "retryPolicy, deadLetterPolicy, filter, enableMessageOrdering and enableExactlyOnceDelivery"
    " are for pull subscriptions only"
)


def per_message(new: NewSubscription) -> bool:
    return bool(new.retry or new.dead_letter or new.filter or new.ordered or new.exactly_once)


@dataclass(frozen=True)
class DeadlineChange:
    seconds: int | None  # None: the configured default (a subscription's deadline given as 0)
    ack_ids: list[AckRef] | None  # None: the subscription's deadline; else these messages' leases


def ack_deadline(raw: Any, project_name: str, sub_name: str) -> DeadlineChange:
    """A modifyAckDeadline body. With ``ackIds``: those messages' leases end ``seconds`` from now
    (0: given back at once, a nack). Without: the subscription's deadline (0: the default)."""
    body = as_object(raw, _BAD_DEADLINE)
    if "ackDeadlineSeconds" not in body:
        raise _BAD_DEADLINE
    seconds = _deadline(body)
    if body.get("ackIds") is None:
        return DeadlineChange(seconds, None)
    return DeadlineChange(seconds or 0, ack_refs(body, project_name, sub_name))


def push_change(raw: Any) -> PushRequest | None:
    """A modifyPushConfig body: the new push configuration; None turns push off."""
    body = as_object(raw, _BAD_SUB)
    return push_config.read(body.get("pushConfig"))


@dataclass(frozen=True)
class PullRequest:
    max_messages: int  # at least 1 (the service caps it)
    return_immediately: bool
    #: Seconds the leases of this pull last (None: the subscription's ack deadline); a gRPC
    #: StreamingPull's stream_ack_deadline_seconds (ams_app/pubsub/streaming.py).
    ack_deadline: int | None = None
    #: Longest wait for a first message (None: pull_wait_seconds); a stream pulls in short waits
    #: so that it notices its end.
    wait_seconds: float | None = None


def pull_request(raw: Any) -> PullRequest:
    body = _object_or_empty(raw, _BAD_PULL)
    max_messages = opt_int(body, "maxMessages", _BAD_PULL) or 1
    return PullRequest(max(max_messages, 1), bool(opt_bool(body, "returnImmediately", _BAD_PULL)))


#: An ack id as the service takes it: the message's offset, and the delivery's attempt when the
#: id names one (docs/delivery.md).
AckRef = tuple[int, int | None]


def ack_refs(body: dict[str, Any], project_name: str, sub_name: str) -> list[AckRef]:
    """The ``ackIds`` of a body (ack ids of this subscription only)."""
    ids = body.get("ackIds")
    if not isinstance(ids, list) or not ids:
        raise _BAD_ACK
    refs: list[AckRef] = []
    for ack_id in ids:
        match = _ACK_ID.match(ack_id) if isinstance(ack_id, str) else None
        if not match or match.group(1) != project_name or match.group(2) != sub_name:
            raise _BAD_ACK
        attempt = match.group(4)
        refs.append((int(match.group(3)), int(attempt) if attempt is not None else None))
    return refs


def acknowledgement(raw: Any, project_name: str, sub_name: str) -> list[AckRef]:
    """An acknowledge body: the messages its ackIds name."""
    return ack_refs(as_object(raw, AmsError.invalid_data("Invalid ack parameter")), project_name, sub_name)


def offset(raw: Any) -> int:
    """A modifyOffset body: the offset to move to."""
    body = as_object(raw, _BAD_OFFSET)
    found = opt_int(body, "offset", _BAD_OFFSET)
    if found is None:
        raise _BAD_OFFSET
    return found


# --- snapshots and seek ------------------------------------------------------------------------
def snapshot_source(raw: Any, project_name: str) -> str:
    """A snapshot's create body: the name of the subscription it is taken of (same project)."""
    bad = AmsError.invalid_data("A snapshot needs its subscription as projects/{project}/subscriptions/{name}")
    body = as_object(raw, bad)
    found = resource_ref(opt_str(body, "subscription", bad) or "", "subscriptions")
    if found is None:
        raise bad
    if found[0] != project_name:
        raise AmsError.invalid_data("A snapshot is taken of a subscription of its own project")
    return found[1]


@dataclass(frozen=True)
class SeekTarget:
    snapshot: str  # a snapshot's name; "" when seeking to a time
    time_ns: int


def seek_target(raw: Any, project_name: str) -> SeekTarget:
    """A seek body: exactly one of ``snapshot`` (projects/{project}/snapshots/{name}) and ``time``
    (RFC 3339)."""
    bad = AmsError.invalid_data("A seek needs either snapshot (projects/{project}/snapshots/{name}) or time")
    body = as_object(raw, bad)
    snapshot, when = opt_str(body, "snapshot", bad), opt_str(body, "time", bad)
    if (snapshot is None) == (when is None):
        raise bad
    if snapshot is not None:
        found = resource_ref(snapshot, "snapshots")
        if found is None:
            raise bad
        if found[0] != project_name:
            raise AmsError.invalid_data("A subscription seeks to a snapshot of its own project")
        return SeekTarget(found[1], 0)
    try:
        ns = parse_iso8601_ns(when or "")
    except ValueError as exc:
        raise AmsError.invalid_data("time must be an RFC 3339 timestamp such as 2026-11-27T10:00:00Z") from exc
    return SeekTarget("", min(max(ns, -(2**63)), 2**63 - 1))


# --- users, projects and members ----------------------------------------------------------------
def checked_roles(roles: list[str]) -> list[str]:
    """Roles that exist, each once."""
    for role in roles:
        if role not in auth.VALID_ROLES:
            raise AmsError.invalid_data(f"invalid role: {role}")
    return list(dict.fromkeys(roles))


@dataclass(frozen=True)
class MembershipEntry:
    project: str  # a project's name, "" when the entry names none
    roles: list[str]  # as given: checked once the project is known


def _memberships(raw: Any) -> list[MembershipEntry]:
    if not isinstance(raw, list):
        raise _BAD_USER
    entries: list[MembershipEntry] = []
    for item in raw:
        entry = as_object(item, _BAD_USER)
        project = opt_str(entry, "project", _BAD_USER) or ""
        entries.append(MembershipEntry(project, opt_str_list(entry, "roles", _BAD_USER) or []))
    return entries


def _texts(body: dict[str, Any]) -> dict[str, str]:
    return {key: opt_str(body, key, _BAD_USER) or "" for key in _USER_TEXT}


@dataclass(frozen=True)
class NewUser:
    texts: dict[str, str]  # email, first_name, last_name, organization, description
    service_roles: list[str]
    projects: list[MembershipEntry]


def new_user(raw: Any) -> NewUser:
    body = _object_or_empty(raw, _BAD_USER)
    texts = _texts(body)
    service_roles = checked_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
    return NewUser(texts, service_roles, _memberships(body.get("projects") or []))


@dataclass(frozen=True)
class UserUpdate:
    name: str  # the new name, "" to keep it
    texts: dict[str, str]  # the fields to change (only those given, not empty)
    service_roles: list[str] | None  # None: unchanged
    projects: list[MembershipEntry] | None  # None: unchanged


def user_update(raw: Any) -> UserUpdate:
    body = as_object(raw, _BAD_USER)
    name = opt_str(body, "name", _BAD_USER) or ""
    if name and not valid_name(name):
        raise AmsError.invalid_name("user")
    texts = {key: value for key, value in _texts(body).items() if value}
    service_roles = None
    if body.get("service_roles") is not None:
        service_roles = checked_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
    projects = _memberships(body["projects"]) if body.get("projects") is not None else None
    return UserUpdate(name, texts, service_roles, projects)


@dataclass(frozen=True)
class NewMember:
    email: str
    projects: list[MembershipEntry] | None  # the entry of the URL's project carries the roles


def new_member(raw: Any) -> NewMember:
    body = _object_or_empty(raw, _BAD_USER)
    email = opt_str(body, "email", _BAD_USER) or ""
    return NewMember(email, _memberships(body["projects"]) if body.get("projects") is not None else None)


def member_update(raw: Any) -> list[MembershipEntry] | None:
    """A member's update: the ``projects`` entries (the URL project's one carries the roles)."""
    body = as_object(raw, _BAD_USER)
    return _memberships(body["projects"]) if body.get("projects") is not None else None


def member_roles(raw: Any) -> list[str]:
    """An existing user added to a project: the roles there."""
    body = _object_or_empty(raw, _bad_body())
    return checked_roles(opt_str_list(body, "roles", _bad_body()) or [])


def project_description(raw: Any) -> str:
    """A new project's description."""
    return opt_str(as_object(raw, _BAD_PROJECT), "description", _BAD_PROJECT) or ""


@dataclass(frozen=True)
class ProjectUpdate:
    name: str  # the new name, "" to keep it
    description: str | None  # None or "": unchanged


def project_update(raw: Any) -> ProjectUpdate:
    body = as_object(raw, _bad_body())
    name = opt_str(body, "name", _bad_body()) or ""
    description = opt_str(body, "description", _bad_body())
    if name and not valid_name(name):
        raise AmsError.invalid_name("project")
    return ProjectUpdate(name, description)


# --- registrations ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NewRegistration:
    name: str
    texts: dict[str, str]  # email, first_name, last_name, organization, description


def new_registration(raw: Any) -> NewRegistration:
    body = as_object(raw, _BAD_USER)
    name = opt_str(body, "name", _BAD_USER) or ""
    if not valid_name(name):
        raise AmsError.invalid_name("user")
    return NewRegistration(name, _texts(body))


def decline_comment(raw: Any) -> str:
    body = as_object(raw, _bad_body())
    return opt_str(body, "comment", _bad_body()) or ""


# --- schemas ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NewSchema:
    type: str  # "json", "avro" or "protobuf"
    schema: Any  # the schema document, or a protobuf schema's .proto text (compiled by the service)


def new_schema(raw: Any) -> NewSchema:
    body = as_object(raw, _BAD_SCHEMA)
    if "schema" not in body:
        raise _BAD_SCHEMA
    return NewSchema(schema_check.check_type(body.get("type")), body["schema"])


@dataclass(frozen=True)
class SchemaUpdate:
    name: str | None  # None: each unchanged
    type: str | None
    schema: Any
    replaces_schema: bool  # whether ``schema`` is given (it may be JSON null)


def schema_update(raw: Any, project_name: str) -> SchemaUpdate:
    body = as_object(raw, _BAD_SCHEMA)
    if not body or not {"name", "type", "schema"} & set(body):
        raise _BAD_SCHEMA
    name = schema_ref(project_name, body["name"]) if "name" in body else None
    kind = schema_check.check_type(body["type"]) if "type" in body else None
    return SchemaUpdate(name, kind, body.get("schema"), "schema" in body)
