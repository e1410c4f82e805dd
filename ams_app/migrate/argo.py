"""``ams migrate from-argo``: take over the metadata of a running original ARGO AMS (the Go server,
github.com/ARGOeu/argo-messaging) from its MongoDB database (docs/migration.md).

What it reads, and only reads (``find``; nothing is ever written to the source): projects, users
(tokens byte for byte, roles, memberships, service roles), topics and subscriptions (ACLs, push
configurations with their verification state, offsets, ack deadlines), schemas, registrations, the
per-topic and per-subscription counters, and the daily message counts behind the metrics and the
usage reports. Where it writes: the configured metadata store, embedded or MongoDB, through the
store's own calls, with the uuids kept. On the Kafka backend the messages stay in Kafka: both
servers name a topic's Kafka topic ``{project uuid}.{topic}`` on one partition, and ids are the
Kafka offsets. Into the embedded backend, ``messages`` copies them, each at its Kafka offset
(ams_app/migrate/messages.py).

Safety:

- ``dry_run`` reports what would be done and writes nothing;
- a second run finds what the first made (by uuid, or by project and name) and leaves it; counters
  and daily counts are brought up to the source's, never added twice; so a run that stopped midway
  can run again;
- what cannot be mapped (a duplicate name, a membership of a deleted project, an ACL entry of a
  deleted user, a subscription whose topic is gone, a role this server does not know) is listed in
  the report, never silently dropped; what is left out on purpose (``op_metrics``, the ``roles``
  table, which is fixed in code here) is listed too.

The source's layout, and what was assumed where it leaves a meaning open: docs/migration.md.
"""

from __future__ import annotations

import base64
import binascii
import collections
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ams_app.auth import VALID_ROLES
from ams_app.backends.store import MetadataStore
from ams_app.migrate.messages import CopyError, MessageCopy, report_lines
from ams_app.models import (
    Membership,
    Project,
    PushConfig,
    Registration,
    Schema,
    Subscription,
    Topic,
    Usage,
    UsageBatch,
    User,
)
from ams_app.service.base import topic_key
from ams_app.service.schemas import new_revision_id

#: Collections of the source that are not taken over, and why.
LEFT_OUT = {
    "op_metrics": "the Go hosts' own CPU and memory, not tenant data",
    "roles": "the route-to-roles table: fixed in code here (its differences are listed above)",
}
#: The Go server's "never" (0001-01-01), which is no time to keep.
_EPOCH_YEAR = 1970


@dataclass
class Report:
    """What a run did (or, dry, would do)."""

    dry_run: bool
    created: collections.Counter[str] = field(default_factory=collections.Counter)
    found: collections.Counter[str] = field(default_factory=collections.Counter)  # there already
    updated: collections.Counter[str] = field(default_factory=collections.Counter)  # counters brought up
    messages: list[str] = field(default_factory=list)  # the copy of the messages (embedded backend)
    unmapped: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        verb = "would create" if self.dry_run else "created"
        kinds = sorted(set(self.created) | set(self.found) | set(self.updated))
        out = [
            f"{kind}: {verb} {self.created[kind]}, already there {self.found[kind]}"
            + (f", counters brought up {self.updated[kind]}" if self.updated[kind] else "")
            for kind in kinds
        ]
        out += self.messages
        out += [f"not mapped: {what}" for what in self.unmapped]
        out += [f"left out: {what}" for what in self.left_out]
        return out


def _ns(value: Any) -> int:
    """A BSON date (a datetime; naive ones are UTC) or an RFC 3339 string as ns since the epoch; 0
    for the Go server's "never" and for what is missing or unreadable."""
    if isinstance(value, str):
        if not value:
            return 0
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0
    if not isinstance(value, datetime) or value.year < _EPOCH_YEAR:
        return 0
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1_000_000) * 1000


def _str(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else ""


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


class _Run:
    def __init__(self, source: Any, store: MetadataStore, dry_run: bool) -> None:
        self.source = source
        self.store = store
        self.report = Report(dry_run)
        self.projects: dict[str, Project] = {}  # uuid -> the project as it is (or will be) here
        self.users: set[str] = set()  # uuids of the users here
        self.topics: set[tuple[str, str]] = set()

    def _docs(self, collection: str) -> Iterable[dict[str, Any]]:
        # in the order they were made: of two with one name, the first made is kept
        found: Iterable[dict[str, Any]] = self.source[collection].find({}, sort=[("_id", 1)])
        return found

    def _made(self, kind: str, create: Any) -> bool:
        """Create (unless dry); whether it was made (False: a name taken meanwhile)."""
        if self.report.dry_run:
            self.report.created[kind] += 1
            return True
        if create() is False:
            return False
        self.report.created[kind] += 1
        return True

    # --- projects and users --------------------------------------------------------------------
    def projects_(self) -> None:
        for doc in self._docs("projects"):
            uuid, name = _str(doc, "uuid"), _str(doc, "name")
            if not uuid or not name:
                self.report.unmapped.append(f"project {doc.get('_id')}: no uuid or name")
                continue
            here = self.store.get_project(uuid=uuid)
            if here is not None:
                self.report.found["projects"] += 1
                self.projects[uuid] = here
                continue
            if self.store.get_project(name=name) is not None or any(p.name == name for p in self.projects.values()):
                self.report.unmapped.append(f"project {name!r} ({uuid}): the name is taken by another project")
                continue
            project = Project(
                uuid,
                name,
                _str(doc, "description"),
                _ns(doc.get("created_on")),
                _ns(doc.get("modified_on")),
                _str(doc, "created_by"),
            )
            if self._made("projects", lambda project=project: self.store.create_project(project)):
                self.projects[uuid] = project
            else:
                self.report.unmapped.append(f"project {name!r} ({uuid}): the name is taken by another project")

    def users_(self) -> None:
        for doc in self._docs("users"):
            uuid, name, token = _str(doc, "uuid"), _str(doc, "name"), _str(doc, "token")
            if not uuid or not name or not token:
                self.report.unmapped.append(f"user {doc.get('_id')}: no uuid, name or token")
                continue
            if self.store.get_user(uuid=uuid) is not None:
                self.report.found["users"] += 1
                self.users.add(uuid)
                continue
            if self.store.get_user(name=name) is not None:
                self.report.unmapped.append(f"user {name!r} ({uuid}): the name is taken by another user")
                continue
            if self.store.get_user(token=token) is not None:
                self.report.unmapped.append(f"user {name!r} ({uuid}): another user has the same token")
                continue
            service_roles = [r for r in doc.get("service_roles") or [] if isinstance(r, str)]
            for role in sorted(set(service_roles) - VALID_ROLES):
                self.report.unmapped.append(f"user {name!r}: service role {role!r} is not a role here (dropped)")
            memberships = []
            for entry in doc.get("projects") or []:
                project_uuid = _str(entry, "project_uuid") if isinstance(entry, dict) else ""
                if project_uuid not in self.projects:
                    self.report.unmapped.append(
                        f"user {name!r}: membership of project {project_uuid or '?'}, which is not there (dropped)"
                    )
                    continue
                roles = [r for r in entry.get("roles") or [] if isinstance(r, str)]
                for role in sorted(set(roles) - VALID_ROLES):
                    project_name = self.projects[project_uuid].name
                    self.report.unmapped.append(
                        f"user {name!r}: role {role!r} in {project_name} is not a role here (dropped)"
                    )
                memberships.append(Membership(project_uuid, [r for r in roles if r in VALID_ROLES]))
            user = User(
                uuid,
                name,
                token,
                email=_str(doc, "email"),
                first_name=_str(doc, "first_name"),
                last_name=_str(doc, "last_name"),
                organization=_str(doc, "organization"),
                description=_str(doc, "description"),
                service_roles=[r for r in service_roles if r in VALID_ROLES],
                projects=memberships,
                created_on=_ns(doc.get("created_on")),
                modified_on=_ns(doc.get("modified_on")),
                created_by=_str(doc, "created_by"),
            )
            if self._made("users", lambda user=user: self.store.create_user(user)):
                self.users.add(uuid)
            else:
                self.report.unmapped.append(f"user {name!r} ({uuid}): its name or token is taken")

    def _acl(self, what: str, acl: Any) -> list[str]:
        kept = []
        for entry in acl or []:
            if isinstance(entry, str) and entry in self.users:
                kept.append(entry)
            else:
                self.report.unmapped.append(f"{what}: ACL entry {entry!r}, a user that is not there (dropped)")
        return kept

    # --- topics, subscriptions, schemas --------------------------------------------------------
    def _of_projects(self, collection: str, kind: str) -> Iterator[tuple[dict[str, Any], str, str, str]]:
        """The documents of a collection of per-project objects whose project is here: each with
        its project's uuid, its name, and how the report names it."""
        for doc in self._docs(collection):
            project_uuid, name = _str(doc, "project_uuid"), _str(doc, "name")
            where = f"{kind} {name!r} of project {project_uuid}"
            if project_uuid not in self.projects:
                self.report.unmapped.append(f"{where}: its project is not there")
                continue
            yield doc, project_uuid, name, where

    def schemas_(self) -> None:
        for doc, project_uuid, name, where in self._of_projects("schemas", "schema"):
            uuid = _str(doc, "uuid")
            if self.store.get_schema(project_uuid, uuid=uuid) is not None:
                self.report.found["schemas"] += 1
                continue
            kind = _str(doc, "type").lower()
            try:
                definition = json.loads(base64.b64decode(_str(doc, "raw_schema"), validate=True))
            except (binascii.Error, ValueError):
                self.report.unmapped.append(f"{where}: raw_schema is not base64 of JSON")
                continue
            if kind not in ("json", "avro"):
                self.report.unmapped.append(f"{where}: type {kind!r} is not one the original has")
                continue
            schema = Schema(uuid, project_uuid, name, kind, definition, revision_id=new_revision_id())
            if not self._made("schemas", lambda schema=schema: self.store.create_schema(schema)):
                self.report.unmapped.append(f"{where}: the name is taken by another schema")

    def topics_(self, counters: UsageBatch) -> None:
        for doc, project_uuid, name, where in self._of_projects("topics", "topic"):
            if self.store.get_topic(project_uuid, name) is not None:
                self.report.found["topics"] += 1
                self.topics.add((project_uuid, name))
            else:
                schema_uuid = _str(doc, "schema_uuid")
                missing = schema_uuid and self.store.get_schema(project_uuid, uuid=schema_uuid) is None
                if missing and not self.report.dry_run:
                    self.report.unmapped.append(f"{where}: its schema {schema_uuid} is not there (none kept)")
                    schema_uuid = ""
                topic = Topic(project_uuid, name, _ns(doc.get("created_on")), self._acl(where, doc.get("acl")))
                topic.schema_uuid = schema_uuid
                if not self._made("topics", lambda topic=topic: self.store.create_topic(topic)):
                    self.report.unmapped.append(f"{where}: the name is taken")
                    continue
                self.topics.add((project_uuid, name))
            self._counter(counters.topics, "topic", project_uuid, name, doc, "latest_publish", "publish_rate")

    def subscriptions_(self, counters: UsageBatch) -> None:
        for doc, project_uuid, name, where in self._of_projects("subscriptions", "subscription"):
            topic = _str(doc, "topic")
            if self.store.get_subscription(project_uuid, name) is not None:
                self.report.found["subscriptions"] += 1
            elif (project_uuid, topic) not in self.topics:
                self.report.unmapped.append(f"{where}: its topic {topic!r} is not there (deleted in the original)")
                continue
            else:
                sub = Subscription(
                    project_uuid,
                    name,
                    topic,
                    ack_deadline=_int(doc, "ack") or 10,
                    push=self._push(where, doc),
                    created_on=_ns(doc.get("created_on")),
                    acl=self._acl(where, doc.get("acl")),
                )
                offset = _int(doc, "offset")  # the next message to deliver: everything below is acknowledged
                if not self._made("subscriptions", lambda sub=sub, o=offset: self.store.create_subscription(sub, o)):
                    self.report.unmapped.append(f"{where}: the name is taken")
                    continue
            self._counter(counters.subs, "sub", project_uuid, name, doc, "latest_consume", "consume_rate")

    def _push(self, where: str, doc: dict[str, Any]) -> PushConfig:
        kind = _str(doc, "push_type")
        if kind not in ("", "http_endpoint", "mattermost"):
            self.report.unmapped.append(
                f"{where}: push type {kind!r} is not one the original has (a pull subscription)"
            )
            kind = ""
        if not kind:
            return PushConfig()
        return PushConfig(
            type=kind,
            push_endpoint=_str(doc, "push_endpoint"),
            max_messages=_int(doc, "max_messages") or 1,
            authorization_type=_str(doc, "authorization_type"),
            authorization_value=_str(doc, "authorization_header"),
            retry_type=_str(doc, "retry_policy") or "linear",
            retry_period=_int(doc, "retry_period"),
            verification_hash=_str(doc, "verification_hash"),
            verified=bool(doc.get("verified")),
            mattermost_url=_str(doc, "mattermost_url"),
            mattermost_username=_str(doc, "mattermost_username"),
            mattermost_channel=_str(doc, "mattermost_channel"),
            base64_decode=bool(doc.get("base_64_decode")),
        )

    def _counter(
        self,
        into: dict[tuple[str, str], Usage],
        kind: str,
        project_uuid: str,
        name: str,
        doc: dict[str, Any],
        latest: str,
        rate: str,
    ) -> None:
        """What the counters here lack of the source's (all of it on a first run, nothing on a
        second): the difference, added."""
        messages, size = _int(doc, "msg_num"), _int(doc, "total_bytes")
        here = self.store.usage(kind, project_uuid, name) if not self.report.dry_run else Usage()
        more = Usage(max(messages - here.messages, 0), max(size - here.bytes, 0))
        if more.messages or more.bytes:
            more.latest_ns = _ns(doc.get(latest))
            value = doc.get(rate)
            more.rate = float(value) if isinstance(value, int | float) else 0.0
            into[(project_uuid, name)] = more
            self.report.updated["topics" if kind == "topic" else "subscriptions"] += 1

    # --- history, registrations ----------------------------------------------------------------
    def daily_(self, counters: UsageBatch) -> None:
        source: dict[tuple[str, str, str], int] = collections.Counter()
        for doc in self._docs("daily_topic_msg_count"):
            project_uuid, topic, at = _str(doc, "project_uuid"), _str(doc, "topic_name"), _ns(doc.get("date"))
            if project_uuid not in self.projects or not at:
                continue  # the original removes a deleted project's rows itself; a bad date counts nothing
            key = (project_uuid, topic, datetime.fromtimestamp(at / 1e9, UTC).strftime("%Y-%m-%d"))
            source[key] += _int(doc, "msg_count")
        here: dict[tuple[str, str], dict[str, int]] = {}
        for (project_uuid, topic, day), count in sorted(source.items()):
            if (project_uuid, topic) not in here:
                found = [] if self.report.dry_run else self.store.daily_messages(project_uuid, topic, 100_000)
                here[(project_uuid, topic)] = dict(found)
            more = count - here[(project_uuid, topic)].get(day, 0)
            if more > 0:
                counters.daily[(project_uuid, topic, day)] = more
                self.report.updated["daily counts"] += 1
            else:
                self.report.found["daily counts"] += 1

    def registrations_(self) -> None:
        for doc in self._docs("user_registrations"):
            uuid = _str(doc, "uuid")
            if not uuid:
                self.report.unmapped.append(f"registration {doc.get('_id')}: no uuid")
                continue
            if self.store.get_registration(uuid) is not None:
                self.report.found["registrations"] += 1
                continue
            status = _str(doc, "status") or "pending"
            registration = Registration(
                uuid,
                _str(doc, "name"),
                email=_str(doc, "email"),
                first_name=_str(doc, "first_name"),
                last_name=_str(doc, "last_name"),
                organization=_str(doc, "organization"),
                description=_str(doc, "description"),
                status=status,
                decline_comment=_str(doc, "decline_comment"),
                activation_token=_str(doc, "activation_token"),
                registered_at=_ns(doc.get("registered_at")),
                modified_by=_str(doc, "modified_by"),
                modified_at=_ns(doc.get("modified_at")),
            )
            self._made("registrations", lambda r=registration: self.store.create_registration(r))

    def left_out_(self, present: set[str]) -> None:
        for name, why in LEFT_OUT.items():
            if name in present:
                self.report.left_out.append(f"{name}: {why}")

    def roles_(self) -> None:
        """The source's route-to-roles table against the roles each route here declares: each
        difference listed (an operator may have changed the original's table)."""
        import ams_app.api.routes  # noqa: F401  (the routes declare their roles as they load)
        from ams_app.api.pipeline import ROUTE_ROLES

        for doc in self._docs("roles"):
            resource = _str(doc, "resource")
            theirs = sorted(r for r in doc.get("roles") or [] if isinstance(r, str))
            ours = ROUTE_ROLES.get(resource)
            if ours is None:
                self.report.unmapped.append(f"roles table: {resource!r} is not a route here")
            elif set(theirs) != ours:
                self.report.unmapped.append(
                    f"roles table: {resource!r} is for {', '.join(theirs) or 'nobody'} there, "
                    f"for {', '.join(sorted(ours))} here"
                )


def migrate(source: Any, store: MetadataStore, *, dry_run: bool = False, messages: MessageCopy | None = None) -> Report:
    """Take over the original's metadata from ``source`` (a pymongo Database, read only) into
    ``store``, then, with ``messages``, the messages of every topic taken over (or already there)
    into the embedded log; what was done (or would be) and what could not be."""
    run = _Run(source, store, dry_run)
    present = set(source.list_collection_names())
    counters = UsageBatch()
    run.projects_()
    run.users_()
    run.schemas_()
    run.topics_(counters)
    run.subscriptions_(counters)
    run.daily_(counters)
    run.registrations_()
    run.left_out_(present)
    run.roles_()
    if not dry_run and (counters.topics or counters.subs or counters.daily):
        store.add_usage(counters)
    if messages is not None:
        copies = []
        try:
            for project_uuid, topic in sorted(run.topics, key=lambda t: (run.projects[t[0]].name, t[1])):
                project = run.projects[project_uuid]
                copies.append(messages.copy(topic_key(project, topic), project.name, topic, dry_run))
        except CopyError as exc:  # what was done so far, for the report
            run.report.messages += report_lines(copies, dry_run)[0]
            exc.report = run.report
            raise
        lines, unmapped = report_lines(copies, dry_run)
        run.report.messages += lines
        run.report.unmapped += unmapped
    return run.report
