"""Subscriptions: create, delete, list, push configuration, ACLs; pull and acknowledge, offsets and
replay (docs/compatibility.md, "Delivery semantics" in README.md)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from gevent.event import Event

from ams_app.auth import CONSUMER, PUSH_WORKER, Caller
from ams_app.backends.log import StoredMessage
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Subscription
from ams_app.service import cursor as cur
from ams_app.service import push_config
from ams_app.service.base import topic_key
from ams_app.service.push import PushOps, active
from ams_app.service.push_config import PushRequest
from ams_app.service.requests import NewSubscription, PullRequest
from ams_app.service.usage import UsageCounters
from ams_app.timeutil import now_ns, parse_iso8601_ns

_INT64 = (-(2**63), 2**63 - 1)


@dataclass
class Delivery:
    ack_id: str
    message: StoredMessage


class SubscriptionOps(PushOps):
    stopping: Event
    usage: UsageCounters

    def create_subscription(self, project: Project, name: str, request: NewSubscription) -> Subscription:
        deadline = self.settings.default_ack_deadline if request.ack_deadline is None else request.ack_deadline
        config = push_config.build(request.push)
        if config.enabled and not self.settings.push_enabled:
            raise AmsError.generic_conflict("Push functionality is currently disabled")
        topic = self.topic(project, request.topic)
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

    def modify_ack_deadline(self, project: Project, name: str, seconds: int) -> None:
        sub = self.subscription(project, name)
        sub.ack_deadline = seconds
        self.store.update_subscription(sub)

    def modify_push_config(self, project: Project, name: str, request: PushRequest | None) -> None:
        sub = self.subscription(project, name)
        config = push_config.build(request, sub.push)
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

    def set_subscription_acl(self, project: Project, sub: Subscription, names: list[str]) -> None:
        sub.acl = self._acl_users(project, names)
        self.store.update_subscription(sub)

    # --- pull and ack -------------------------------------------------------------------------
    def subscription_to_pull(self, caller: Caller, project: Project, name: str) -> Subscription:
        """The subscription, if the caller may pull from it and its topic still exists."""
        sub = self.subscription(project, name)
        if sub.push.enabled:
            if not self.settings.push_enabled and caller.has(PUSH_WORKER):
                raise AmsError.generic_conflict("Push functionality is currently disabled")
            if not (caller.has(PUSH_WORKER) or caller.is_service_admin):
                raise AmsError.forbidden()
        if self._acl_applies(caller, CONSUMER) and caller.uuid not in sub.acl:
            raise AmsError.forbidden()
        if self.store.get_topic(project.uuid, sub.topic) is None:
            raise AmsError.generic_conflict("Subscription's topic doesn't exist")
        return sub

    def pull(self, project: Project, sub: Subscription, request: PullRequest) -> list[Delivery]:
        """Lease up to maxMessages; without returnImmediately, wait up to pull_wait_seconds for
        the first message."""
        key = topic_key(project, sub.topic)
        max_messages = min(request.max_messages, self.settings.max_pull_messages)
        wait = 0.0 if request.return_immediately else self.settings.pull_wait_seconds
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

    def acknowledge(self, project: Project, sub: Subscription, offsets: list[int], received_ns: int) -> None:
        """Acknowledge ``offsets``; in time when the request came in (``received_ns``) before its
        lease expired, however long it then waited (for a subscription's owner to change hands)."""

        def ack(cursor: Cursor) -> tuple[Cursor | None, cur.AckError | None]:
            try:
                return cur.acknowledge(cursor, offsets, received_ns), None
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

    # --- offsets ------------------------------------------------------------------------------
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

    def modify_offset(self, project: Project, name: str, offset: int) -> None:
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
