"""Push subscriptions beyond their configuration: verification, activation, the push worker
user, what a worker reads and commits, and the status the API shows (docs/push.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Protocol

from ams_app.auth import PUSH_WORKER, SERVICE_CALLER
from ams_app.backends.log import StoredMessage
from ams_app.errors import AmsError
from ams_app.models import Cursor, Membership, Project, Subscription, User, subscription_key
from ams_app.service import cursor as cur
from ams_app.service.base import ServiceBase, topic_key
from ams_app.service.usage import UsageCounters
from ams_app.timeutil import now_ns
from ams_app.webhook import PushClient

UNAVAILABLE = "Push server is currently unavailable"


def push_key(project_uuid: str, sub_name: str) -> str:
    """A push subscription's name among the workers (a valid znode name)."""
    return subscription_key(project_uuid, sub_name)


def active(sub: Subscription) -> bool:
    """Delivered to: a push config that is verified (mattermost ones always are)."""
    return sub.push.enabled and sub.push.verified


class PushMonitor(Protocol):
    """The view of the push workers the service shows (ams_app/push/coordination.py provides it;
    the service does not import the push package, which drives the service)."""

    def workers(self) -> list[str]: ...

    def claims(self, keys: list[str]) -> dict[str, dict[str, object]]: ...


class PushOps(ServiceBase):
    usage: UsageCounters
    #: The claims of the push workers, for pushStatus and /v1/status; None: no view of them.
    push_monitor: PushMonitor | None = None
    #: Called after a push configuration changed, so that an in-process worker rescans now.
    push_listeners: list[Callable[[], None]]

    def push_changed(self) -> None:
        for listener in self.push_listeners:
            listener()

    # --- the push worker user -----------------------------------------------------------------
    def push_worker_user(self, create: bool = True) -> User | None:
        user = self.store.get_user(name=self.settings.push_worker_user)
        if user is None and create:
            try:
                user = self._new_user(SERVICE_CALLER, self.settings.push_worker_user, service_roles=[PUSH_WORKER])
            except AmsError:  # created by another node meanwhile
                user = self.store.get_user(name=self.settings.push_worker_user)
        return user

    def _check_push_enabled(self) -> User:
        if not self.settings.push_enabled:
            raise AmsError.generic_conflict("Push functionality is currently disabled")
        worker = self.push_worker_user()
        if worker is None:
            raise AmsError.internal_push()
        return worker

    def _activate(self, project: Project, sub: Subscription) -> None:
        """The push worker may read the subscription: in its ACL, a member of the project."""
        worker = self._check_push_enabled()
        if worker.uuid not in sub.acl:
            sub.acl = [*sub.acl, worker.uuid]
        if worker.membership(project.uuid) is None:
            worker.projects = [*worker.projects, Membership(project.uuid, [])]
            self.store.update_user(worker)

    def _deactivate(self, sub: Subscription) -> None:
        worker = self.push_worker_user(create=False)
        if worker is not None and worker.uuid in sub.acl:
            sub.acl = [u for u in sub.acl if u != worker.uuid]

    def verify_push_endpoint(self, project: Project, name: str) -> None:
        self._check_push_enabled()
        sub = self.subscription(project, name)
        if sub.push.type != "http_endpoint":
            raise AmsError.generic_conflict("Subscription is not in http push mode")
        if sub.push.verified:
            raise AmsError.generic_conflict("Push endpoint is already verified")
        client = PushClient(self.settings)
        try:
            failure = client.verification_failure(sub.push.push_endpoint, sub.push.verification_hash)
        finally:
            client.close()
        if failure is not None:
            raise AmsError.push_verification(failure)
        # re-read: the config may have changed while the endpoint answered
        current = self.subscription(project, name)
        if current.push != sub.push:
            raise AmsError.generic_conflict("The push configuration changed during the verification")
        current.push = dataclasses.replace(current.push, verified=True)
        self._activate(project, current)
        self.store.update_subscription(current)
        self.push_changed()

    # --- what workers read and commit ---------------------------------------------------------
    def active_push_subscriptions(self) -> list[tuple[Project, Subscription]]:
        projects: dict[str, Project | None] = {}
        out: list[tuple[Project, Subscription]] = []
        for sub in self.store.push_subscriptions():
            if not active(sub):
                continue
            if sub.project_uuid not in projects:
                projects[sub.project_uuid] = self.store.get_project(uuid=sub.project_uuid)
            project = projects[sub.project_uuid]
            if project is not None:
                out.append((project, sub))
        return out

    def push_fetch(self, project: Project, sub: Subscription, max_messages: int) -> tuple[int, list[StoredMessage]]:
        """The next messages of a subscription that this worker owns, from its first
        unacknowledged offset, without leases (nobody else delivers it); with the version of
        the cursor they were read at, for push_commit."""
        key = topic_key(project, sub.topic)
        low, high = self.log.bounds(key)
        cursor = self.store.get_cursor(project.uuid, sub.name)
        if cursor is None:
            raise AmsError.not_found("Subscription")
        start = cur.normalize(cursor, low).offset
        end = min(high, start + max(max_messages, 1))
        if start >= end:
            return cursor.version, []
        return cursor.version, self.log.read(key, start, end, self.settings.max_pull_bytes)

    def push_commit(self, project: Project, sub: Subscription, version: int, messages: list[StoredMessage]) -> bool:
        """Acknowledge delivered messages; False (nothing changes) when the cursor changed since
        they were read (modifyOffset: a replay), so that the worker reads again."""
        end = messages[-1].offset + 1

        def commit(cursor: Cursor) -> tuple[Cursor | None, bool]:
            if cursor.version != version:
                return None, False
            return cur.normalize(dataclasses.replace(cursor, offset=max(cursor.offset, end)), end), True

        done: bool = self._change_cursor(project, sub.name, commit)
        if done:
            self.usage.consumed(project.uuid, sub.name, len(messages), sum(len(m.data) for m in messages), now_ns())
        return done

    # --- what the API shows -----------------------------------------------------------------
    def push_status(self, project: Project, sub: Subscription, claims: dict[str, dict[str, object]] | None) -> str:
        """``pushStatus`` of a verified push subscription."""
        name = f"/projects/{project.name}/subscriptions/{sub.name}"
        if not self.settings.push_enabled:
            return "Push functionality is currently disabled"
        if claims is None:
            return UNAVAILABLE
        claim = claims.get(push_key(project.uuid, sub.name))
        if claim is None:
            return f"Subscription {name} is waiting for a push worker"
        active_on = f"Subscription {name} is currently active (push worker {claim.get('worker')})"
        failures = int(str(claim.get("failures", 0)))
        if failures:
            return f"{active_on}; the last {failures} deliveries failed, the latest with: {claim.get('error')}"
        return active_on

    def push_claims(self, project: Project, subs: list[Subscription]) -> dict[str, dict[str, object]] | None:
        """The workers' claims on ``subs`` (one read each); None when no worker is live."""
        if self.push_monitor is None or not self.push_monitor.workers():
            return None
        return self.push_monitor.claims([push_key(project.uuid, s.name) for s in subs])

    def push_servers(self) -> list[dict[str, str]]:
        if self.push_monitor is None:
            return []
        return [{"endpoint": worker, "status": "SERVING"} for worker in self.push_monitor.workers()]
