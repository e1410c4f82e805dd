"""Snapshots and seek (docs/delivery.md): a subscription's acknowledgement state, kept under a
name, and a subscription moved back (or on) to a snapshot or to a time.

A snapshot keeps what the subscription has acknowledged: its offset and the acknowledged ranges
above it. Messages out with consumers, or given back, count as not acknowledged, so seeking to a
snapshot delivers them again. It lives as Pub/Sub's do: seven days less the age of the oldest
message it does not acknowledge (that message must still be in the log when the snapshot is used),
and never past the log's retention of that message; a snapshot whose oldest message would be gone
within the hour is refused.
"""

from __future__ import annotations

import dataclasses
from typing import cast

from ams_app.auth import Caller
from ams_app.backends.store import Page, SnapshotStore
from ams_app.errors import AmsError
from ams_app.models import Cursor, Project, Snapshot, Subscription
from ams_app.service import cursor as cur
from ams_app.service.base import ServiceBase, topic_key
from ams_app.service.requests import SeekTarget
from ams_app.timeutil import now_ns

NS = 1_000_000_000
#: How long a snapshot of a subscription with nothing waiting lives (Pub/Sub's seven days).
SNAPSHOT_LIFE_NS = 7 * 24 * 3600 * NS
#: A snapshot that would expire sooner than this after its creation is refused.
SNAPSHOT_MIN_LIFE_NS = 3600 * NS


def expiry_ns(oldest_unacked_ns: int, retention_s: int) -> int:
    """When a snapshot expires: seven days after the publication of the oldest message it does not
    acknowledge (its creation when there is none), and no later than that message leaves the log."""
    life = SNAPSHOT_LIFE_NS if retention_s <= 0 else min(SNAPSHOT_LIFE_NS, retention_s * NS)
    return oldest_unacked_ns + life


class SnapshotOps(ServiceBase):
    @property
    def _snapshots(self) -> SnapshotStore:
        return cast(SnapshotStore, self.store)  # both stores keep snapshots (ams_app/backends/store.py)

    def create_snapshot(self, caller: Caller, project: Project, name: str, sub_name: str) -> Snapshot:
        sub = self.subscription(project, sub_name)
        self._check_consumer(caller, sub)
        key = topic_key(project, sub.topic)
        low, high = self.log.bounds(key)
        # what the store holds: every acknowledgement is in it before it is answered (leases, which a
        # snapshot does not keep, may be only in an owner's memory)
        stored = self.store.get_cursor(project.uuid, sub.name)
        if stored is None:
            raise AmsError.not_found("Subscription")
        state = cur.normalize(stored, low)
        now = now_ns()
        oldest_ns = now
        if state.offset < high:
            oldest = self.log.peek(key, state.offset)
            oldest_ns = oldest.publish_ns if oldest is not None else now
        topic = self.store.get_topic(project.uuid, sub.topic)
        retention_s = self.settings.log_retention_seconds
        if topic is not None and topic.retention_s:
            retention_s = topic.retention_s
        expire = expiry_ns(oldest_ns, retention_s)
        if expire - now < SNAPSHOT_MIN_LIFE_NS:
            raise AmsError.generic_conflict(
                "The subscription's oldest unacknowledged message leaves the log within the hour: no snapshot"
            )
        snapshot = Snapshot(project.uuid, name, sub.topic, sub.name, state.offset, list(state.acked), now, expire)
        if not self._snapshots.create_snapshot(snapshot):
            raise AmsError.conflict("Snapshot")
        return snapshot

    def snapshot(self, project: Project, name: str) -> Snapshot:
        """The snapshot; an expired one is deleted and is not found."""
        found = self._snapshots.get_snapshot(project.uuid, name)
        if found is not None and found.expire_ns <= now_ns():
            self._snapshots.delete_snapshot(project.uuid, name)
            found = None
        if found is None:
            raise AmsError.not_found("Snapshot")
        return found

    def delete_snapshot(self, project: Project, name: str) -> None:
        self.snapshot(project, name)
        if not self._snapshots.delete_snapshot(project.uuid, name):
            raise AmsError.not_found("Snapshot")

    def list_snapshots(self, project: Project, page_size: str | None, page_token: str | None) -> Page[Snapshot]:
        """A page of the project's snapshots, newest first; expired ones are left out (and go when
        they are next looked up by name)."""
        size, token = self._page_args(page_size, page_token)
        page: Page[Snapshot] = self._paged(self._snapshots.list_snapshots, project.uuid, size, token)
        now = now_ns()
        return dataclasses.replace(page, items=[s for s in page.items if s.expire_ns > now])

    def seek(self, caller: Caller, project: Project, sub: Subscription, target: SeekTarget) -> None:
        """Move the subscription to a snapshot's acknowledgement state, or to a time: the messages
        published before it count as acknowledged, those at or after it as not (acknowledged ones
        included: they are in the log until its retention). Leases and messages given back are
        dropped: what is not acknowledged afterwards is delivered again."""
        self._check_consumer(caller, sub)
        key = topic_key(project, sub.topic)
        if target.snapshot:
            snapshot = self.snapshot(project, target.snapshot)
            if snapshot.topic != sub.topic:
                raise AmsError.invalid_data("The snapshot is of another topic than the subscription's")
            offset, acked = snapshot.offset, list(snapshot.acked)
        else:
            low, high = self.log.bounds(key)
            found = self.log.offset_for_time(key, target.time_ns)
            offset, acked = (high if found is None else max(found, low)), []

        def move(c: Cursor) -> tuple[Cursor, None]:
            return dataclasses.replace(c, offset=offset, acked=acked, leases=[], retries=[]), None

        self._cursor_op(project, sub, move)
