"""What every part of AmsService shares: the backends, the settings and the lookups."""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import gevent

from ams_app import auth
from ams_app.auth import CONSUMER, PROJECT_ADMIN, Caller
from ams_app.backends.log import MessageLog
from ams_app.backends.store import InvalidPageToken, MetadataStore
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Schema, Subscription, Topic, User, subscription_key
from ams_app.service.owner import Owners
from ams_app.service.usage import UsageCounters
from ams_app.service.validation import valid_name
from ams_app.settings import Settings
from ams_app.timeutil import now_ns

if TYPE_CHECKING:
    from ams_app.service.delivery import Backlog

_SWAP_ATTEMPTS = 1000
_SWAP_SECONDS = 10.0
R = TypeVar("R")
#: Largest page size honoured (a larger one lists everything anyway).
_MAX_PAGE_SIZE = 2**31 - 1


def topic_key(project: Project, topic_name: str) -> str:
    """The log's name for a topic: ``{project uuid}.{topic}``, as the Kafka topic name."""
    return f"{project.uuid}.{topic_name}"


def oldest_unacked_age(message_log: MessageLog, key: str, counts: Backlog, now_ns: int) -> float:
    """Seconds since the publication of a subscription's oldest unacknowledged message (0 with
    none), read aside (``MessageLog.peek``)."""
    if counts.total <= 0:
        return 0.0
    message = message_log.peek(key, counts.first)
    return max(0.0, (now_ns - message.publish_ns) / 1e9) if message is not None else 0.0


class ServiceBase:
    store: MetadataStore
    log: MessageLog
    settings: Settings
    owners: Owners | None = None
    usage: UsageCounters

    def project(self, name: str) -> Project:
        project = self.store.get_project(name=name)
        if project is None:
            raise AmsError.not_found("project")
        return project

    def topic(self, project: Project, name: str) -> Topic:
        topic = self.store.get_topic(project.uuid, name)
        if topic is None:
            raise AmsError.not_found("Topic")
        return topic

    def subscription(self, project: Project, name: str) -> Subscription:
        sub = self.store.get_subscription(project.uuid, name)
        if sub is None:
            raise AmsError.not_found("Subscription")
        return sub

    def user(self, name: str) -> User:
        user = self.store.get_user(name=name)
        if user is None:
            raise AmsError.not_found("User")
        return user

    def user_by_token(self, token: str) -> User:
        user = self.store.get_user(token=token)
        if user is None:
            raise AmsError.not_found("User")
        return user

    def user_by_uuid(self, uuid: str) -> User:
        user = self.find_user(uuid)
        if user is None:
            raise AmsError.not_found("User")
        return user

    def projects(self) -> list[Project]:
        return self.store.list_projects()

    def schemas(self, project: Project) -> list[Schema]:
        return self.store.list_schemas(project.uuid)

    # --- what the API's views look up (ams_app/api/views.py Directory): None when it is gone ----
    def find_user(self, uuid: str) -> User | None:
        return self.store.get_user(uuid=uuid)

    def find_project(self, uuid: str) -> Project | None:
        return self.store.get_project(uuid=uuid)

    def find_project_named(self, name: str) -> Project | None:
        return self.store.get_project(name=name)

    def acl_of_user(self, uuid: str) -> list[tuple[str, str, str]]:
        """(kind, project uuid, name) of every topic and subscription whose ACL holds the user."""
        return self.store.acl_of_user(uuid)

    def _acl_applies(self, caller: Caller, role: str) -> bool:
        return self.settings.per_resource_auth and not caller.is_service_token and caller.has(role)

    def _check_consumer(self, caller: Caller, sub: Subscription) -> None:
        """403 unless the caller may consume from ``sub`` (its ACL, where ACLs apply)."""
        if self._acl_applies(caller, CONSUMER) and caller.uuid not in sub.acl:
            raise AmsError.forbidden()

    def _new_user(self, caller: Caller, name: str, **fields: Any) -> User:
        now = now_ns()
        user = User(
            uuid=str(uuidlib.uuid4()),
            name=name,
            token=auth.new_token(),
            created_on=now,
            modified_on=now,
            created_by=caller.uuid,
            **fields,
        )
        if not self.store.create_user(user):
            raise AmsError.conflict("User")
        return user

    def _cursor_op(
        self,
        project: Project,
        sub: Subscription,
        change: Callable[[Cursor], tuple[Cursor | None, R]],
        *,
        durable: bool = True,
    ) -> R:
        """Apply ``change`` to the subscription's cursor: at its owner, in memory, when one node owns
        each pull subscription (consume_owner; ``durable`` waits for the store); otherwise in the
        store, with compare-and-swap."""
        if self.owners is not None and not sub.push.enabled:
            return self.owners.change(subscription_key(project.uuid, sub.name), change, durable=durable)
        return self._change_cursor(project, sub.name, change)

    def _forget_owner(self, project: Project, name: str) -> None:
        if self.owners is not None:
            self.owners.forget(subscription_key(project.uuid, name))

    def _change_cursor(self, project: Project, name: str, change: Callable[[Cursor], tuple[Cursor | None, R]]) -> R:
        """Apply ``change`` to the subscription's cursor atomically: it returns the new cursor
        (None: nothing to store) and a result. When another request got there first, try again
        after a short random pause (so that contenders spread out), for up to _SWAP_SECONDS."""
        give_up = time.monotonic() + _SWAP_SECONDS
        for attempt in range(_SWAP_ATTEMPTS):
            cursor = self.store.get_cursor(project.uuid, name)
            if cursor is None:
                raise AmsError.not_found("Subscription")
            updated, result = change(cursor)
            if updated is None or self.store.swap_cursor(project.uuid, name, updated):
                return result
            if time.monotonic() > give_up:
                break
            gevent.sleep(random.uniform(0, 0.005 * min(attempt + 1, 20)))
        raise AmsError.unavailable("The subscription is too busy, try again")

    # --- what the operations share: paging, list filters, ACL bodies -----------------------
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

    def _acl_users(self, project: Project, names: list[str]) -> list[str]:
        """The uuids of the named users, each a member of the project; 404 names the others."""
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
