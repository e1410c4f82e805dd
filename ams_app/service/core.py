"""AmsService: every API operation, over a MetadataStore and a MessageLog."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import re
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import gevent
from gevent.event import Event

from ams_app import auth
from ams_app.auth import CONSUMER, PROJECT_ADMIN, PUBLISHER, PUSH_WORKER, Caller
from ams_app.backends.log import MessageLog, NewMessage, StoredMessage
from ams_app.backends.store import InvalidPageToken, MetadataStore, Page
from ams_app.errors import AmsError
from ams_app.models import Cursor, Membership, Project, Subscription, Topic, User
from ams_app.service import cursor as cur
from ams_app.service import owner, push, schemas
from ams_app.service.base import topic_key
from ams_app.service.guard import Guarded
from ams_app.service.metacache import MetadataCache
from ams_app.service.metrics_ops import MetricsOps
from ams_app.service.push_ops import PushOps, active
from ams_app.service.registration_ops import RegistrationOps
from ams_app.service.schema_ops import SchemaOps
from ams_app.service.usage import UsageCounters
from ams_app.service.validation import (
    as_object,
    opt_bool,
    opt_int,
    opt_str,
    opt_str_list,
    valid_name,
)
from ams_app.settings import Settings
from ams_app.timeutil import now_ns, parse_iso8601_ns

_BAD_USER = AmsError.invalid_argument("User")
_BAD_PROJECT = AmsError.invalid_argument("Project")
_BAD_MESSAGE = AmsError.invalid_argument("Message")
_BAD_SUB = AmsError.invalid_argument("Subscription")
_BAD_DEADLINE = AmsError.invalid_argument("ackDeadlineSeconds(needs value between 0 and 600)")
_BAD_PULL = AmsError.invalid_argument("Pull Parameters")
_BAD_OFFSET = AmsError.invalid_argument("Offset")
_HEALTH_INTERVAL = 2.0
_HEALTH_TIMEOUT = 5.0
logger = logging.getLogger("ams")  # not "log": self.log is the message log
#: Largest page size honoured (a larger one lists everything anyway).
_MAX_PAGE_SIZE = 2**31 - 1
_INT64 = (-(2**63), 2**63 - 1)
R = TypeVar("R")


@dataclass
class Delivery:
    ack_id: str
    message: StoredMessage


class AmsService(SchemaOps, RegistrationOps, MetricsOps, PushOps):  # each a ServiceBase
    def __init__(self, settings: Settings, store: MetadataStore, log: MessageLog) -> None:
        self.settings = settings
        #: What the last health check found unreachable, by name ("Kafka", "the metadata
        #: store", "ZooKeeper"); /v1/status reports it, and calls to a backend named here fail
        #: at once (ams_app/service/guard.py).
        self.unavailable: tuple[str, ...] = ()
        self.store_name = "the metadata store" if settings.backend == "kafka" else "the embedded metadata store"
        self.log_name = "Kafka" if settings.backend == "kafka" else "the embedded message log"
        #: set to have the health check look again now rather than at its next interval
        self._look_again = Event()
        self._guards = {
            self.store_name: Guarded(
                store, self.store_name, lambda: self.store_name in self.unavailable, self._look_again.set
            ),
            self.log_name: Guarded(log, self.log_name, lambda: self.log_name in self.unavailable, self._look_again.set),
        }
        store = cast(MetadataStore, self._guards[self.store_name])
        log = cast(MessageLog, self._guards[self.log_name])
        self.metadata: MetadataCache | None = None
        if settings.metadata_cache and settings.backend == "kafka" and settings.zookeeper_hosts:
            self.metadata = MetadataCache(settings, store)
            self.metadata.start()
            store = self.metadata  # the same methods, four of them cached
        self.store = store
        self.log = log
        self.stopping = Event()
        self.usage = UsageCounters(store, settings.metrics_flush_seconds)
        self.push_listeners = []
        self._health_watch = gevent.spawn(self._watch_health)
        if settings.consume_owner and settings.backend == "kafka":
            self.owners = owner.Owners(settings, store)
            self.owners.start()

    @property
    def backend_healthy(self) -> bool:
        """Both backends answered the last health check (ZooKeeper aside: without it the nodes
        serve on, only metadata changes and push ownership wait for it)."""
        return not {self.store_name, self.log_name} & set(self.unavailable)

    def _zookeeper_connected(self) -> bool:
        clients = [getattr(user, "client", None) for user in (self.metadata, self.owners, self.push_monitor)]
        return all(client.connected for client in clients if client is not None)

    def _watch_health(self) -> None:
        """Ping both backends every few seconds, and look at the ZooKeeper sessions, in the
        background: /v1/status reads the result and never waits on a slow or stalled backend."""
        while not self.stopping.is_set():
            down: list[str] = []
            for name, ping in ((self.log_name, self.log.ping), (self.store_name, self.store.ping)):
                try:
                    with gevent.Timeout(_HEALTH_TIMEOUT):
                        ping()
                except (Exception, gevent.Timeout):
                    down.append(name)
            if not self._zookeeper_connected():
                down.append("ZooKeeper")
            if tuple(down) != self.unavailable:
                logger.warning("unavailable: %s", ", ".join(down) or "nothing any more")
            newly = set(down) - set(self.unavailable)
            self.unavailable = tuple(down)
            for name in newly & set(self._guards):  # the calls waiting on it fail now, not at their timeout
                abandoned = self._guards[name].abandon()
                if abandoned:
                    logger.warning("%s is unavailable: %d waiting calls answer 503", name, abandoned)
            self._look_again.wait(_HEALTH_INTERVAL)  # or sooner, when a call found a backend gone
            self._look_again.clear()

    def close(self) -> None:
        self.stopping.set()
        self._health_watch.kill()
        if self.owners is not None:
            self.owners.close()
        self.usage.close()
        self.store.close()
        self.log.close()

    # ----------------------------------------------------------------- lookups ----------
    def caller_for_token(self, token: str) -> Caller | None:
        """The caller a token stands for, with its service roles; None if unknown."""
        if not token:
            return None
        if self.settings.service_token and token == self.settings.service_token:
            return auth.SERVICE_CALLER
        if not token.isprintable():  # no token holds a control character: not worth a lookup
            return None
        user = self.store.get_user(token=token)
        if user is None:
            return None
        return Caller(user, frozenset(user.service_roles))

    @staticmethod
    def _filtered_for(caller: Caller, role: str) -> str | None:
        """The user whose ACL entries filter a list, for callers who are only ``role``."""
        if caller.is_service_admin or caller.has(PROJECT_ADMIN) or not caller.has(role):
            return None
        return caller.uuid

    @staticmethod
    def _page_args(page_size: str | None, page_token: str | None) -> tuple[int, str]:
        size = 0
        if page_size not in (None, ""):
            try:
                size = int(str(page_size))
            except ValueError as exc:
                raise AmsError.invalid_data("Invalid page size") from exc
        return min(max(size, 0), _MAX_PAGE_SIZE), page_token or ""

    @staticmethod
    def _paged(fetch: Any, *args: Any) -> Any:
        try:
            return fetch(*args)
        except InvalidPageToken as exc:
            raise AmsError.invalid_data("Invalid page token") from exc

    # ----------------------------------------------------------------- projects ---------
    def create_project(self, caller: Caller, name: str, body: Any) -> Project:
        body = as_object(body, _BAD_PROJECT)
        description = opt_str(body, "description", _BAD_PROJECT) or ""
        now = now_ns()
        project = Project(str(uuidlib.uuid4()), name, description, now, now, caller.uuid)
        if not self.store.create_project(project):
            raise AmsError.conflict("Project")
        return project

    def update_project(self, project: Project, body: Any) -> Project:
        bad = AmsError.invalid_request_body()
        body = as_object(body, bad)
        new_name = opt_str(body, "name", bad) or ""
        description = opt_str(body, "description", bad)
        if new_name and not valid_name(new_name):
            raise AmsError.invalid_name("project")
        if new_name:
            project.name = new_name
        if description:
            project.description = description
        project.modified_on = now_ns()
        if not self.store.update_project(project):
            raise AmsError.invalid_data("invalid project name change, name already exists")
        return project

    def delete_project(self, project: Project) -> None:
        self.usage.forget(project.uuid)
        for topic_name in self.store.delete_project(project.uuid):
            self.log.drop_topic(topic_key(project, topic_name))

    # ----------------------------------------------------------------- users ------------
    def _check_roles(self, roles: list[str]) -> list[str]:
        for role in roles:
            if role not in auth.VALID_ROLES:
                raise AmsError.invalid_data(f"invalid role: {role}")
        return list(dict.fromkeys(roles))

    def _memberships(self, raw: Any) -> list[Membership]:
        if not isinstance(raw, list):
            raise _BAD_USER
        out: list[Membership] = []
        seen: set[str] = set()
        for entry in raw:
            entry = as_object(entry, _BAD_USER)
            project_name = opt_str(entry, "project", _BAD_USER) or ""
            roles = opt_str_list(entry, "roles", _BAD_USER) or []
            if not project_name:
                continue
            project = self.store.get_project(name=project_name)
            if project is None:
                raise AmsError.invalid_data(f"invalid project: {project_name}")
            if project.uuid in seen:
                raise AmsError.invalid_data(f"duplicate reference of project {project_name}")
            seen.add(project.uuid)
            out.append(Membership(project.uuid, self._check_roles(roles)))
        return out

    _USER_TEXT = ("email", "first_name", "last_name", "organization", "description")

    def create_user(self, caller: Caller, name: str, body: Any) -> User:
        body = as_object({} if body is None else body, _BAD_USER)
        texts = {k: opt_str(body, k, _BAD_USER) or "" for k in self._USER_TEXT}
        service_roles = self._check_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
        memberships = self._memberships(body.get("projects") or [])
        return self._new_user(caller, name, service_roles=service_roles, projects=memberships, **texts)

    def update_user(self, name: str, body: Any) -> User:
        user = self.user(name)
        body = as_object(body, _BAD_USER)
        new_name = opt_str(body, "name", _BAD_USER) or ""
        if new_name and not valid_name(new_name):
            raise AmsError.invalid_name("user")
        for key in self._USER_TEXT:
            value = opt_str(body, key, _BAD_USER)
            if value:
                setattr(user, key, value)
        if body.get("service_roles") is not None:
            user.service_roles = self._check_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
        if body.get("projects") is not None:
            user.projects = self._memberships(body["projects"])
        if new_name:
            user.name = new_name
        user.modified_on = now_ns()
        if not self.store.update_user(user):
            if self.store.get_user(uuid=user.uuid) is None:
                raise AmsError.not_found("User")
            raise AmsError.invalid_data("invalid user name change, name already exists")
        return user

    def refresh_token(self, name: str) -> User:
        user = self.user(name)
        user.token = auth.new_token()
        user.modified_on = now_ns()
        if not self.store.update_user(user):
            raise AmsError.not_found("User")
        return user

    def delete_user(self, name: str) -> None:
        if not self.store.delete_user(self.user(name).uuid):
            raise AmsError.not_found("User")

    def list_users(self, project_name: str | None, page_size: str | None, page_token: str | None) -> Page[User]:
        project_uuid = None
        if project_name:
            project = self.store.get_project(name=project_name)
            if project is None:
                raise AmsError.not_found("ProjectUUID")
            project_uuid = project.uuid
        size, token = self._page_args(page_size, page_token)
        page: Page[User] = self._paged(self.store.list_users, project_uuid, size, token)
        return page

    # ----------------------------------------------------------------- members ----------
    def _roles_for(self, project: Project, body: dict[str, Any]) -> list[str] | None:
        raw = body.get("projects")
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise _BAD_USER
        found: list[str] | None = None
        for entry in raw:  # every entry must be well formed, not only the one for this project
            entry = as_object(entry, _BAD_USER)
            roles = opt_str_list(entry, "roles", _BAD_USER) or []
            if opt_str(entry, "project", _BAD_USER) == project.name and found is None:
                found = roles
        return None if found is None else self._check_roles(found)

    def create_member(self, caller: Caller, project: Project, name: str, body: Any) -> User:
        body = as_object({} if body is None else body, _BAD_USER)
        email = opt_str(body, "email", _BAD_USER) or ""
        roles = self._roles_for(project, body) or []
        return self._new_user(caller, name, email=email, projects=[Membership(project.uuid, roles)])

    def member(self, project: Project, name: str) -> User:
        user = self.store.get_user(name=name)
        if user is None or user.membership(project.uuid) is None:
            raise AmsError.not_found("User")
        return user

    def add_member(self, project: Project, name: str, body: Any) -> User:
        bad = AmsError.invalid_request_body()
        body = as_object(body if body is not None else {}, bad)
        roles = self._check_roles(opt_str_list(body, "roles", bad) or [])
        user = self.user(name)
        if user.membership(project.uuid) is not None:
            raise AmsError.generic_conflict("User is already a member of the project")
        user.projects.append(Membership(project.uuid, roles))
        user.modified_on = now_ns()
        self.store.update_user(user)
        return user

    def update_member(self, project: Project, name: str, body: Any) -> User:
        body = as_object(body, _BAD_USER)
        user = self.user(name)
        membership = user.membership(project.uuid)
        if membership is None:
            raise AmsError.forbidden("User is not a member of the project")
        roles = self._roles_for(project, body)
        if roles is None:
            raise _BAD_USER
        membership.roles = roles
        user.modified_on = now_ns()
        self.store.update_user(user)
        return user

    def remove_member(self, project: Project, name: str) -> None:
        user = self.user(name)
        if user.membership(project.uuid) is None:
            raise AmsError.forbidden("User is not a member of the project")
        user.projects = [m for m in user.projects if m.project_uuid != project.uuid]
        user.modified_on = now_ns()
        self.store.update_user(user)

    def list_members(self, project: Project, page_size: str | None, page_token: str | None) -> Page[User]:
        size, token = self._page_args(page_size, page_token)
        page: Page[User] = self._paged(self.store.list_users, project.uuid, size, token)
        return page

    # ----------------------------------------------------------------- ACLs -------------
    def _acl_users(self, project: Project, body: Any, what: str) -> list[str]:
        bad = AmsError.invalid_argument(f"{what} ACL")
        body = as_object(body, bad)
        if "authorized_users" not in body:
            raise bad
        names = opt_str_list(body, "authorized_users", bad) or []
        names = list(dict.fromkeys(names))
        found: list[str] = []
        missing: list[str] = []
        for name in names:
            # a name no user can have is not looked up (the store need not hold every string)
            user = self.store.get_user(name=name) if valid_name(name) else None
            if user is None or user.membership(project.uuid) is None:
                missing.append(name)
            else:
                found.append(user.uuid)
        if missing:
            raise AmsError(404, f"User(s): {', '.join(missing)} do not exist", "NOT_FOUND")
        return found

    def acl_names(self, uuids: list[str]) -> list[str]:
        users = self.store.get_users(uuids)
        return [users[u].name for u in uuids if u in users]

    def modify_topic_acl(self, project: Project, name: str, body: Any) -> None:
        topic = self.topic(project, name)
        topic.acl = self._acl_users(project, body, "Topic")
        self.store.update_topic(topic)

    def modify_sub_acl(self, project: Project, name: str, body: Any) -> None:
        sub = self.subscription(project, name)
        sub.acl = self._acl_users(project, body, "Subscription")
        self.store.update_subscription(sub)

    # ----------------------------------------------------------------- topics -----------
    def create_topic(self, project: Project, name: str, body: Any) -> Topic:
        bad = AmsError.invalid_request_body()
        body = as_object({} if body is None else body, bad)
        if not all(isinstance(v, str) for v in body.values()):
            raise bad
        schema_uuid = self.schema_by_ref(project, body["schema"]).uuid if body.get("schema") else ""
        topic = Topic(project.uuid, name, now_ns(), [], schema_uuid)
        self.log.create_topic(topic_key(project, name))
        if not self.store.create_topic(topic):
            raise AmsError.conflict("Topic")
        return topic

    def delete_topic(self, project: Project, name: str) -> None:
        if not self.store.delete_topic(project.uuid, name):
            raise AmsError.not_found("Topic")
        self.usage.forget(project.uuid, "topic", name)
        self.log.delete_topic(topic_key(project, name))

    def list_topics(
        self, caller: Caller, project: Project, page_size: str | None, page_token: str | None
    ) -> Page[Topic]:
        size, token = self._page_args(page_size, page_token)
        acl_user = self._filtered_for(caller, PUBLISHER)
        page: Page[Topic] = self._paged(self.store.list_topics, project.uuid, acl_user, size, token)
        return page

    def _messages(self, body: Any) -> list[NewMessage]:
        body = as_object(body, _BAD_MESSAGE)
        raw = body.get("messages")
        if not isinstance(raw, list):
            raise _BAD_MESSAGE
        limits = self.settings
        if len(raw) > limits.max_publish_messages:
            raise AmsError.invalid_data(
                f"Too many messages in one request (the limit is {limits.max_publish_messages})"
            )
        out: list[NewMessage] = []
        for index, item in enumerate(raw):
            item = as_object(item, _BAD_MESSAGE)
            data = item.get("data", "")
            attributes = item.get("attributes") or {}
            if not isinstance(data, str) or not isinstance(attributes, dict):
                raise _BAD_MESSAGE
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
                raise _BAD_MESSAGE
            if len(attributes) > limits.max_attributes:
                raise AmsError.invalid_data(
                    f"Message {index} has too many attributes (the limit is {limits.max_attributes})"
                )
            try:
                decoded = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise AmsError.invalid_data(f"Message {index} is not in valid base64 encoding") from exc
            if not decoded and not attributes:
                raise AmsError.invalid_data(f"Message {index} has neither data nor attributes")
            size = len(decoded) + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())
            if size > limits.max_message_bytes:
                raise AmsError.too_large()
            out.append(NewMessage(data, dict(attributes)))
        return out

    def publish(self, caller: Caller, project: Project, name: str, body: Any) -> list[str]:
        topic = self.topic(project, name)
        if self._acl_applies(caller, PUBLISHER) and caller.uuid not in topic.acl:
            raise AmsError.forbidden()
        messages = self._messages(body)
        compiled = self.compiled_schema_of(project, topic)
        if compiled is not None:
            for index, message in enumerate(messages):  # every message first: all or nothing
                schemas.validate_message(compiled, index, message.data)
        if not messages:
            return []
        stored = self.log.append(topic_key(project, name), messages)
        self.usage.published(project.uuid, name, len(stored), sum(len(m.data) for m in stored), now_ns())
        return [str(m.offset) for m in stored]

    # ----------------------------------------------------------------- subscriptions ----
    def _deadline(self, body: dict[str, Any], default: int | None) -> int:
        value = opt_int(body, "ackDeadlineSeconds", _BAD_DEADLINE)
        if value is None or value == 0:
            if default is None:
                return 0
            return default
        if not 0 <= value <= 600:
            raise _BAD_DEADLINE
        return value

    def create_subscription(self, project: Project, name: str, body: Any) -> Subscription:
        body = as_object(body, _BAD_SUB)
        ref = opt_str(body, "topic", _BAD_SUB) or ""
        parts = ref.split("/")
        if len(parts) != 4 or parts[0] != "projects" or parts[2] != "topics" or parts[1] != project.name:
            raise AmsError.invalid_name("Topic")
        deadline = self._deadline(body, self.settings.default_ack_deadline)
        config = push.parse(body.get("pushConfig"))
        if config.enabled and not self.settings.push_enabled:
            raise AmsError.generic_conflict("Push functionality is currently disabled")
        topic = self.topic(project, parts[3])
        _, start = self.log.bounds(topic_key(project, topic.name))
        sub = Subscription(project.uuid, name, topic.name, deadline, config, now_ns(), [])
        if active(sub):  # mattermost: delivered from the start
            self._activate(project, sub)
        if not self.store.create_subscription(sub, start):
            raise AmsError.conflict("Subscription")
        if active(sub):
            self.push_changed()
        return sub

    def delete_subscription(self, project: Project, name: str) -> str | None:
        """Delete; for an active push subscription, say that its delivery stopped."""
        sub = self.subscription(project, name)
        if not self.store.delete_subscription(project.uuid, name):
            raise AmsError.not_found("Subscription")
        self.usage.forget(project.uuid, "sub", name)
        self._forget_owner(project, name)
        if not active(sub):
            return None
        self.push_changed()
        return f"Subscription /projects/{project.name}/subscriptions/{name} deactivated"

    def list_subscriptions(
        self, caller: Caller, project: Project, page_size: str | None, page_token: str | None
    ) -> Page[Subscription]:
        size, token = self._page_args(page_size, page_token)
        acl_user = self._filtered_for(caller, CONSUMER)
        page: Page[Subscription] = self._paged(self.store.list_subscriptions, project.uuid, acl_user, size, token)
        return page

    def topic_subscriptions(self, project: Project, name: str) -> list[str]:
        self.topic(project, name)
        return self.store.subscriptions_of_topic(project.uuid, name)

    def modify_ack_deadline(self, project: Project, name: str, body: Any) -> None:
        body = as_object(body, _BAD_DEADLINE)
        if "ackDeadlineSeconds" not in body:
            raise _BAD_DEADLINE
        deadline = self._deadline(body, None)
        sub = self.subscription(project, name)
        sub.ack_deadline = deadline
        self.store.update_subscription(sub)

    def modify_push_config(self, project: Project, name: str, body: Any) -> None:
        body = as_object(body, _BAD_SUB)
        raw = body.get("pushConfig")
        if raw is not None and not isinstance(raw, dict):
            raise _BAD_SUB
        sub = self.subscription(project, name)
        config = push.parse(raw, sub.push)
        if config.enabled:
            self._check_push_enabled()
        was_active, was_push = active(sub), sub.push.enabled
        if was_active:
            self._deactivate(sub)
        sub.push = config
        if active(sub):  # mattermost, or the same endpoint, verified already
            self._activate(project, sub)
        self.store.update_subscription(sub)
        if config.enabled and not was_push:  # pulled until now: its owner lets go
            self._forget_owner(project, name)
        if was_active or active(sub):
            self.push_changed()

    # ----------------------------------------------------------------- pull and ack -----
    def _live_topic_key(self, project: Project, sub: Subscription) -> str:
        if self.store.get_topic(project.uuid, sub.topic) is None:
            raise AmsError.generic_conflict("Subscription's topic doesn't exist")
        return topic_key(project, sub.topic)

    def pull(self, caller: Caller, project: Project, name: str, body: Any) -> list[Delivery]:
        sub = self.subscription(project, name)
        if sub.push.enabled:
            if not self.settings.push_enabled and caller.has(PUSH_WORKER):
                raise AmsError.generic_conflict("Push functionality is currently disabled")
            if not (caller.has(PUSH_WORKER) or caller.is_service_admin):
                raise AmsError.forbidden()
        if self._acl_applies(caller, CONSUMER) and caller.uuid not in sub.acl:
            raise AmsError.forbidden()
        key = self._live_topic_key(project, sub)
        body = as_object(body, _BAD_PULL)
        max_messages = opt_int(body, "maxMessages", _BAD_PULL) or 1
        max_messages = min(max(max_messages, 1), self.settings.max_pull_messages)
        immediately = opt_bool(body, "returnImmediately", _BAD_PULL)
        wait = 0.0 if immediately else self.settings.pull_wait_seconds
        give_up = time.monotonic() + wait
        while True:
            marker = self.log.marker(key)
            messages = self._lease(project, sub, key, max_messages)
            if messages:
                self.usage.consumed(project.uuid, sub.name, len(messages), sum(len(m.data) for m in messages), now_ns())
                prefix = f"projects/{project.name}/subscriptions/{sub.name}:"
                return [Delivery(f"{prefix}{m.offset}", m) for m in messages]
            remaining = give_up - time.monotonic()
            if remaining <= 0 or self.stopping.is_set():
                return []
            self.log.wait_for_append(key, marker, remaining)

    def _lease(self, project: Project, sub: Subscription, key: str, max_messages: int) -> list[StoredMessage]:
        if self.owners is not None and not sub.push.enabled:
            return self._lease_owned(project, sub, key, max_messages)

        def lease(cursor: Cursor) -> tuple[Cursor | None, list[StoredMessage]]:
            for _ in range(3):  # retention may remove messages between bounds and read: look again
                low, high = self.log.bounds(key)
                now = now_ns()
                found = cur.next_free_range(cursor, low, high, now, max_messages)
                if found is None:
                    return None, []
                base, start, end = found
                messages = self.log.read(key, start, end, self.settings.max_pull_bytes)
                if messages and messages[0].offset == start:
                    return cur.with_lease(base, start, messages[-1].offset + 1, now, sub.ack_deadline), messages
            return None, []

        return self._cursor_op(project, sub, lease, durable=False)

    def _lease_owned(self, project: Project, sub: Subscription, key: str, max_messages: int) -> list[StoredMessage]:
        """As _lease, at the subscription's owner, without holding its cursor across the broker's
        round trips: the range is leased first, then read, then the lease is cut to what was read
        (other pulls meanwhile lease the ranges after it)."""
        assert self.owners is not None
        owned = f"{project.uuid}.{sub.name}"
        # What the log knows without asking the broker first; the broker is asked when that cuts
        # the lease short or finds nothing, or when the read shows it was out of date.
        known = self.log.known_bounds(key)
        tries = 3  # retention may remove messages between bounds and read: look again
        while tries > 0:
            exact = known is None
            low, high = known or self.log.bounds(key)
            known = None  # good for the first look only
            tries -= exact
            now = now_ns()

            def reserve(cursor: Cursor, low: int = low, high: int = high, now: int = now, exact: bool = exact) -> Any:
                found = cur.next_free_range(cursor, low, high, now, max_messages)
                if found is None:
                    return None, None
                base, start, end = found
                if not exact and end == high and end - start < max_messages:
                    return None, None  # the messages known here end too soon: ask the broker
                return cur.with_lease(base, start, end, now, sub.ack_deadline), (start, end)

            reserved: tuple[int, int] | None = self.owners.change(owned, reserve, durable=False)
            if reserved is None:
                if exact:
                    return []
                continue
            start, end = reserved
            try:
                messages = self.log.read(key, start, end, self.settings.max_pull_bytes)
            except Exception:
                self._trim_lease(owned, start, now, start)
                raise
            found = bool(messages) and messages[0].offset == start
            read_end = messages[-1].offset + 1 if found else start
            if read_end < end:
                self._trim_lease(owned, start, now, read_end)
            if found:
                return messages
        return []

    def _trim_lease(self, owned: str, start: int, delivered_ns: int, end: int) -> None:
        assert self.owners is not None
        self.owners.change(owned, lambda c: (cur.trim_lease(c, start, delivered_ns, end), None), durable=False)

    _ACK_ID = re.compile(r"^projects/([^/]+)/subscriptions/([^/:]+):(\d+)$")

    def acknowledge(self, project: Project, name: str, body: Any) -> None:
        sub = self.subscription(project, name)
        bad = AmsError.invalid_data("Invalid ack parameter")
        body = as_object(body, bad)
        ids = body.get("ackIds")
        if not isinstance(ids, list) or not ids:
            raise AmsError.invalid_data("Invalid ack id")
        offsets: list[int] = []
        for ack_id in ids:
            match = self._ACK_ID.match(ack_id) if isinstance(ack_id, str) else None
            if not match or match.group(1) != project.name or match.group(2) != sub.name:
                raise AmsError.invalid_data("Invalid ack id")
            offsets.append(int(match.group(3)))

        def ack(cursor: Cursor) -> tuple[Cursor | None, cur.AckError | None]:
            try:
                return cur.acknowledge(cursor, offsets, now_ns()), None
            except cur.AckError as exc:  # store what it dropped (expired leases), then report
                return (None if exc.cursor is cursor else exc.cursor), exc

        problem = self._cursor_op(project, sub, ack)
        if problem is None:
            return
        if problem.problem is cur.AckProblem.TIMEOUT:
            raise AmsError.timeout() from problem
        if problem.problem is cur.AckProblem.NO_PENDING:
            raise AmsError.generic_conflict("no ack pending") from problem
        raise AmsError.invalid_data("wrong ack") from problem

    # ----------------------------------------------------------------- offsets ----------
    def sub_offsets(self, project: Project, sub: Subscription) -> tuple[int, int, int]:
        """(min, max, current) of a subscription; a subscription behind the log's retention
        moves to the oldest message."""
        low, high = self.log.bounds(topic_key(project, sub.topic))

        def catch_up(cursor: Cursor) -> tuple[Cursor | None, int]:
            return (cur.normalize(cursor, low), low) if cursor.offset < low else (None, cursor.offset)

        return low, high, self._cursor_op(project, sub, catch_up, durable=False)

    def offsets(self, project: Project, name: str) -> dict[str, int]:
        low, high, current = self.sub_offsets(project, self.subscription(project, name))
        return {"max": high, "min": low, "current": current}

    def modify_offset(self, project: Project, name: str, body: Any) -> None:
        body = as_object(body, _BAD_OFFSET)
        offset = opt_int(body, "offset", _BAD_OFFSET)
        if offset is None:
            raise _BAD_OFFSET
        sub = self.subscription(project, name)
        low, high = self.log.bounds(topic_key(project, sub.topic))
        if not low <= offset <= high:
            raise AmsError.invalid_data("Offset out of bounds")
        # a fresh cursor: pending leases and out-of-order acks are cancelled
        self._cursor_op(project, sub, lambda c: (dataclasses.replace(c, offset=offset, leases=[], acked=[]), None))

    def time_to_offset(self, project: Project, name: str, when: str | None) -> int:
        sub = self.subscription(project, name)
        try:
            ns = parse_iso8601_ns(when or "")
        except ValueError as exc:
            raise AmsError.invalid_data("Time is not in valid Zulu format.") from exc
        ns = min(max(ns, _INT64[0]), _INT64[1])  # the log keeps 64-bit nanoseconds
        offset = self.log.offset_for_time(topic_key(project, sub.topic), ns)
        if offset is None:
            raise AmsError.generic_conflict("Timestamp is out of bounds for the subscription's topic/partition")
        return offset
