"""A database in the original ARGO AMS's layout (the Go server's MongoDB stores, as docs/migration.md
describes them), filled as that server fills it through its API, and its messages in Kafka under the
original's topic names and record format: the source of ``ams migrate from-argo``'s tests.

Written with pymongo and confluent-kafka as the Go server writes them: the types its driver uses
(int64 counters, int32 ack deadlines, BSON dates), no indexes, and a record value of 3-space-indented
JSON whose ``messageId`` is not to be trusted."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bson.int64 import Int64

NEVER = datetime(1, 1, 1)  # the Go server's zero time


def _token() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex


@dataclass
class ArgoSource:
    """What the source holds, for the assertions."""

    project_uuid: str
    project: str
    tokens: dict[str, str] = field(default_factory=dict)  # user name -> token
    uuids: dict[str, str] = field(default_factory=dict)  # user name -> uuid
    messages: int = 0  # in topic "events"
    daily: dict[str, int] = field(default_factory=dict)  # YYYY-MM-DD -> messages of "events"


def fill(db: Any, project: str = "ARGO", messages: int = 50) -> ArgoSource:
    """The original's collections, as its API leaves them after: a project with three members and a
    service admin; topic ``events`` (ACL: alice) with ``messages`` published and a JSON schema;
    topic ``logs``; pull subscription ``ingest`` on events (ack 30 s) acknowledged up to 37 by its
    consumer, ``fresh`` pulled 10 without acknowledging (ack 7 s), a verified push subscription
    ``hook``, and ``orphan`` on a topic since deleted; daily counts of three days; registrations;
    and what a migration leaves out (op_metrics, roles)."""
    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    made = now - timedelta(days=10)
    source = ArgoSource(str(uuid.uuid4()), project, messages=messages)
    p = source.project_uuid
    gone = str(uuid.uuid4())  # a project deleted in the original: memberships stay behind
    db.projects.insert_one(
        {"uuid": p, "name": project, "created_on": made, "modified_on": made, "created_by": "", "description": "d"}
    )
    for name, service_roles, roles in (
        ("root", ["service_admin"], None),
        ("alice", None, ["publisher", "consumer"]),
        ("bob", [], ["consumer"]),
        ("carol", None, ["project_admin", "wizard"]),  # a role name the source's roles table had
    ):
        source.tokens[name] = _token()
        source.uuids[name] = str(uuid.uuid4())
        memberships = [] if roles is None else [{"project_uuid": p, "roles": roles}]
        if name == "bob":
            memberships.append({"project_uuid": gone, "roles": ["consumer"]})
        db.users.insert_one(
            {
                "uuid": source.uuids[name],
                "name": name,
                "token": source.tokens[name],
                "email": f"{name}@example.org",
                "first_name": "",
                "last_name": "",
                "organization": "",
                "description": "",
                "projects": memberships,
                "service_roles": service_roles,
                "created_on": made,
                "modified_on": made,
                "created_by": "",
            }
        )
    schema = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    schema_uuid = str(uuid.uuid4())
    db.schemas.insert_one(
        {
            "project_uuid": p,
            "uuid": schema_uuid,
            "name": "event-schema",
            "type": "json",
            "raw_schema": base64.b64encode(json.dumps(schema, separators=(",", ":")).encode()).decode(),
        }
    )
    ghost_user = str(uuid.uuid4())  # an ACL entry of a user deleted since
    db.topics.insert_many(
        [
            {
                "project_uuid": p,
                "name": "events",
                "msg_num": Int64(messages),
                "total_bytes": Int64(messages * 20),
                "latest_publish": now,
                "publish_rate": 2.5,
                "schema_uuid": "",
                "created_on": made,
                "acl": [source.uuids["alice"], ghost_user],
            },
            {
                "project_uuid": p,
                "name": "logs",
                "msg_num": Int64(0),
                "total_bytes": Int64(0),
                "latest_publish": NEVER,
                "publish_rate": 0.0,
                "schema_uuid": schema_uuid,
                "created_on": made,
                "acl": [],
            },
        ]
    )

    def sub(
        name: str, topic: str, offset: int, next_offset: int, pending: str, ack: int, **more: Any
    ) -> dict[str, Any]:
        doc = {
            "project_uuid": p,
            "name": name,
            "topic": topic,
            "offset": Int64(offset),
            "next_offset": Int64(next_offset) if next_offset else 0,
            "pending_ack": pending,
            "ack": ack,
            "push_type": "",
            "push_endpoint": "",
            "max_messages": Int64(0),
            "authorization_type": "",
            "authorization_header": "",
            "retry_policy": "",
            "retry_period": 0,
            "verification_hash": "",
            "verified": False,
            "mattermost_url": "",
            "mattermost_username": "",
            "mattermost_channel": "",
            "base_64_decode": False,
            "msg_num": Int64(offset + (next_offset - offset if next_offset else 0)),
            "total_bytes": Int64(offset * 20),
            "latest_consume": now if offset or next_offset else NEVER,
            "consume_rate": 0.5,
            "created_on": made,
            "acl": [],
        }
        doc.update(more)
        return doc

    db.subscriptions.insert_many(
        [
            sub("ingest", "events", 37, 0, "", 30, acl=[source.uuids["bob"]]),
            sub("fresh", "events", 0, 10, now.strftime("%Y-%m-%dT%H:%M:%SZ"), 7),
            sub(
                "hook",
                "events",
                0,
                0,
                "",
                10,
                push_type="http_endpoint",
                push_endpoint="https://receiver.example.org/push",
                max_messages=Int64(1),
                authorization_type="autogen",
                authorization_header="secret-header",
                retry_policy="linear",
                retry_period=3000,
                verification_hash="4f1a",
                verified=True,
            ),
            sub("orphan", "deleted-topic", 0, 0, "", 10),
        ]
    )
    for days_ago, count in ((2, 11), (1, 22), (0, messages - 33)):
        day = (now - timedelta(days=days_ago)).replace(hour=0, minute=0, second=0)
        db.daily_topic_msg_count.insert_one(
            {"date": day, "project_uuid": p, "topic_name": "events", "msg_count": Int64(count)}
        )
        source.daily[day.strftime("%Y-%m-%d")] = count
    db.user_registrations.insert_one(
        {
            "uuid": str(uuid.uuid4()),
            "name": "dave",
            "first_name": "Dave",
            "last_name": "D",
            "organization": "org",
            "description": "wants in",
            "email": "dave@example.org",
            "activation_token": _token(),
            "status": "pending",
            "decline_comment": "",
            "registered_at": made.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "modified_by": "",
            "modified_at": "",
        }
    )
    db.op_metrics.insert_one({"hostname": "ams-go-1", "cpu": 3.5, "mem": 12.0})
    db.roles.insert_many(
        [
            {"resource": "topics:publish", "roles": ["project_admin", "publisher"]},
            {"resource": "x", "roles": ["wizard"]},
        ]
    )
    return source


def record(offset: int, data: bytes, at: datetime) -> bytes:
    """A record value as the Go server writes it: 3-space-indented JSON, its messageId the end
    offset read before producing (here deliberately wrong, as concurrent publishes make it)."""
    body = {
        "messageId": str(offset + 3),
        "data": base64.b64encode(data).decode(),
        "publishTime": at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z",
    }
    if offset % 2:
        body["attributes"] = {"n": str(offset)}
    return json.dumps(body, indent=3).encode()


def produce(bootstrap: str, source: ArgoSource, topic: str = "events") -> str:
    """The topic's messages in Kafka as ``{project uuid}.{topic}``, one partition (made here, as the
    test broker does not create topics); its name."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"{source.project_uuid}.{topic}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])[name].result(30)
    _records(bootstrap, name, range(source.messages))
    return name


def produce_more(bootstrap: str, source: ArgoSource, count: int, topic: str = "events") -> None:
    """``count`` more messages, as the original publishes while it still serves (``source.messages``
    grows by them)."""
    _records(bootstrap, f"{source.project_uuid}.{topic}", range(source.messages, source.messages + count))
    source.messages += count


def _records(bootstrap: str, name: str, offsets: range) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    at = datetime.now(UTC) - timedelta(hours=1)
    for offset in offsets:
        producer.produce(name, record(offset, f"message {offset}".encode(), at + timedelta(seconds=offset)))
    assert producer.flush(30) == 0


def records(bootstrap: str, name: str) -> dict[int, dict[str, Any]]:
    """What the Kafka topic ``name`` holds, read back: each record's JSON by its offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "argo-layout", "enable.partition.eof": True})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=30)
        consumer.assign([TopicPartition(name, 0, 0)])
        found: dict[int, dict[str, Any]] = {}
        while len(found) < high:
            batch = consumer.consume(500, timeout=30)
            assert batch, f"{name}: nothing read after {len(found)} of {high}"
            for item in batch:
                if item.error() is None:
                    found[item.offset()] = json.loads(item.value())
        return found
    finally:
        consumer.close()
