"""The records the metadata store keeps. Plain dataclasses, serialised as JSON documents."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Project:
    uuid: str
    name: str
    description: str = ""
    created_on: int = 0  # ns since the epoch
    modified_on: int = 0
    created_by: str = ""  # user uuid; empty for the service token


@dataclass
class Membership:
    project_uuid: str
    roles: list[str] = field(default_factory=list)


@dataclass
class User:
    uuid: str
    name: str
    token: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    organization: str = ""
    description: str = ""
    service_roles: list[str] = field(default_factory=list)
    projects: list[Membership] = field(default_factory=list)
    created_on: int = 0
    modified_on: int = 0
    created_by: str = ""

    def membership(self, project_uuid: str) -> Membership | None:
        for m in self.projects:
            if m.project_uuid == project_uuid:
                return m
        return None


@dataclass
class Topic:
    project_uuid: str
    name: str
    created_on: int = 0
    acl: list[str] = field(default_factory=list)  # user uuids
    schema_uuid: str = ""
    retention_s: int = 0  # messageRetentionDuration; 0: the log's (log_retention_seconds)
    #: How messages are encoded against the schema (Pub/Sub's schemaSettings.encoding): "JSON" or
    #: "BINARY"; "" for the schema type's own (JSON documents, Avro binary, Protobuf binary).
    schema_encoding: str = ""


@dataclass
class SchemaRevision:
    """An earlier revision of a schema (docs/compatibility.md, "Schemas")."""

    revision_id: str
    created_ns: int
    type: str
    schema: Any


@dataclass
class Schema:
    uuid: str
    project_uuid: str
    name: str
    type: str  # "json", "avro" or "protobuf"
    schema: Any  # the JSON Schema or Avro schema (a JSON value), or the .proto source (a string)
    revision_id: str = ""  # the current revision: 8 lower-case hex digits, new with every change of content
    revision_created_ns: int = 0
    revisions: list[SchemaRevision] = field(default_factory=list)  # the earlier ones, newest first


@dataclass
class Registration:
    uuid: str
    name: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    organization: str = ""
    description: str = ""
    status: str = "pending"  # pending | accepted | declined
    decline_comment: str = ""
    activation_token: str = ""
    registered_at: int = 0
    modified_by: str = ""  # user uuid
    modified_at: int = 0


@dataclass
class ServiceType:
    """A service that AuthN hands tokens for (docs/authn.md): its public host names."""

    uuid: str
    name: str
    hosts: list[str] = field(default_factory=list)
    auth_types: list[str] = field(default_factory=lambda: ["x509"])
    type: str = "ams"
    created_on: str = ""  # UTC, YYYY-MM-DDTHH:MM:SSZ
    updated_on: str = ""


@dataclass
class Binding:
    """A certificate subject DN on one host of a service type, mapped to an AMS user."""

    uuid: str
    name: str
    service_uuid: str
    host: str
    auth_identifier: str  # the subject DN (RFC 4514 string)
    unique_key: str  # the AMS user's uuid
    auth_type: str = "x509"
    created_on: str = ""  # UTC, YYYY-MM-DDTHH:MM:SSZ
    updated_on: str = ""
    last_auth: str = ""


@dataclass
class PushConfig:
    type: str = ""
    push_endpoint: str = ""
    max_messages: int = 0
    authorization_type: str = ""
    authorization_value: str = ""
    retry_type: str = ""
    retry_period: int = 0
    verification_hash: str = ""
    verified: bool = False
    mattermost_url: str = ""
    mattermost_username: str = ""
    mattermost_channel: str = ""
    base64_decode: bool = False

    @property
    def enabled(self) -> bool:
        return self.type != ""


@dataclass
class Subscription:
    project_uuid: str
    name: str
    topic: str  # bare topic name, in the same project
    ack_deadline: int = 10
    push: PushConfig = field(default_factory=PushConfig)
    created_on: int = 0
    acl: list[str] = field(default_factory=list)
    # Per-message delivery (docs/delivery.md); each one set makes acks per message.
    min_backoff_ms: int = 0  # retryPolicy; both 0: no retry policy
    max_backoff_ms: int = 0
    dead_letter_project: str = ""  # deadLetterPolicy: the topic's project uuid and name
    dead_letter_topic: str = ""
    max_delivery_attempts: int = 0
    filter: str = ""
    ordered: bool = False  # enableMessageOrdering
    exactly_once: bool = False  # enableExactlyOnceDelivery
    retain_acked: bool = False  # retainAckedMessages (the log keeps acknowledged messages anyway)

    @property
    def retry_policy(self) -> bool:
        return self.max_backoff_ms > 0

    @property
    def dead_letter(self) -> bool:
        return self.dead_letter_topic != ""

    @property
    def per_message(self) -> bool:
        """Created with any of the per-message features: an ack id acknowledges its own message
        only, and delivery attempts are counted (docs/delivery.md)."""
        return self.retry_policy or self.dead_letter or bool(self.filter) or self.ordered or self.exactly_once


@dataclass
class Snapshot:
    """A subscription's acknowledgement state at a moment, to seek back to (docs/delivery.md)."""

    project_uuid: str
    name: str
    topic: str  # bare topic name, in the same project
    subscription: str  # the subscription it was taken of
    offset: int  # everything below is acknowledged
    acked: list[tuple[int, int]] = field(default_factory=list)  # [start, end) acknowledged above offset
    created_ns: int = 0
    expire_ns: int = 0


def subscription_key(project_uuid: str, name: str) -> str:
    """A subscription's name across projects: its owner's claim, its push claim (docs/production.md)."""
    return f"{project_uuid}.{name}"


def subscription_of_key(key: str) -> tuple[str, str]:
    """(project uuid, subscription name) of a ``subscription_key``."""
    project_uuid, name = key.split(".", 1)
    return project_uuid, name


@dataclass
class Usage:
    """Traffic of a topic (published) or a subscription (consumed, redeliveries included)."""

    messages: int = 0
    bytes: int = 0
    latest_ns: int = 0  # last publish or pull
    rate: float = 0.0  # messages per second between the last two


@dataclass
class UsageBatch:
    """Counts gathered in memory between two flushes to the store."""

    topics: dict[tuple[str, str], Usage] = field(default_factory=dict)  # (project uuid, topic)
    subs: dict[tuple[str, str], Usage] = field(default_factory=dict)  # (project uuid, subscription)
    daily: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (project uuid, topic, YYYY-MM-DD)

    def empty(self) -> bool:
        return not (self.topics or self.subs or self.daily)


@dataclass(frozen=True)
class Lease:
    """Messages [start, end) handed out by one pull, not yet acknowledged."""

    start: int
    end: int
    delivered_ns: int  # when the pull leased them: it names the pull
    deadline_s: int
    attempt: int = 1  # which delivery of these messages this is
    until_ns: int = 0  # when a modifyAckDeadline moved the lease's end; 0: by the deadline
    key: str = ""  # the ordering key of its one message (subscriptions with message ordering)


@dataclass(frozen=True)
class Retry:
    """Messages [start, end) given back (nacked, or their lease ran out) and not yet delivered
    again: kept only on subscriptions that count delivery attempts (docs/delivery.md)."""

    start: int
    end: int
    attempts: int  # deliveries so far
    after_ns: int  # not delivered again before (the retry policy's backoff)
    key: str = ""  # the ordering key of its one message
    dead: bool = False  # out of attempts: to be published to the dead-letter topic


@dataclass
class Cursor:
    """A subscription's progress: everything below ``offset`` is acknowledged."""

    offset: int = 0
    leases: list[Lease] = field(default_factory=list)
    acked: list[tuple[int, int]] = field(default_factory=list)  # [start, end) above offset
    retries: list[Retry] = field(default_factory=list)
    #: Per-message subscriptions: deliveries made, by attempt (1, 2, 3, 4, 5 and more), and messages
    #: handed to the dead-letter topic; counted where the cursor changes, so every node reads them.
    deliveries: list[int] = field(default_factory=list)
    dead_lettered: int = 0
    version: int = 0
    #: What the store that read this version needs to write the next one, opaque to everyone else
    #: (the MongoDB store's: which cursor, and when it was read); None for the embedded store. A
    #: successful ``swap_cursor`` leaves in the cursor it wrote the mark for writing the next.
    store_mark: Any = None


def to_doc(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def user_from_doc(doc: dict[str, Any]) -> User:
    doc = dict(doc)
    doc["projects"] = [Membership(**m) for m in doc.get("projects", [])]
    return User(**doc)


def service_type_from_doc(doc: dict[str, Any]) -> ServiceType:
    doc = dict(doc)
    doc["hosts"] = list(doc.get("hosts", []))
    doc["auth_types"] = list(doc.get("auth_types", ["x509"]))
    return ServiceType(**doc)


def schema_from_doc(doc: dict[str, Any]) -> Schema:
    doc = dict(doc)
    doc["revisions"] = [SchemaRevision(**r) for r in doc.get("revisions", [])]
    return Schema(**doc)


def binding_from_doc(doc: dict[str, Any]) -> Binding:
    return Binding(**doc)


def sub_from_doc(doc: dict[str, Any]) -> Subscription:
    doc = dict(doc)
    doc["push"] = PushConfig(**doc.get("push", {}))
    return Subscription(**doc)


def cursor_from_doc(doc: dict[str, Any], version: int) -> Cursor:
    return Cursor(
        offset=int(doc.get("offset", 0)),
        leases=[Lease(**lease) for lease in doc.get("leases", [])],
        acked=[_range(a) for a in doc.get("acked", [])],
        retries=[Retry(**retry) for retry in doc.get("retries", [])],
        deliveries=[int(n) for n in doc.get("deliveries", [])],
        dead_lettered=int(doc.get("dead_lettered", 0)),
        version=version,
    )


def _range(value: Any) -> tuple[int, int]:
    if isinstance(value, dict):
        return int(value["start"]), int(value["end"])
    start, end = value  # the first embedded format: [start, end]
    return int(start), int(end)


def cursor_to_doc(cursor: Cursor) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "offset": cursor.offset,
        "leases": [_lean(dataclasses.asdict(lease), Lease) for lease in cursor.leases],
        # objects, not pairs: FerretDB (and so the tests' MongoDB) refuses nested arrays
        "acked": [{"start": start, "end": end} for start, end in cursor.acked],
    }
    if cursor.retries:
        doc["retries"] = [_lean(dataclasses.asdict(retry), Retry) for retry in cursor.retries]
    if cursor.deliveries:
        doc["deliveries"] = list(cursor.deliveries)
    if cursor.dead_lettered:
        doc["dead_lettered"] = cursor.dead_lettered
    return doc


def snapshot_to_doc(snapshot: Snapshot) -> dict[str, Any]:
    """A snapshot as both metadata stores keep it: its acked ranges as objects, like a cursor's."""
    doc = dataclasses.asdict(snapshot)
    doc["acked"] = [{"start": start, "end": end} for start, end in snapshot.acked]
    return doc


def snapshot_from_doc(doc: dict[str, Any]) -> Snapshot:
    doc = dict(doc)
    doc["acked"] = [_range(a) for a in doc.get("acked", [])]
    return Snapshot(**doc)


def _lean(doc: dict[str, Any], kind: type) -> dict[str, Any]:
    """Without the fields at their defaults: a plain subscription's cursor is written as before."""
    defaults = {f.name: f.default for f in dataclasses.fields(kind) if f.default is not dataclasses.MISSING}
    return {k: v for k, v in doc.items() if k not in defaults or defaults[k] != v}
