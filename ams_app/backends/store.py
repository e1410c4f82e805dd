"""MetadataStore: projects, users, topics, subscriptions and their cursors; SnapshotStore: the
subscriptions' snapshots. Storage is split by job: each job a Protocol of its own, which every
store class implements."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Literal, NamedTuple, Protocol, TypeVar

from ams_app.models import (
    Binding,
    Cursor,
    Project,
    Registration,
    Schema,
    ServiceType,
    Snapshot,
    Subscription,
    Topic,
    Usage,
    UsageBatch,
    User,
)

T = TypeVar("T")


class InvalidPageToken(ValueError):
    """A page token that this store did not make."""


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_page_token: str
    total_size: int


R = TypeVar("R")


def page_of(
    rows: Sequence[R], page_size: int, total: int, token_of: Callable[[R], str], build: Callable[[R], T]
) -> Page[T]:
    """A page from ``rows``, read in page order and at most ``page_size + 1`` of them (all, when
    ``page_size`` is 0): the first ``page_size`` are the page, and the next page's token is that
    of the row after them. Both stores page this way, by insertion order (the row's seq in SQLite,
    the document's ObjectId in MongoDB): a token goes on stepping from where it was made, whatever
    was added since."""
    next_token = ""
    if page_size > 0 and len(rows) > page_size:
        next_token = token_of(rows[page_size])
        rows = rows[:page_size]
    return Page([build(r) for r in rows], next_token, total)


#: The outcome of writing a binding: written, or which uniqueness rule it broke, or the binding to change is gone.
BindingWrite = Literal["ok", "name", "auth_identifier", "missing"]


def binding_identifiers(auth_identifiers: Sequence[str]) -> list[str]:
    """The spellings ``find_binding`` looks for: a lone string is one DN, not its characters."""
    return [auth_identifiers] if isinstance(auth_identifiers, str) else list(auth_identifiers)


class DailyUsage(NamedTuple):
    """One topic's figures of one day, as the Spark job ``usage_report`` writes them."""

    project_uuid: str
    topic: str
    messages: int
    bytes: int


DailyKey = tuple[str, str, str]  # (project uuid, topic, YYYY-MM-DD)


def utc_today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def merge_daily(
    live: Iterable[tuple[DailyKey, int]], spark: Iterable[tuple[DailyKey, int]], today: str
) -> dict[DailyKey, int]:
    """Messages per (project, topic, day): the live counters, except that a day before ``today``
    for which the Spark job wrote a figure of the topic takes that figure instead (it replaces the
    live count, never adds to it). Today, and any later day, always comes from the live counters."""
    merged: dict[DailyKey, int] = {}
    for key, n in live:
        merged[key] = merged.get(key, 0) + n
    for key, n in spark:
        if key[2] < today:
            merged[key] = n
    return merged


def daily_series(merged: dict[DailyKey, int], days: int) -> list[tuple[str, int]]:
    """(YYYY-MM-DD, messages) summed over the topics, the ``days`` most recent days, newest first."""
    counts: dict[str, int] = {}
    for (_, _, day), n in merged.items():
        counts[day] = counts.get(day, 0) + n
    return sorted(counts.items(), reverse=True)[:days]


def project_totals(merged: dict[DailyKey, int]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for (project_uuid, _, _), n in merged.items():
        totals[project_uuid] = totals.get(project_uuid, 0) + n
    return totals


class MetadataStore(Protocol):
    """Every call is atomic. ``create_*`` return False when the name is taken."""

    def ping(self) -> None: ...
    def close(self) -> None: ...

    # projects
    def create_project(self, project: Project) -> bool: ...
    def get_project(self, *, name: str | None = None, uuid: str | None = None) -> Project | None: ...
    def list_projects(self) -> list[Project]: ...
    def update_project(self, project: Project) -> bool: ...
    def delete_project(self, uuid: str) -> list[str]:
        """Delete the project, its topics, subscriptions, snapshots (SnapshotStore) and
        memberships; return topic names."""
        ...

    # users
    def create_user(self, user: User) -> bool: ...
    def get_user(
        self, *, name: str | None = None, uuid: str | None = None, token: str | None = None
    ) -> User | None: ...
    def get_users(self, uuids: list[str]) -> dict[str, User]: ...
    def update_user(self, user: User) -> bool: ...
    def delete_user(self, uuid: str) -> bool: ...
    def list_users(self, project_uuid: str | None, page_size: int, page_token: str) -> Page[User]: ...
    def acl_of_user(self, user_uuid: str) -> list[tuple[str, str, str]]:
        """(kind, project_uuid, name) of every topic ('topic') and subscription ('sub') ACL naming the user."""
        ...

    def reseal_tokens(self) -> int:
        """Seal every user's token kept in clear or under an older key under the keyring's primary
        key; how many users changed (ams_app/backends/user_tokens.py). TokenSealError: no keyring."""
        ...

    # topics
    def create_topic(self, topic: Topic) -> bool: ...
    def get_topic(self, project_uuid: str, name: str) -> Topic | None: ...
    def update_topic(self, topic: Topic) -> bool: ...
    def delete_topic(self, project_uuid: str, name: str) -> bool: ...
    def list_topics(self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str) -> Page[Topic]: ...

    # subscriptions
    def create_subscription(self, sub: Subscription, start_offset: int) -> bool: ...
    def get_subscription(self, project_uuid: str, name: str) -> Subscription | None: ...
    def update_subscription(self, sub: Subscription) -> bool: ...
    def delete_subscription(self, project_uuid: str, name: str) -> bool: ...
    def list_subscriptions(
        self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str
    ) -> Page[Subscription]: ...
    def subscriptions_of_topic(self, project_uuid: str, topic: str) -> list[str]: ...
    def push_subscriptions(self) -> list[Subscription]:
        """Every subscription with a push configuration, of every project."""
        ...

    # schemas
    def create_schema(self, schema: Schema) -> bool: ...
    def get_schema(self, project_uuid: str, *, name: str | None = None, uuid: str | None = None) -> Schema | None: ...
    def list_schemas(self, project_uuid: str) -> list[Schema]: ...
    def update_schema(self, schema: Schema, expected_revision_id: str | None = None) -> bool:
        """Write the schema (its name, content and revisions) over the stored one of its uuid.
        False when the (new) name is taken in the project, when there is no such schema, or, given
        ``expected_revision_id``, when the stored schema's current revision is another one (a
        compare-and-set: another write got there first)."""
        ...

    def delete_schema(self, project_uuid: str, uuid: str) -> bool:
        """Delete the schema and detach it from every topic that used it (their schema_encoding
        goes with it)."""
        ...

    # registrations
    def create_registration(self, registration: Registration) -> None: ...
    def get_registration(self, uuid: str) -> Registration | None: ...
    def list_registrations(self, filters: dict[str, str]) -> list[Registration]: ...
    def update_registration(self, registration: Registration) -> bool: ...
    def delete_registration(self, uuid: str) -> bool: ...

    # --- AuthN: service types and bindings (docs/authn.md) ---
    def create_service_type(self, service_type: ServiceType) -> bool:
        """False: the name is taken."""
        ...

    def get_service_type(self, *, name: str | None = None, uuid: str | None = None) -> ServiceType | None:
        """The service type of that name, else of that uuid; None when there is none."""
        ...

    def list_service_types(self) -> list[ServiceType]:
        """Every service type, in creation order."""
        ...

    def update_service_type(self, service_type: ServiceType) -> bool:
        """Replace the one of that uuid; False: another one has the name, or there is none."""
        ...

    def delete_service_type(self, uuid: str) -> bool:
        """Delete it and every binding of it; False: there was none."""
        ...

    def create_binding(self, binding: Binding) -> BindingWrite:
        """Insert it: "ok", or the rule broken: "name" (checked first), else "auth_identifier"."""
        ...

    def get_binding(self, name: str) -> Binding | None:
        """The binding of that name; None when there is none."""
        ...

    def list_bindings(
        self, service_uuid: str | None, host: str | None, page_size: int, page_token: str
    ) -> Page[Binding]:
        """Oldest first, of one service type and/or host when given; pages as ``list_users``."""
        ...

    def find_binding(
        self, service_uuid: str, host: str, auth_identifiers: Sequence[str], auth_type: str = "x509"
    ) -> Binding | None:
        """The binding whose DN is, byte for byte, any of ``auth_identifiers`` (one DN's spellings)."""
        ...

    def update_binding(self, name: str, binding: Binding) -> BindingWrite:
        """Replace the binding called ``name`` (renames it; keeps uuid, created_on); "missing": none."""
        ...

    def delete_binding(self, name: str) -> bool:
        """False: there was none of that name."""
        ...

    def record_binding_use(self, uuid: str, when: str) -> None:
        """Set the binding's last_auth to ``when``; nothing when there is no such binding."""
        ...

    # usage counters and operational metrics
    def add_usage(self, batch: UsageBatch) -> None:
        """Add the batch's counts atomically (increments; latest time and rate replace)."""
        ...

    def usage(self, kind: str, project_uuid: str, name: str) -> Usage:
        """Counters of a 'topic' or a 'sub'; zeros when there are none."""
        ...

    def all_usage(self, kind: str) -> list[tuple[str, str, Usage]]: ...
    def daily_messages(self, project_uuid: str, topic: str | None, days: int) -> list[tuple[str, int]]:
        """(YYYY-MM-DD, messages) of the most recent ``days`` days with traffic, newest first;
        of one topic, or summed over the project's topics when ``topic`` is None. Past days
        come from the Spark figures where there are some (``merge_daily``)."""
        ...

    def daily_totals(self, start: str, end: str) -> dict[str, int]:
        """project uuid -> messages published from day ``start`` to day ``end`` (inclusive),
        merged with the Spark figures like ``daily_messages``."""
        ...

    def replace_daily_usage(self, day: str, rows: list[DailyUsage]) -> None:
        """Make ``rows`` the Spark figures of ``day`` (``usage_daily``), as the Spark job does:
        figures of that day not in ``rows`` go. For tests; the service only reads them."""
        ...

    def created_between(self, project_uuid: str, start_ns: int, end_ns: int) -> tuple[int, int, int]:
        """(topics, subscriptions, member users) of the project created in [start_ns, end_ns]."""
        ...

    def put_node_metrics(self, hostname: str, cpu: float, memory: float) -> None: ...
    def node_metrics(self) -> list[tuple[str, float, float]]: ...

    # cursors: optimistic concurrency, so that many nodes can serve one subscription
    def get_cursor(self, project_uuid: str, name: str) -> Cursor | None: ...
    def swap_cursor(self, project_uuid: str, name: str, cursor: Cursor) -> bool:
        """Store ``cursor`` if the stored version still equals ``cursor.version``."""
        ...


class SnapshotStore(Protocol):
    """Snapshots of subscriptions (models.Snapshot), named per project. Not a part of MetadataStore,
    but both store classes implement it too; ``MetadataStore.delete_project`` deletes a project's
    snapshots with it. Every call is atomic."""

    def create_snapshot(self, snapshot: Snapshot) -> bool:
        """False: the project has a snapshot of that name."""
        ...

    def get_snapshot(self, project_uuid: str, name: str) -> Snapshot | None:
        """The project's snapshot of that name; None when there is none."""
        ...

    def delete_snapshot(self, project_uuid: str, name: str) -> bool:
        """False: there was none of that name."""
        ...

    def list_snapshots(self, project_uuid: str, page_size: int, page_token: str) -> Page[Snapshot]:
        """The project's snapshots, newest first, paged as ``list_topics`` (``page_of``; 0: all of
        them); ``total_size`` counts all of the project's. InvalidPageToken: a token this store did
        not make."""
        ...

    def snapshots_of_subscription(self, project_uuid: str, subscription: str) -> list[str]:
        """The names of the project's snapshots taken of ``subscription``, newest first."""
        ...
