"""What every part of AmsService shares: the backends, the settings and the lookups."""

from __future__ import annotations

import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, TypeVar

import gevent

from ams_app import auth
from ams_app.auth import Caller
from ams_app.backends.log import MessageLog
from ams_app.backends.store import MetadataStore
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Schema, Subscription, Topic, User
from ams_app.service.owner import Owners
from ams_app.settings import Settings
from ams_app.timeutil import now_ns

_SWAP_ATTEMPTS = 1000
_SWAP_SECONDS = 10.0
R = TypeVar("R")


def topic_key(project: Project, topic_name: str) -> str:
    """The log's name for a topic: ``{project uuid}.{topic}``, as the Kafka topic name."""
    return f"{project.uuid}.{topic_name}"


class ServiceBase:
    store: MetadataStore
    log: MessageLog
    settings: Settings
    owners: Owners | None = None

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
            return self.owners.change(f"{project.uuid}.{sub.name}", change, durable=durable)
        return self._change_cursor(project, sub.name, change)

    def _forget_owner(self, project: Project, name: str) -> None:
        if self.owners is not None:
            self.owners.forget(f"{project.uuid}.{name}")

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
