"""JSON shapes of the API (the schemas of ams_app/openapi.yaml)."""

from __future__ import annotations

from typing import Any, Protocol

from ams_app.models import Project, Registration, Schema, Snapshot, Subscription, Topic, User
from ams_app.service.subscriptions import Delivery
from ams_app.timeutil import zulu_seconds
from ams_app.wire import message_json


class Directory(Protocol):
    """The names behind the uuids a view shows (the service provides them, ams_app/service/base.py)."""

    def find_user(self, uuid: str) -> User | None: ...

    def find_project(self, uuid: str) -> Project | None: ...

    def acl_of_user(self, uuid: str) -> list[tuple[str, str, str]]: ...


def project_view(names: Directory, project: Project) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": project.name,
        "created_on": zulu_seconds(project.created_on),
        "modified_on": zulu_seconds(project.modified_on),
    }
    if project.created_by:
        creator = names.find_user(project.created_by)
        if creator is not None:
            out["created_by"] = creator.name
    if project.description:
        out["description"] = project.description
    return out


def user_view(
    names: Directory,
    user: User,
    *,
    privileged: bool,
    only_project: Project | None = None,
    with_projects: bool = True,
) -> dict[str, Any]:
    """A user. ``privileged`` adds token, service roles and creator; ``only_project`` limits
    the memberships shown to one project."""
    out: dict[str, Any] = {"uuid": user.uuid}
    if with_projects:
        acl = names.acl_of_user(user.uuid)
        projects = []
        for membership in user.projects:
            if only_project is not None and membership.project_uuid != only_project.uuid:
                continue
            project = only_project or names.find_project(membership.project_uuid)
            if project is None:
                continue
            projects.append(
                {
                    "project": project.name,
                    "roles": list(membership.roles),
                    "topics": [n for k, p, n in acl if k == "topic" and p == project.uuid],
                    "subscriptions": [n for k, p, n in acl if k == "sub" and p == project.uuid],
                }
            )
        if projects:
            out["projects"] = projects
    out["name"] = user.name
    for key in ("first_name", "last_name", "organization", "description"):
        if getattr(user, key):
            out[key] = getattr(user, key)
    if privileged:
        out["token"] = user.token
    out["email"] = user.email
    out["service_roles"] = list(user.service_roles) if privileged else []
    out["created_on"] = zulu_seconds(user.created_on)
    out["modified_on"] = zulu_seconds(user.modified_on)
    if privileged and user.created_by:
        creator = names.find_user(user.created_by)
        if creator is not None:
            out["created_by"] = creator.name
    return out


def topic_view(project: Project, topic: Topic, schema_name: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f"/projects/{project.name}/topics/{topic.name}"}
    if schema_name:
        out["schema"] = f"projects/{project.name}/schemas/{schema_name}"
        if topic.schema_encoding:
            out["schemaEncoding"] = topic.schema_encoding
    if topic.retention_s:
        out["messageRetentionDuration"] = f"{topic.retention_s}s"
    out["created_on"] = zulu_seconds(topic.created_on)
    return out


def sub_view(project: Project, sub: Subscription, push_status: str | None = None) -> dict[str, Any]:
    push = sub.push
    config: dict[str, Any] = {
        "type": push.type,
        "pushEndpoint": push.push_endpoint,
        "maxMessages": push.max_messages,
        "authorizationHeader": {},
        "retryPolicy": {},
        "verificationHash": push.verification_hash,
        "verified": push.verified,
        "mattermostUrl": push.mattermost_url,
        "mattermostUsername": push.mattermost_username,
        "mattermostChannel": push.mattermost_channel,
        "base64Decode": push.base64_decode,
    }
    if push.enabled:
        config["maxMessages"] = max(push.max_messages, 1)
        config["authorizationHeader"] = {"type": push.authorization_type, "value": push.authorization_value}
        retry: dict[str, Any] = {"type": push.retry_type}
        if push.retry_type != "slowstart":
            retry["period"] = push.retry_period
        config["retryPolicy"] = retry
    out = {
        "name": f"/projects/{project.name}/subscriptions/{sub.name}",
        "topic": f"/projects/{project.name}/topics/{sub.topic}",
        "pushConfig": config,
        "ackDeadlineSeconds": sub.ack_deadline,
    }
    out.update(delivery_policy_view(project, sub))
    if push_status is not None:
        out["pushStatus"] = push_status
    out["createdOn"] = zulu_seconds(sub.created_on)
    return out


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms / 1000:.3f}".rstrip("0") + "s"


def delivery_policy_view(project: Project, sub: Subscription) -> dict[str, Any]:
    """The per-message delivery fields a subscription was created with; none on a plain one, whose
    view stays the original's (docs/delivery.md)."""
    out: dict[str, Any] = {}
    if sub.retry_policy:
        out["retryPolicy"] = {
            "minimumBackoff": _seconds(sub.min_backoff_ms),
            "maximumBackoff": _seconds(sub.max_backoff_ms),
        }
    if sub.dead_letter:
        out["deadLetterPolicy"] = {
            "deadLetterTopic": f"projects/{project.name}/topics/{sub.dead_letter_topic}",
            "maxDeliveryAttempts": sub.max_delivery_attempts,
        }
    if sub.filter:
        out["filter"] = sub.filter
    if sub.ordered:
        out["enableMessageOrdering"] = True
    if sub.exactly_once:
        out["enableExactlyOnceDelivery"] = True
    if sub.retain_acked:
        out["retainAckedMessages"] = True
    return out


def snapshot_view(project: Project, snapshot: Snapshot) -> dict[str, Any]:
    return {
        "name": f"projects/{project.name}/snapshots/{snapshot.name}",
        "topic": f"projects/{project.name}/topics/{snapshot.topic}",
        "subscription": f"projects/{project.name}/subscriptions/{snapshot.subscription}",
        "expireTime": zulu_seconds(snapshot.expire_ns),
    }


def delivery_view(delivery: Delivery) -> dict[str, Any]:
    out: dict[str, Any] = {"ackId": delivery.ack_id, "message": message_json(delivery.message, decode=False)}
    if delivery.attempt is not None:
        out["deliveryAttempt"] = delivery.attempt
    return out


def schema_view(project: Project, schema: Schema) -> dict[str, Any]:
    return {
        "uuid": schema.uuid,
        "name": f"projects/{project.name}/schemas/{schema.name}",
        "type": schema.type,
        "schema": schema.schema,
    }


def registration_view(names: Directory, registration: Registration) -> dict[str, Any]:
    out: dict[str, Any] = {"uuid": registration.uuid, "name": registration.name}
    for key in ("first_name", "last_name", "organization", "description", "email"):
        out[key] = getattr(registration, key)
    out["status"] = registration.status
    if registration.decline_comment:
        out["decline_comment"] = registration.decline_comment
    if registration.activation_token:
        out["activation_token"] = registration.activation_token
    out["registered_at"] = zulu_seconds(registration.registered_at)
    if registration.modified_at:
        modifier = names.find_user(registration.modified_by) if registration.modified_by else None
        if modifier is not None:
            out["modified_by"] = modifier.name
        out["modified_at"] = zulu_seconds(registration.modified_at)
    return out
