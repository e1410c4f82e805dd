"""AMS records as Pub/Sub messages (``google.pubsub_v1.types``, the protobuf classes that
google-cloud-pubsub ships), and Pub/Sub requests as the service's requests.

A request is read by the REST API's own parsers (ams_app/service/requests.py): the gRPC message
is turned into the JSON the REST API takes (Pub/Sub's JSON mapping is what the AMS REST API's
per-message fields follow), so that one set of rules and one set of error messages serves both
doors. Fields the service does not keep (labels, expiration policies, BigQuery and Cloud Storage
exports) are refused when they would change what the subscription does, and otherwise left out
(docs/pubsub.md, "Fields")."""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import duration_pb2, json_format, timestamp_pb2
from google.pubsub_v1.types import pubsub as ps
from google.pubsub_v1.types import schema as schema_types

from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.errors import AmsError
from ams_app.models import Project, Snapshot, Subscription, Topic
from ams_app.service import requests
from ams_app.service.subscriptions import Delivery
from ams_app.settings import Settings

PubsubMessage = ps.PubsubMessage.pb()
ReceivedMessage = ps.ReceivedMessage.pb()
TopicPb = ps.Topic.pb()
SubscriptionPb = ps.Subscription.pb()
SnapshotPb = ps.Snapshot.pb()
#: A subscription's message retention as shown (Pub/Sub's default, seven days): the log keeps
#: messages for the topic's retention (or the log's), which is what a seek can reach.
DEFAULT_RETENTION_S = 7 * 24 * 3600


def timestamp(ns: int) -> timestamp_pb2.Timestamp:
    seconds, nanos = divmod(ns, 1_000_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def duration(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


def name(project: Project, kind: str, item: str) -> str:
    return f"projects/{project.name}/{kind}/{item}"


def parse_name(text: str, kind: str) -> tuple[str, str]:
    """``projects/{project}/{kind}/{name}`` -> (project, name); INVALID_ARGUMENT otherwise."""
    found = requests.resource_ref(text, kind)
    if found is None:
        raise AmsError.invalid_data(f"Invalid resource name {text!r}: expected projects/{{project}}/{kind}/{{name}}")
    return found


def parse_project(text: str) -> str:
    """``projects/{project}`` -> project; INVALID_ARGUMENT otherwise."""
    parts = text.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not parts[1]:
        raise AmsError.invalid_data(f"Invalid project name {text!r}: expected projects/{{project}}")
    return parts[1]


# --- out -----------------------------------------------------------------------------------------
def message(stored: StoredMessage) -> Any:
    return PubsubMessage(
        data=base64.b64decode(stored.data),
        attributes=stored.attributes,
        message_id=str(stored.offset),
        publish_time=timestamp(stored.publish_ns),
        ordering_key=stored.ordering_key,
    )


def received(delivery: Delivery) -> Any:
    return ReceivedMessage(
        ack_id=delivery.ack_id, message=message(delivery.message), delivery_attempt=delivery.attempt or 0
    )


def topic(project: Project, found: Topic, schema_name: str | None) -> Any:
    out = TopicPb(name=name(project, "topics", found.name), state=int(ps.Topic.State.ACTIVE))
    if found.retention_s:
        out.message_retention_duration.CopyFrom(duration(found.retention_s))
    if schema_name:
        out.schema_settings.schema = name(project, "schemas", schema_name)
        encoding = found.schema_encoding
        if encoding:
            out.schema_settings.encoding = int(getattr(schema_types.Encoding, encoding))
    return out


def subscription(project: Project, sub: Subscription, topic_retention_s: int) -> Any:
    out = SubscriptionPb(
        name=name(project, "subscriptions", sub.name),
        topic=name(project, "topics", sub.topic),
        ack_deadline_seconds=sub.ack_deadline,
        retain_acked_messages=sub.retain_acked,
        enable_message_ordering=sub.ordered,
        filter=sub.filter,
        enable_exactly_once_delivery=sub.exactly_once,
        state=int(ps.Subscription.State.ACTIVE),
    )
    out.message_retention_duration.CopyFrom(duration(topic_retention_s or DEFAULT_RETENTION_S))
    if topic_retention_s:
        out.topic_message_retention_duration.CopyFrom(duration(topic_retention_s))
    if sub.push.enabled and sub.push.push_endpoint:
        out.push_config.push_endpoint = sub.push.push_endpoint
    if sub.retry_policy:
        out.retry_policy.minimum_backoff.FromMilliseconds(sub.min_backoff_ms)
        out.retry_policy.maximum_backoff.FromMilliseconds(sub.max_backoff_ms)
    if sub.dead_letter:
        out.dead_letter_policy.dead_letter_topic = f"projects/{project.name}/topics/{sub.dead_letter_topic}"
        out.dead_letter_policy.max_delivery_attempts = sub.max_delivery_attempts
    return out


def snapshot(project: Project, found: Snapshot) -> Any:
    return SnapshotPb(
        name=name(project, "snapshots", found.name),
        topic=name(project, "topics", found.topic),
        expire_time=timestamp(found.expire_ns),
    )


# --- in ------------------------------------------------------------------------------------------
def json_name(path: str) -> str:
    """An update mask's field path (snake_case) as its JSON name (camelCase)."""
    head, *rest = path.split("_")
    return head + "".join(word.capitalize() for word in rest)


def as_json(pb: Any) -> dict[str, Any]:
    """A request message in Pub/Sub's JSON mapping (camelCase, durations as "10s"), its set
    fields only: the body the REST API's parser takes."""
    out: dict[str, Any] = json_format.MessageToDict(pb)
    return out


def new_messages(pbs: Any, settings: Settings) -> list[NewMessage]:
    """A Publish request's messages, checked by the REST API's rules (size, attributes, data or
    attributes, ordering key)."""
    items = []
    for pb in pbs:
        item: dict[str, Any] = {"data": base64.b64encode(pb.data).decode("ascii")}
        if pb.attributes:
            item["attributes"] = dict(pb.attributes)
        if pb.ordering_key:
            item["orderingKey"] = pb.ordering_key
        items.append(item)
    return requests.messages({"messages": items}, settings)


def push_body(push: Any) -> dict[str, Any] | None:
    """A Pub/Sub PushConfig as the REST API's pushConfig: an HTTPS endpoint (verified before
    delivery starts, docs/push.md); its OIDC token and payload options are not kept."""
    if not push.push_endpoint:
        return None
    if push.HasField("oidc_token") or push.HasField("no_wrapper") or push.attributes:
        raise AmsError.invalid_data("pushConfig: only pushEndpoint is supported (docs/pubsub.md)")
    return {"type": "http_endpoint", "pushEndpoint": push.push_endpoint}


#: Subscription fields that are output only, or that change nothing here (shown on the way out).
_IGNORED = {"name", "labels", "state", "topicMessageRetentionDuration", "expirationPolicy", "detached", "tags"}
#: Subscription fields that exports and transforms need, which this service does not have.
_UNSUPPORTED = {
    "bigqueryConfig",
    "cloudStorageConfig",
    "bigtableConfig",
    "messageTransforms",
    "analyticsHubSubscriptionInfo",
}


def subscription_body(pb: Any) -> dict[str, Any]:
    """A Subscription message as the REST API's subscription body."""
    body = as_json(pb)
    for field in _IGNORED:
        body.pop(field, None)
    unsupported = sorted(set(body) & _UNSUPPORTED)
    if unsupported:
        raise AmsError.invalid_data(f"{', '.join(unsupported)}: not supported by this service (docs/pubsub.md)")
    if "pushConfig" in body:
        push = push_body(pb.push_config)
        body.pop("pushConfig")
        if push is not None:
            body["pushConfig"] = push
    retention = body.pop("messageRetentionDuration", None)
    if (
        retention is not None
        and requests.duration_ms(retention, "messageRetentionDuration") != DEFAULT_RETENTION_S * 1000
    ):
        raise AmsError.invalid_data(
            "messageRetentionDuration is a topic's on this server (its log keeps the messages): set it on the topic"
        )
    return body


def topic_body(pb: Any, project_name: str) -> dict[str, Any]:
    """A Topic message as the REST API's topic body (its schema and retention)."""
    body: dict[str, Any] = {}
    if pb.HasField("message_retention_duration"):
        body["messageRetentionDuration"] = f"{pb.message_retention_duration.ToTimedelta().total_seconds():g}s"
    if pb.schema_settings.schema:
        body["schema"] = pb.schema_settings.schema
        if pb.schema_settings.encoding:
            body["schemaEncoding"] = schema_types.Encoding(pb.schema_settings.encoding).name
    if pb.kms_key_name or pb.HasField("ingestion_data_source_settings") or len(pb.message_transforms):
        raise AmsError.invalid_data("kmsKeyName, ingestion and transforms are not supported by this service")
    return body
