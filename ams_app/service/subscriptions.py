"""Subscriptions: create, delete, list, push configuration, ACLs; pull and acknowledge, offsets and
replay (docs/compatibility.md, "Delivery semantics" in README.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gevent.event import Event
from gevent.lock import Semaphore

from ams_app.auth import CONSUMER, PUSH_WORKER, Caller
from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Subscription, Topic, subscription_key
from ams_app.service import cursor as cur
from ams_app.service import delivery as dl
from ams_app.service import filters, push_config
from ams_app.service.base import topic_key
from ams_app.service.push import PushOps, active
from ams_app.service.push_config import PushRequest
from ams_app.service.requests import PUSH_PER_MESSAGE, AckRef, DeadlineChange, NewSubscription, PullRequest
from ams_app.service.usage import UsageCounters
from ams_app.timeutil import now_ns, parse_iso8601_ns, zulu_nanos

_INT64 = (-(2**63), 2**63 - 1)
#: Seconds a pull goes on reading while what it reads is all turned away by the filter (each read
#: acknowledges what it turned away, so the next reads further on).
_FILTER_READS_SECONDS = 0.5
#: How far past its first message an ordered pull reads, looking for keys that may go.
_ORDERED_WINDOW = 1000
_NO_LOCK = contextlib.nullcontext()
#: Attributes of a message published to a dead-letter topic, as Pub/Sub names them.
DEAD_LETTER_SOURCE = "CloudPubSubDeadLetterSourceSubscription"
DEAD_LETTER_SOURCE_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DEAD_LETTER_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
DEAD_LETTER_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"  # the original's publishTime
log = logging.getLogger("ams.delivery")


def _ack_id(prefix: str, offset: int, attempt: int | None) -> str:
    return f"{prefix}{offset}" if attempt is None else f"{prefix}{offset}.{attempt}"


@functools.lru_cache(maxsize=1024)
def _filter_of(text: str) -> Callable[[StoredMessage], bool]:
    if not text:
        return lambda message: True
    parsed = filters.parse(text)  # checked at create: it parses
    return lambda message: parsed.matches(message.attributes)


@dataclass
class Delivery:
    ack_id: str
    message: StoredMessage
    attempt: int | None = None  # shown as deliveryAttempt: on subscriptions with a dead-letter topic


class SubscriptionOps(PushOps):
    stopping: Event
    usage: UsageCounters
    _ordered_pulls: dict[str, Semaphore]  # per owned ordered subscription: one pull at a time
    publish: Callable[[Project, Topic, list[NewMessage]], list[str]]  # TopicOps's: the dead-letter hand-off

    def create_subscription(self, project: Project, name: str, request: NewSubscription) -> Subscription:
        deadline = self.settings.default_ack_deadline if request.ack_deadline is None else request.ack_deadline
        config = push_config.build(request.push)
        if config.enabled and not self.settings.push_enabled:
            raise AmsError.generic_conflict("Push functionality is currently disabled")
        topic = self.topic(project, request.topic)
        _, start = self.log.bounds(topic_key(project, topic.name))
        sub = Subscription(project.uuid, name, topic.name, deadline, config, now_ns(), [])
        self._delivery_policy(project, sub, request)
        if active(sub):  # mattermost: delivered from the start
            self._activate(project, sub)
        if not self.store.create_subscription(sub, start):
            raise AmsError.conflict("Subscription")
        if active(sub):
            self.push_changed()
        return sub

    def _delivery_policy(self, project: Project, sub: Subscription, request: NewSubscription) -> None:
        """The per-message delivery fields of a new subscription (docs/delivery.md). Its creator
        (a project or service admin) may publish to any topic of the project, the dead-letter
        topic included."""
        if request.retry is not None:
            sub.min_backoff_ms, sub.max_backoff_ms = request.retry.min_backoff_ms, request.retry.max_backoff_ms
        dead = request.dead_letter
        if dead is not None:
            if dead.project != project.name:
                raise AmsError.invalid_data("deadLetterPolicy.deadLetterTopic must be in the subscription's project")
            if self.store.get_topic(project.uuid, dead.topic) is None:
                raise AmsError.not_found("deadLetterPolicy.deadLetterTopic")
            sub.dead_letter_project, sub.dead_letter_topic = project.uuid, dead.topic
            sub.max_delivery_attempts = dead.max_delivery_attempts
        sub.filter, sub.ordered, sub.exactly_once = request.filter, request.ordered, request.exactly_once
        sub.retain_acked = request.retain_acked

    def update_subscription(self, project: Project, name: str, request: NewSubscription) -> Subscription:
        """Pub/Sub's UpdateSubscription (ams_app/pubsub/): the ack deadline, retry and dead-letter
        policies and retainAckedMessages become ``request``'s. Its topic, filter, ordering and
        exactly-once must be the subscription's: they do not change (the push configuration
        changes through ``modify_push_config``)."""
        sub = self.subscription(project, name)
        fixed = (sub.topic, sub.filter, sub.ordered, sub.exactly_once)
        if (request.topic, request.filter, request.ordered, request.exactly_once) != fixed:
            raise AmsError.invalid_data(
                "topic, filter, enableMessageOrdering and enableExactlyOnceDelivery cannot be changed"
            )
        if sub.push.enabled and (request.retry or request.dead_letter):
            raise AmsError.invalid_data(PUSH_PER_MESSAGE)
        sub.ack_deadline = self.settings.default_ack_deadline if request.ack_deadline is None else request.ack_deadline
        sub.min_backoff_ms = sub.max_backoff_ms = 0
        sub.dead_letter_project = sub.dead_letter_topic = ""
        sub.max_delivery_attempts = 0
        self._delivery_policy(project, sub, request)
        self.store.update_subscription(sub)
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

    def modify_ack_deadline(self, project: Project, name: str, change: DeadlineChange, received_ns: int) -> None:
        """Without ack ids: the subscription's deadline (0: the default). With them: the leases of
        those messages end ``seconds`` after the request came in; 0 gives them back (a nack).
        On an exactly-once subscription, ids that cannot be changed are named in a 400; on others
        they are passed over, as Pub/Sub does (a message acknowledged meanwhile has no lease)."""
        sub = self.subscription(project, name)
        if change.ack_ids is None:
            sub.ack_deadline = self.settings.default_ack_deadline if change.seconds is None else change.seconds
            self.store.update_subscription(sub)
            return
        refs = change.ack_ids
        policy = dl.policy_of(sub)
        seconds = change.seconds or 0
        failed = self._cursor_op(
            project,
            sub,
            lambda c: dl.modify_deadline(c, refs, seconds, received_ns, policy),
            durable=policy.exactly_once,
        )
        if seconds == 0 and len(failed) < len(refs):  # given back: deliverable now (or after backoff)
            self.log.wake(topic_key(project, sub.topic))
        self._refused_ids(project, sub, refs, failed)

    def _refused_ids(self, project: Project, sub: Subscription, refs: list[AckRef], failed: dict[int, str]) -> None:
        if failed and sub.exactly_once:
            prefix = f"projects/{project.name}/subscriptions/{sub.name}:"
            named = {_ack_id(prefix, *refs[index]): why for index, why in failed.items()}
            raise AmsError.ack_ids_refused(named, len(refs))

    def modify_push_config(self, project: Project, name: str, request: PushRequest | None) -> None:
        sub = self.subscription(project, name)
        config = push_config.build(request, sub.push)
        if config.enabled and sub.per_message:
            raise AmsError.invalid_data(PUSH_PER_MESSAGE)
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
        self._check_consumer(caller, sub)
        if self.store.get_topic(project.uuid, sub.topic) is None:
            raise AmsError.generic_conflict("Subscription's topic doesn't exist")
        return sub

    def pull(self, project: Project, sub: Subscription, request: PullRequest) -> list[Delivery]:
        """Lease up to maxMessages; without returnImmediately, wait up to pull_wait_seconds for
        the first message."""
        key = topic_key(project, sub.topic)
        max_messages = min(request.max_messages, self.settings.max_pull_messages)
        wait = self.settings.pull_wait_seconds if request.wait_seconds is None else request.wait_seconds
        give_up = time.monotonic() + (0.0 if request.return_immediately else wait)
        if request.ack_deadline is not None:
            sub = dataclasses.replace(sub, ack_deadline=request.ack_deadline)  # this pull's leases only
        if sub.per_message:
            return self._pull_per_message(project, sub, key, max_messages, give_up)
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

    # --- per-message delivery (docs/delivery.md; the rules in ams_app/service/delivery.py) ------
    def _pull_per_message(
        self, project: Project, sub: Subscription, key: str, max_messages: int, give_up: float
    ) -> list[Delivery]:
        policy = dl.policy_of(sub)
        wanted = _filter_of(sub.filter)
        prefix = f"projects/{project.name}/subscriptions/{sub.name}:"
        while True:
            marker = self.log.marker(key)
            if policy.max_attempts:
                self._hand_off_dead(project, sub, key, policy)
            reading_until = time.monotonic() + _FILTER_READS_SECONDS
            while True:
                found, filtered = self._deliver(project, sub, key, max_messages, policy, wanted)
                if found:
                    size = sum(len(m.data) for m, _ in found)
                    self.usage.consumed(project.uuid, sub.name, len(found), size, now_ns())
                    shown = sub.dead_letter
                    return [Delivery(_ack_id(prefix, m.offset, a), m, a if shown else None) for m, a in found]
                # nothing to deliver: read on only past what the filter turned away (held back by
                # ordering, the same read would find the same)
                if not filtered or time.monotonic() > reading_until:
                    break
            remaining = give_up - time.monotonic()
            if remaining <= 0 or self.stopping.is_set():
                return []
            # messages given back come due without an append: look again within a second
            self.log.wait_for_append(key, marker, min(remaining, 1.0))

    def _deliver(
        self,
        project: Project,
        sub: Subscription,
        key: str,
        max_messages: int,
        policy: dl.Policy,
        wanted: Callable[[StoredMessage], bool],
    ) -> tuple[list[tuple[StoredMessage, int]], bool]:
        """One reserve, read, finish: what it delivers, and whether the filter turned any away."""
        window = max(4 * max_messages, _ORDERED_WINDOW) if policy.ordered else max(2 * max_messages, 100)
        low, high = self.log.bounds(key)
        now = now_ns()
        durable = policy.exactly_once  # leases survive the owner: nobody else gets them meanwhile

        def reserve(c: Cursor) -> tuple[Cursor | None, dl.Reservation | None]:
            got = dl.reserve(c, low, high, now, max_messages, sub.ack_deadline, policy, window)
            return (None, None) if got is None else got

        def read(r: dl.Reservation) -> tuple[list[StoredMessage], list[dl.Read]]:
            messages = self.log.read(key, r.start, r.end, self.settings.max_pull_bytes)
            return messages, [dl.Read(m.offset, m.ordering_key, wanted(m)) for m in messages]

        messages: list[StoredMessage] = []
        reads: list[dl.Read] = []
        if self.owners is None or sub.push.enabled:  # compare-and-swap: all three in one change

            def whole(c: Cursor) -> tuple[Cursor | None, Any]:
                after, r = reserve(c)
                if after is None or r is None:
                    return None, None
                got, found = read(r)
                done, delivered = dl.finish(after, r, found, now, policy)
                return done, (got, found, delivered)

            result = self._cursor_op(project, sub, whole)
            if result is None:
                return [], False
            messages, reads, delivered = result
        else:
            owned = subscription_key(project.uuid, sub.name)
            lock = self._ordered_pulls.setdefault(owned, Semaphore()) if policy.ordered else _NO_LOCK
            with lock:  # ordered: what one pull learns of the keys, the next must know
                r = self.owners.change(owned, reserve, durable=durable)
                if r is None:
                    return [], False
                try:
                    messages, reads = read(r)
                finally:
                    delivered = self.owners.change(
                        owned, lambda c: dl.finish(c, r, reads, now, policy), durable=durable
                    )
        by_offset = {m.offset: m for m in messages}
        filtered = not delivered and any(not r.wanted for r in reads)
        return [(by_offset[offset], attempt) for offset, attempt in delivered], filtered

    def _hand_off_dead(self, project: Project, sub: Subscription, key: str, policy: dl.Policy) -> None:
        """Publish the messages out of attempts to the dead-letter topic, then acknowledge them:
        a failure between the two publishes them again later (at worst a duplicate, never a loss)."""
        dead = self._cursor_op(project, sub, lambda c: dl.take_dead(c, now_ns(), policy), durable=policy.exactly_once)
        if not dead:
            return
        target = self.store.get_topic(project.uuid, sub.dead_letter_topic)
        if target is None:  # deleted meanwhile (deletion is refused while named): they wait
            log.warning("dead-letter topic %s of %s is missing", sub.dead_letter_topic, sub.name)
            return
        handed: list[int] = []
        for r in dead:
            messages = self.log.read(key, r.start, r.end, 2**62)
            copies = [
                NewMessage(
                    m.data,
                    {
                        **m.attributes,
                        DEAD_LETTER_SOURCE: sub.name,
                        DEAD_LETTER_SOURCE_PROJECT: project.name,
                        DEAD_LETTER_COUNT: str(r.attempts),
                        DEAD_LETTER_PUBLISH_TIME: zulu_nanos(m.publish_ns),
                    },
                    m.ordering_key,
                )
                for m in messages
            ]
            try:
                self.publish(project, target, copies)
            except AmsError as exc:  # e.g. the copy breaks the topic's schema: it waits, and is logged
                log.warning("dead-lettering %d messages of %s: %s", len(copies), sub.name, exc.message)
                continue
            handed += list(range(r.start, r.end))  # those the log no longer has are let go with them
        if handed:
            self._cursor_op(project, sub, lambda c: (dl.handed_off(c, handed), None))

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
        owned = subscription_key(project.uuid, sub.name)
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

    def acknowledge(
        self,
        project: Project,
        sub: Subscription,
        refs: list[AckRef],
        received_ns: int,
        *,
        cumulative: bool,
        durable: bool = True,
    ) -> dict[int, str]:
        """Acknowledge the messages; in time when the request came in (``received_ns``) before its
        lease expired, however long it then waited (for a subscription's owner to change hands).

        Each id on its own (docs/delivery.md): what could not be taken is answered by index of
        ``refs``, and on an exactly-once subscription refused in a 400 that names the ids.
        ``cumulative`` is the AMS API's meaning, which its edge asks for on a plain subscription
        only: an ack id acknowledges the earlier messages of its pull too, and a wrong id fails
        the whole request as the original's did.

        ``durable`` (the AMS API's, and Pub/Sub's on an exactly-once subscription): answered once
        the store holds the acknowledgement. Without it (Pub/Sub's at-least-once, the gRPC API on
        other subscriptions; docs/pubsub.md), once the subscription's owner has applied it: it
        reaches the store within a fraction of a second, and an owner lost before that delivers
        those messages again."""
        if not cumulative:
            policy = dl.policy_of(sub)
            failed: dict[int, str] = self._cursor_op(
                project, sub, lambda c: dl.acknowledge(c, refs, received_ns, policy), durable=durable
            )
            if sub.ordered and len(failed) < len(refs):  # the next message of its key may go now
                self.log.wake(topic_key(project, sub.topic))
            self._refused_ids(project, sub, refs, failed)
            return failed
        offsets = [offset for offset, _ in refs]

        def ack(cursor: Cursor) -> tuple[Cursor | None, cur.AckError | None]:
            try:
                return cur.acknowledge(cursor, offsets, received_ns), None
            except cur.AckError as exc:  # store what it dropped (expired leases), then report
                return (None if exc.cursor is cursor else exc.cursor), exc

        problem = self._cursor_op(project, sub, ack)
        if problem is None:
            return {}
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
