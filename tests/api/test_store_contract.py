"""The MetadataStore contract (ams_app/backends/store.py), pinned on both implementations alike.

Every test runs on the embedded SQLite store and on the MongoDB store (against FerretDB, the tests'
MongoDB-wire server), so that what the service does with one store it may do with the other: a create
refuses a taken name (or key); a get finds by each of its keys and answers None when there is nothing;
an update is read back, and refused when it would take another's name; a delete says whether it deleted
and takes with it what the Protocol says; listings come in their documented order, with pages whose
tokens continue where they left off; a subscription's cursor moves only by a compare-and-swap of its
version; usage counters add up. The stores' SnapshotStore (a Protocol of its own) is pinned here too."""

from __future__ import annotations

import base64
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from ams_app.backends.store import DailyUsage, InvalidPageToken, MetadataStore, SnapshotStore
from ams_app.models import (
    Lease,
    Membership,
    Project,
    PushConfig,
    Registration,
    Schema,
    SchemaRevision,
    Snapshot,
    Subscription,
    Topic,
    Usage,
    UsageBatch,
    User,
)
from tests.conftest import require_backend
from tests.helpers import either_store, unique


@pytest.fixture(params=["sqlite", "mongo"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "mongo":
        require_backend("kafka")  # its MongoDB-wire server
    with either_store(request.param, tmp_path, "ams_contract_test") as store:
        yield store


@pytest.fixture
def snapshots(store: MetadataStore) -> SnapshotStore:
    """The same store by its other job: both store classes implement both protocols (mypy checks
    that in each store's module)."""
    return cast(SnapshotStore, store)


def new_project(store: MetadataStore) -> Project:
    project = Project(unique("uuid"), unique("proj"), "a project", created_on=1, modified_on=1, created_by="creator")
    assert store.create_project(project)
    return project


def new_user(store: MetadataStore, *project_uuids: str, created_on: int = 0) -> User:
    user = User(
        unique("uuid"),
        unique("user"),
        unique("token"),
        email="someone@example.org",
        service_roles=[],
        projects=[Membership(p, ["consumer"]) for p in project_uuids],
        created_on=created_on,
    )
    assert store.create_user(user)
    return user


def new_topic(store: MetadataStore, project_uuid: str, *acl: str, created_on: int = 0) -> Topic:
    topic = Topic(project_uuid, unique("topic"), created_on, list(acl))
    assert store.create_topic(topic)
    return topic


def new_sub(
    store: MetadataStore, project_uuid: str, topic: str, *acl: str, start: int = 0, created_on: int = 0
) -> Subscription:
    sub = Subscription(project_uuid, unique("sub"), topic, created_on=created_on, acl=list(acl))
    assert store.create_subscription(sub, start)
    return sub


def new_schema(store: MetadataStore, project_uuid: str, name: str | None = None) -> Schema:
    body = {"$id": "https://example.org/s", "type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}
    schema = Schema(unique("uuid"), project_uuid, name or unique("schema"), "json", body)
    assert store.create_schema(schema)
    return schema


def new_snapshot(
    snapshots: SnapshotStore, project_uuid: str, subscription: str = "s", acked: list[tuple[int, int]] | None = None
) -> Snapshot:
    snapshot = Snapshot(project_uuid, unique("snap"), "t", subscription, 7, acked or [], 100, 200)
    assert snapshots.create_snapshot(snapshot)
    return snapshot


def token_of(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


# --- projects --------------------------------------------------------------------------------------
def test_a_project_is_read_back_by_name_and_by_uuid(store: MetadataStore) -> None:
    project = new_project(store)
    assert store.get_project(name=project.name) == project
    assert store.get_project(uuid=project.uuid) == project
    assert store.get_project(name=unique("proj")) is None
    assert store.get_project(uuid=unique("uuid")) is None


def test_a_taken_project_name_or_uuid_is_not_created_again(store: MetadataStore) -> None:
    project = new_project(store)
    assert not store.create_project(Project(unique("uuid"), project.name))
    assert not store.create_project(Project(project.uuid, unique("proj")))
    assert store.list_projects() == [project]


def test_projects_are_listed_oldest_first(store: MetadataStore) -> None:
    projects = [new_project(store) for _ in range(3)]
    assert store.list_projects() == projects


def test_a_renamed_project_is_read_back_and_frees_its_old_name(store: MetadataStore) -> None:
    project = new_project(store)
    renamed = dataclasses.replace(project, name=unique("proj"), description="renamed", modified_on=2)
    assert store.update_project(renamed)
    assert store.get_project(uuid=project.uuid) == renamed
    assert store.get_project(name=project.name) is None
    assert store.create_project(Project(unique("uuid"), project.name))


def test_a_project_is_not_renamed_onto_a_taken_name(store: MetadataStore) -> None:
    first, second = new_project(store), new_project(store)
    assert not store.update_project(dataclasses.replace(second, name=first.name, description="changed"))
    assert store.get_project(uuid=second.uuid) == second
    assert store.get_project(name=first.name) == first


def test_updating_a_missing_project_returns_false(store: MetadataStore) -> None:
    assert not store.update_project(Project(unique("uuid"), unique("proj")))
    assert store.list_projects() == []


def test_deleting_a_project_deletes_its_topics_subscriptions_schemas_and_cursors(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    topics = [new_topic(store, project.uuid) for _ in range(2)]
    sub = new_sub(store, project.uuid, topics[0].name)
    schema = new_schema(store, project.uuid)
    kept_topic = new_topic(store, other.uuid)
    kept_sub = new_sub(store, other.uuid, kept_topic.name)

    assert sorted(store.delete_project(project.uuid)) == sorted(t.name for t in topics)
    assert store.get_project(uuid=project.uuid) is None
    assert store.get_topic(project.uuid, topics[0].name) is None
    assert store.get_subscription(project.uuid, sub.name) is None
    assert store.get_cursor(project.uuid, sub.name) is None
    assert store.get_schema(project.uuid, uuid=schema.uuid) is None
    assert store.list_topics(project.uuid, None, 0, "").total_size == 0
    assert store.list_subscriptions(project.uuid, None, 0, "").total_size == 0
    assert store.get_topic(other.uuid, kept_topic.name) == kept_topic
    assert store.get_subscription(other.uuid, kept_sub.name) == kept_sub
    assert store.delete_project(project.uuid) == []  # a missing project: nothing to delete


def test_deleting_a_project_ends_its_memberships_and_acls(store: MetadataStore) -> None:
    gone, kept = new_project(store), new_project(store)
    user = new_user(store, gone.uuid, kept.uuid)
    topic = new_topic(store, gone.uuid, user.uuid)
    new_sub(store, gone.uuid, topic.name, user.uuid)
    kept_topic = new_topic(store, kept.uuid, user.uuid)

    store.delete_project(gone.uuid)
    stored = store.get_user(uuid=user.uuid)
    assert stored is not None
    assert stored.projects == [Membership(kept.uuid, ["consumer"])]
    assert store.list_users(gone.uuid, 0, "").items == []
    assert [u.uuid for u in store.list_users(kept.uuid, 0, "").items] == [user.uuid]
    assert store.acl_of_user(user.uuid) == [("topic", kept.uuid, kept_topic.name)]


# --- users -----------------------------------------------------------------------------------------
def test_a_user_is_read_back_by_name_uuid_and_token(store: MetadataStore) -> None:
    project = new_project(store)
    user = new_user(store, project.uuid)
    assert store.get_user(name=user.name) == user
    assert store.get_user(uuid=user.uuid) == user
    assert store.get_user(token=user.token) == user
    assert store.get_user(name=unique("user")) is None
    assert store.get_user(uuid=unique("uuid")) is None
    assert store.get_user(token=unique("token")) is None


def test_a_taken_user_name_token_or_uuid_is_not_created_again(store: MetadataStore) -> None:
    user = new_user(store)
    assert not store.create_user(User(unique("uuid"), user.name, unique("token")))
    assert not store.create_user(User(unique("uuid"), unique("user"), user.token))
    assert not store.create_user(User(user.uuid, unique("user"), unique("token")))
    assert store.list_users(None, 0, "").items == [user]


def test_a_new_token_finds_the_user_and_the_old_one_no_longer(store: MetadataStore) -> None:
    user = new_user(store)
    refreshed = dataclasses.replace(user, token=unique("token"), modified_on=5)
    assert store.update_user(refreshed)
    assert store.get_user(token=refreshed.token) == refreshed
    assert store.get_user(token=user.token) is None


def test_a_user_update_onto_a_taken_name_or_token_is_refused(store: MetadataStore) -> None:
    first, second = new_user(store), new_user(store)
    assert not store.update_user(dataclasses.replace(second, name=first.name))
    assert not store.update_user(dataclasses.replace(second, token=first.token))
    assert store.get_user(uuid=second.uuid) == second
    assert not store.update_user(User(unique("uuid"), unique("user"), unique("token")))  # none of that uuid


def test_get_users_answers_the_known_ones_by_uuid(store: MetadataStore) -> None:
    first, second = new_user(store), new_user(store)
    assert store.get_users([first.uuid, unique("uuid"), second.uuid]) == {first.uuid: first, second.uuid: second}
    assert store.get_users([]) == {}


def test_deleting_a_user_says_whether_it_deleted_and_drops_it_from_acls(store: MetadataStore) -> None:
    project = new_project(store)
    user, other = new_user(store, project.uuid), new_user(store, project.uuid)
    topic = new_topic(store, project.uuid, user.uuid, other.uuid)
    sub = new_sub(store, project.uuid, topic.name, other.uuid, user.uuid)

    assert store.delete_user(user.uuid)
    assert not store.delete_user(user.uuid)
    assert store.get_user(uuid=user.uuid) is None
    assert store.get_user(token=user.token) is None
    assert store.acl_of_user(user.uuid) == []
    assert store.get_topic(project.uuid, topic.name) == dataclasses.replace(topic, acl=[other.uuid])
    assert store.get_subscription(project.uuid, sub.name) == dataclasses.replace(sub, acl=[other.uuid])
    assert [u.uuid for u in store.list_users(project.uuid, 0, "").items] == [other.uuid]


def test_users_are_listed_newest_first_and_by_project_membership(store: MetadataStore) -> None:
    project = new_project(store)
    member, outsider, newer_member = new_user(store, project.uuid), new_user(store), new_user(store, project.uuid)
    everyone = store.list_users(None, 0, "")
    assert everyone.items == [newer_member, outsider, member]
    assert (everyone.total_size, everyone.next_page_token) == (3, "")
    members = store.list_users(project.uuid, 0, "")
    assert (members.items, members.total_size) == ([newer_member, member], 2)


def test_a_membership_change_moves_the_user_between_project_listings(store: MetadataStore) -> None:
    left, joined = new_project(store), new_project(store)
    user = new_user(store, left.uuid)
    assert store.update_user(dataclasses.replace(user, projects=[Membership(joined.uuid, ["publisher"])]))
    assert store.list_users(left.uuid, 0, "").items == []
    assert [u.projects for u in store.list_users(joined.uuid, 0, "").items] == [
        [Membership(joined.uuid, ["publisher"])]
    ]


# --- pages -----------------------------------------------------------------------------------------
def test_pages_follow_one_another_by_the_next_page_token(store: MetadataStore) -> None:
    users = [new_user(store) for _ in range(5)]
    newest_first = users[::-1]
    first = store.list_users(None, 2, "")
    assert (first.items, first.total_size) == (newest_first[:2], 5)
    assert first.next_page_token
    second = store.list_users(None, 2, first.next_page_token)
    assert (second.items, second.total_size) == (newest_first[2:4], 5)
    last = store.list_users(None, 2, second.next_page_token)
    assert (last.items, last.total_size, last.next_page_token) == (newest_first[4:], 5, "")
    exact = store.list_users(None, 5, "")
    assert (exact.items, exact.next_page_token) == (newest_first, "")  # no empty page after a full one


def test_a_page_token_continues_where_it_left_off_after_newer_items_came(store: MetadataStore) -> None:
    project = new_project(store)
    topics = [new_topic(store, project.uuid) for _ in range(4)]
    first = store.list_topics(project.uuid, None, 2, "")
    assert first.items == [topics[3], topics[2]]
    newer = new_topic(store, project.uuid)
    second = store.list_topics(project.uuid, None, 2, first.next_page_token)
    assert (second.items, second.next_page_token, second.total_size) == ([topics[1], topics[0]], "", 5)
    assert store.list_topics(project.uuid, None, 1, "").items == [newer]


@pytest.mark.parametrize("token", ["not-a-page-token", "%%%", token_of("hello"), token_of("-1")])
def test_an_invalid_page_token_is_refused_by_every_listing(
    store: MetadataStore, snapshots: SnapshotStore, token: str
) -> None:
    project = new_project(store)
    with pytest.raises(InvalidPageToken):
        snapshots.list_snapshots(project.uuid, 2, token)
    with pytest.raises(InvalidPageToken):
        store.list_users(None, 2, token)
    with pytest.raises(InvalidPageToken):
        store.list_topics(project.uuid, None, 2, token)
    with pytest.raises(InvalidPageToken):
        store.list_subscriptions(project.uuid, None, 2, token)
    with pytest.raises(InvalidPageToken):
        store.list_bindings(None, None, 2, token)


# --- topics ----------------------------------------------------------------------------------------
def test_a_taken_topic_name_is_not_created_again(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    topic = new_topic(store, project.uuid)
    assert not store.create_topic(Topic(project.uuid, topic.name, 99))
    assert store.get_topic(project.uuid, topic.name) == topic
    assert store.create_topic(Topic(other.uuid, topic.name))  # a name is the project's own


def test_a_topic_is_read_back_with_its_acl_and_schema(store: MetadataStore) -> None:
    project = new_project(store)
    schema = new_schema(store, project.uuid)
    topic = Topic(project.uuid, unique("topic"), 42, ["user-b", "user-a"], schema.uuid)
    assert store.create_topic(topic)
    assert store.get_topic(project.uuid, topic.name) == topic
    assert store.get_topic(project.uuid, unique("topic")) is None
    assert store.get_topic(unique("uuid"), topic.name) is None


def test_a_topic_acl_is_replaced_and_cleared_by_an_update(store: MetadataStore) -> None:
    project = new_project(store)
    topic = new_topic(store, project.uuid, "user-a")
    for acl in (["user-b", "user-c"], ["user-c"], []):
        assert store.update_topic(dataclasses.replace(topic, acl=acl))
        assert store.get_topic(project.uuid, topic.name) == dataclasses.replace(topic, acl=acl)
    assert store.acl_of_user("user-c") == []
    assert not store.update_topic(Topic(project.uuid, unique("topic"), acl=["user-a"]))  # none of that name
    assert store.acl_of_user("user-a") == []


def test_topics_are_listed_newest_first_and_by_acl_user(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    a = new_topic(store, project.uuid, "user-a")
    b = new_topic(store, project.uuid)
    c = new_topic(store, project.uuid, "user-b", "user-a")
    new_topic(store, other.uuid, "user-a")
    everything = store.list_topics(project.uuid, None, 0, "")
    assert (everything.items, everything.total_size) == ([c, b, a], 3)
    allowed = store.list_topics(project.uuid, "user-a", 0, "")
    assert (allowed.items, allowed.total_size) == ([c, a], 2)
    assert store.list_topics(project.uuid, "user-z", 0, "").items == []


def test_deleting_a_topic_says_whether_it_deleted_and_drops_its_acl_and_usage(store: MetadataStore) -> None:
    project = new_project(store)
    topic = new_topic(store, project.uuid, "user-a")
    store.add_usage(UsageBatch(topics={(project.uuid, topic.name): Usage(3, 30, 100, 1.0)}))
    assert store.delete_topic(project.uuid, topic.name)
    assert not store.delete_topic(project.uuid, topic.name)
    assert store.get_topic(project.uuid, topic.name) is None
    assert store.acl_of_user("user-a") == []
    assert store.usage("topic", project.uuid, topic.name) == Usage()
    assert store.create_topic(Topic(project.uuid, topic.name))  # the name is free again


# --- subscriptions ---------------------------------------------------------------------------------
def test_a_taken_subscription_name_is_not_created_again(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    sub = new_sub(store, project.uuid, "t", start=5)
    assert not store.create_subscription(Subscription(project.uuid, sub.name, "other-topic", 60), 9)
    assert store.get_subscription(project.uuid, sub.name) == sub
    cursor = store.get_cursor(project.uuid, sub.name)
    assert cursor is not None
    assert cursor.offset == 5
    assert store.create_subscription(Subscription(other.uuid, sub.name, "t"), 0)


def test_a_subscription_is_read_back_with_its_push_config_and_acl(store: MetadataStore) -> None:
    project = new_project(store)
    push = PushConfig(
        type="http_endpoint",
        push_endpoint="https://example.org/push",
        max_messages=3,
        authorization_type="autogen",
        authorization_value="secret",
        retry_type="linear",
        retry_period=300,
        verification_hash="hash",
        verified=True,
    )
    sub = Subscription(project.uuid, unique("sub"), "t", 30, push, 7, ["user-b", "user-a"])
    assert store.create_subscription(sub, 0)
    assert store.get_subscription(project.uuid, sub.name) == sub
    assert store.get_subscription(project.uuid, unique("sub")) is None


def test_a_subscription_update_is_read_back(store: MetadataStore) -> None:
    project = new_project(store)
    sub = new_sub(store, project.uuid, "t", "user-a")
    changed = dataclasses.replace(sub, ack_deadline=120, push=PushConfig(type="mattermost"), acl=["user-b"])
    assert store.update_subscription(changed)
    assert store.get_subscription(project.uuid, sub.name) == changed
    assert store.acl_of_user("user-a") == []
    assert not store.update_subscription(Subscription(project.uuid, unique("sub"), "t"))


def test_subscriptions_are_listed_newest_first_and_by_acl_user(store: MetadataStore) -> None:
    project = new_project(store)
    a = new_sub(store, project.uuid, "t", "user-a")
    b = new_sub(store, project.uuid, "t")
    c = new_sub(store, project.uuid, "u", "user-a")
    everything = store.list_subscriptions(project.uuid, None, 2, "")
    assert (everything.items, everything.total_size) == ([c, b], 3)
    assert store.list_subscriptions(project.uuid, None, 2, everything.next_page_token).items == [a]
    allowed = store.list_subscriptions(project.uuid, "user-a", 0, "")
    assert (allowed.items, allowed.total_size, allowed.next_page_token) == ([c, a], 2, "")


def test_subscriptions_of_a_topic_are_named_newest_first(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    first = new_sub(store, project.uuid, "t")
    new_sub(store, project.uuid, "u")
    second = new_sub(store, project.uuid, "t")
    new_sub(store, other.uuid, "t")
    assert store.subscriptions_of_topic(project.uuid, "t") == [second.name, first.name]
    assert store.subscriptions_of_topic(project.uuid, "none") == []


def test_push_subscriptions_are_those_with_a_push_type_in_every_project(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    pushed = new_sub(store, project.uuid, "t")
    new_sub(store, project.uuid, "t")
    assert store.update_subscription(dataclasses.replace(pushed, push=PushConfig(type="http_endpoint")))
    elsewhere = Subscription(other.uuid, unique("sub"), "t", push=PushConfig(type="mattermost"))
    assert store.create_subscription(elsewhere, 0)
    found = sorted(store.push_subscriptions(), key=lambda s: s.project_uuid == other.uuid)
    assert [(s.project_uuid, s.name, s.push.type) for s in found] == [
        (project.uuid, pushed.name, "http_endpoint"),
        (other.uuid, elsewhere.name, "mattermost"),
    ]


def test_deleting_a_subscription_deletes_its_cursor_acl_and_usage(store: MetadataStore) -> None:
    project = new_project(store)
    sub = new_sub(store, project.uuid, "t", "user-a")
    store.add_usage(UsageBatch(subs={(project.uuid, sub.name): Usage(3, 30, 100, 1.0)}))
    assert store.delete_subscription(project.uuid, sub.name)
    assert not store.delete_subscription(project.uuid, sub.name)
    assert store.get_subscription(project.uuid, sub.name) is None
    assert store.get_cursor(project.uuid, sub.name) is None
    assert store.acl_of_user("user-a") == []
    assert store.usage("sub", project.uuid, sub.name) == Usage()
    assert store.subscriptions_of_topic(project.uuid, "t") == []


def test_acl_of_user_names_every_topic_and_subscription_acl_by_name(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    store.create_topic(Topic(project.uuid, "b-topic", acl=["user-a", "user-b"]))
    store.create_topic(Topic(other.uuid, "d-topic", acl=["user-a"]))
    store.create_topic(Topic(project.uuid, "e-topic", acl=["user-b"]))
    store.create_subscription(Subscription(project.uuid, "a-sub", "b-topic", acl=["user-a"]), 0)
    store.create_subscription(Subscription(other.uuid, "c-sub", "d-topic", acl=["user-a"]), 0)
    assert store.acl_of_user("user-a") == [
        ("sub", project.uuid, "a-sub"),
        ("topic", project.uuid, "b-topic"),
        ("sub", other.uuid, "c-sub"),
        ("topic", other.uuid, "d-topic"),
    ]
    assert store.acl_of_user("user-z") == []


# --- snapshots -------------------------------------------------------------------------------------
def test_a_snapshot_is_read_back_with_its_acked_ranges(store: MetadataStore, snapshots: SnapshotStore) -> None:
    project, other = new_project(store), new_project(store)
    snapshot = Snapshot(project.uuid, unique("snap"), "t", "s", 40, [(42, 45), (50, 51)], 1_000, 2_000)
    assert snapshots.create_snapshot(snapshot)
    stored = snapshots.get_snapshot(project.uuid, snapshot.name)
    assert stored == snapshot
    assert stored is not None
    assert all(isinstance(r, tuple) for r in stored.acked)  # pairs, as the model has them
    bare = new_snapshot(snapshots, project.uuid)
    assert snapshots.get_snapshot(project.uuid, bare.name) == bare
    assert snapshots.get_snapshot(project.uuid, unique("snap")) is None
    assert snapshots.get_snapshot(other.uuid, snapshot.name) is None


def test_a_taken_snapshot_name_is_not_created_again(store: MetadataStore, snapshots: SnapshotStore) -> None:
    project, other = new_project(store), new_project(store)
    snapshot = new_snapshot(snapshots, project.uuid, acked=[(9, 10)])
    assert not snapshots.create_snapshot(Snapshot(project.uuid, snapshot.name, "u", "other-sub", 99, [(100, 101)]))
    assert snapshots.get_snapshot(project.uuid, snapshot.name) == snapshot
    assert snapshots.list_snapshots(project.uuid, 0, "").total_size == 1
    assert snapshots.create_snapshot(dataclasses.replace(snapshot, project_uuid=other.uuid))  # the project's own


def test_deleting_a_snapshot_says_whether_it_deleted_and_frees_its_name(
    store: MetadataStore, snapshots: SnapshotStore
) -> None:
    project = new_project(store)
    snapshot, kept = new_snapshot(snapshots, project.uuid), new_snapshot(snapshots, project.uuid)
    assert snapshots.delete_snapshot(project.uuid, snapshot.name)
    assert not snapshots.delete_snapshot(project.uuid, snapshot.name)
    assert not snapshots.delete_snapshot(project.uuid, unique("snap"))
    assert snapshots.get_snapshot(project.uuid, snapshot.name) is None
    assert snapshots.get_snapshot(project.uuid, kept.name) == kept
    assert snapshots.snapshots_of_subscription(project.uuid, "s") == [kept.name]
    assert snapshots.create_snapshot(snapshot)  # the name is free again


def test_snapshots_are_listed_newest_first_in_pages_by_project(store: MetadataStore, snapshots: SnapshotStore) -> None:
    project, other = new_project(store), new_project(store)
    made = [new_snapshot(snapshots, project.uuid, acked=[(10 + i, 11 + i)]) for i in range(5)]
    new_snapshot(snapshots, other.uuid)
    newest_first = made[::-1]
    everything = snapshots.list_snapshots(project.uuid, 0, "")
    assert (everything.items, everything.total_size, everything.next_page_token) == (newest_first, 5, "")
    first = snapshots.list_snapshots(project.uuid, 2, "")
    assert (first.items, first.total_size) == (newest_first[:2], 5)
    assert first.next_page_token
    newer = new_snapshot(snapshots, project.uuid)  # a token goes on from where it was made
    second = snapshots.list_snapshots(project.uuid, 2, first.next_page_token)
    assert (second.items, second.total_size) == (newest_first[2:4], 6)
    last = snapshots.list_snapshots(project.uuid, 2, second.next_page_token)
    assert (last.items, last.next_page_token) == (newest_first[4:], "")
    exact = snapshots.list_snapshots(project.uuid, 6, "")
    assert (exact.items, exact.next_page_token) == ([newer, *newest_first], "")
    nothing = snapshots.list_snapshots(unique("uuid"), 2, "")
    assert (nothing.items, nothing.total_size, nothing.next_page_token) == ([], 0, "")
    with pytest.raises(InvalidPageToken):  # a token this store did not make
        snapshots.list_snapshots(project.uuid, 2, token_of("a-token-of-another-store"))


def test_snapshots_of_a_subscription_are_named_newest_first(store: MetadataStore, snapshots: SnapshotStore) -> None:
    project, other = new_project(store), new_project(store)
    first = new_snapshot(snapshots, project.uuid, "s")
    new_snapshot(snapshots, project.uuid, "u")
    second = new_snapshot(snapshots, project.uuid, "s")
    new_snapshot(snapshots, other.uuid, "s")
    assert snapshots.snapshots_of_subscription(project.uuid, "s") == [second.name, first.name]
    assert snapshots.snapshots_of_subscription(project.uuid, "none") == []


def test_deleting_a_project_deletes_its_snapshots(store: MetadataStore, snapshots: SnapshotStore) -> None:
    project, other = new_project(store), new_project(store)
    gone = [new_snapshot(snapshots, project.uuid, acked=[(8, 9)]) for _ in range(2)]
    kept = new_snapshot(snapshots, other.uuid)
    store.delete_project(project.uuid)
    assert [snapshots.get_snapshot(project.uuid, s.name) for s in gone] == [None, None]
    assert snapshots.list_snapshots(project.uuid, 0, "").total_size == 0
    assert snapshots.snapshots_of_subscription(project.uuid, "s") == []
    assert snapshots.get_snapshot(other.uuid, kept.name) == kept
    assert snapshots.create_snapshot(gone[0])  # a project of that uuid again starts with none


# --- schemas ---------------------------------------------------------------------------------------
def test_a_taken_schema_name_is_not_created_again(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    schema = new_schema(store, project.uuid)
    assert not store.create_schema(Schema(unique("uuid"), project.uuid, schema.name, "avro", {"type": "record"}))
    assert store.list_schemas(project.uuid) == [schema]
    assert store.create_schema(Schema(unique("uuid"), other.uuid, schema.name, "json", {}))  # the project's own


def test_schemas_are_read_back_by_name_and_uuid_and_listed_oldest_first(store: MetadataStore) -> None:
    project, other = new_project(store), new_project(store)
    schemas = [new_schema(store, project.uuid) for _ in range(3)]
    assert store.get_schema(project.uuid, name=schemas[1].name) == schemas[1]
    assert store.get_schema(project.uuid, uuid=schemas[2].uuid) == schemas[2]
    assert store.get_schema(project.uuid, name=unique("schema")) is None
    assert store.get_schema(other.uuid, uuid=schemas[0].uuid) is None  # of another project
    assert store.list_schemas(project.uuid) == schemas
    assert store.list_schemas(other.uuid) == []


def test_a_schema_update_is_read_back_unless_its_new_name_is_taken(store: MetadataStore) -> None:
    project = new_project(store)
    first, second = new_schema(store, project.uuid), new_schema(store, project.uuid)
    renamed = dataclasses.replace(second, name=unique("schema"), schema={"type": "string"})
    assert store.update_schema(renamed)
    assert store.get_schema(project.uuid, uuid=second.uuid) == renamed
    assert store.get_schema(project.uuid, name=second.name) is None
    assert not store.update_schema(dataclasses.replace(renamed, name=first.name))
    assert store.get_schema(project.uuid, uuid=second.uuid) == renamed
    assert not store.update_schema(Schema(unique("uuid"), project.uuid, unique("schema"), "json", {}))


def with_revisions(schema: Schema) -> Schema:
    """``schema`` at a third revision: a protobuf one, after two JSON Schemas (whose keys are no
    MongoDB field names)."""
    earlier = [
        SchemaRevision("0000000b", 20, "json", {"$ref": "#/$defs/b", "$defs": {"b": {"type": "string"}}}),
        SchemaRevision("0000000a", 10, schema.type, schema.schema),
    ]
    proto = 'syntax = "proto3";\nmessage M { string a = 1; }\n'
    return dataclasses.replace(
        schema, type="protobuf", schema=proto, revision_id="0000000c", revision_created_ns=30, revisions=earlier
    )


def test_a_schemas_revisions_are_read_back_newest_first(store: MetadataStore) -> None:
    project = new_project(store)
    schema = with_revisions(new_schema(store, project.uuid))
    assert store.update_schema(schema)
    assert store.get_schema(project.uuid, uuid=schema.uuid) == schema
    assert store.get_schema(project.uuid, name=schema.name) == schema
    assert store.list_schemas(project.uuid) == [schema]
    created = with_revisions(Schema(unique("uuid"), project.uuid, unique("schema"), "avro", {"type": "string"}))
    assert store.create_schema(created)
    assert store.list_schemas(project.uuid) == [schema, created]


def test_a_schema_update_can_be_a_compare_and_set_on_its_current_revision(store: MetadataStore) -> None:
    project = new_project(store)
    schema = dataclasses.replace(new_schema(store, project.uuid), revision_id="0000000a")
    assert store.update_schema(schema)
    revised = with_revisions(schema)
    assert not store.update_schema(revised, expected_revision_id="0000000f")  # another got there first
    assert store.get_schema(project.uuid, uuid=schema.uuid) == schema
    assert store.update_schema(revised, expected_revision_id="0000000a")
    assert store.get_schema(project.uuid, uuid=schema.uuid) == revised
    assert not store.update_schema(dataclasses.replace(revised, name="x"), expected_revision_id="0000000a")
    assert store.get_schema(project.uuid, uuid=schema.uuid) == revised
    gone = Schema(unique("uuid"), project.uuid, unique("schema"), "json", {})
    assert not store.update_schema(gone, expected_revision_id="")
    # the compare-and-set still refuses a taken name
    other = new_schema(store, project.uuid)
    assert not store.update_schema(dataclasses.replace(revised, name=other.name), expected_revision_id="0000000c")
    assert store.get_schema(project.uuid, uuid=schema.uuid) == revised


def test_a_mongo_schema_written_before_revisions_reads_at_a_revision_of_its_own(tmp_path: Path) -> None:
    """A release before revisions wrote no revision: every node reads the same one (derived from the
    uuid, created when the document was), and a compare-and-set on it holds."""
    require_backend("kafka")
    from ams_app.backends.mongo.store import MongoMetadataStore, legacy_revision_id

    with either_store("mongo", tmp_path, "ams_contract_test") as store:
        mongo = cast(MongoMetadataStore, store)
        project = new_project(store)
        uuid = unique("uuid")
        doc = {"uuid": uuid, "project_uuid": project.uuid, "name": unique("schema"), "type": "json", "raw_schema": "{}"}
        mongo.db["schemas"].insert_one(doc)
        found = store.get_schema(project.uuid, uuid=uuid)
        assert found is not None
        assert (found.revision_id, found.revisions, found.schema) == (legacy_revision_id(uuid), [], {})
        assert abs(found.revision_created_ns - time.time_ns()) < 60 * 10**9
        assert store.list_schemas(project.uuid) == [found]
        earlier = SchemaRevision(found.revision_id, found.revision_created_ns, "json", {})
        revised = dataclasses.replace(found, schema={"type": "object"}, revision_id="0000000a", revisions=[earlier])
        assert not store.update_schema(revised, expected_revision_id="0000000f")
        assert store.update_schema(revised, expected_revision_id=found.revision_id)
        assert store.get_schema(project.uuid, uuid=uuid) == revised
        assert not store.update_schema(revised, expected_revision_id=found.revision_id)  # no longer at it


def test_a_topics_schema_encoding_is_read_back(store: MetadataStore) -> None:
    project = new_project(store)
    schema = new_schema(store, project.uuid)
    topic = Topic(project.uuid, unique("topic"), 1, [], schema.uuid, 0, "JSON")
    assert store.create_topic(topic)
    assert store.get_topic(project.uuid, topic.name) == topic
    topic.schema_encoding = "BINARY"
    assert store.update_topic(topic)
    assert store.get_topic(project.uuid, topic.name) == topic
    assert store.list_topics(project.uuid, None, 0, "").items == [topic]


def test_deleting_a_schema_detaches_it_from_its_topics(store: MetadataStore) -> None:
    project = new_project(store)
    schema, kept = new_schema(store, project.uuid), new_schema(store, project.uuid)
    using = Topic(project.uuid, unique("topic"), 1, ["user-a"], schema.uuid, 0, "JSON")
    other = Topic(project.uuid, unique("topic"), 2, [], kept.uuid, 0, "BINARY")
    assert store.create_topic(using)
    assert store.create_topic(other)
    assert store.delete_schema(project.uuid, schema.uuid)
    assert not store.delete_schema(project.uuid, schema.uuid)
    assert store.get_schema(project.uuid, uuid=schema.uuid) is None
    assert store.get_topic(project.uuid, using.name) == dataclasses.replace(using, schema_uuid="", schema_encoding="")
    assert store.get_topic(project.uuid, other.name) == other


# --- cursors ---------------------------------------------------------------------------------------
def test_a_new_cursor_is_at_the_start_offset_at_version_zero(store: MetadataStore) -> None:
    project = new_project(store)
    sub = new_sub(store, project.uuid, "t", start=17)
    cursor = store.get_cursor(project.uuid, sub.name)
    assert cursor is not None
    assert (cursor.offset, cursor.leases, cursor.acked, cursor.version) == (17, [], [], 0)
    assert store.get_cursor(project.uuid, unique("sub")) is None


def test_a_cursor_swap_from_the_read_version_is_stored_at_the_next_version(store: MetadataStore) -> None:
    project = new_project(store)
    sub = new_sub(store, project.uuid, "t")
    for version in range(3):
        read = store.get_cursor(project.uuid, sub.name)
        assert read is not None
        assert read.version == version
        moved = dataclasses.replace(
            read, offset=version + 1, leases=[Lease(version + 2, version + 5, 1000 + version, 10)], acked=[(20, 22)]
        )
        assert store.swap_cursor(project.uuid, sub.name, moved)
    stored = store.get_cursor(project.uuid, sub.name)
    assert stored is not None
    assert (stored.offset, stored.leases, stored.acked, stored.version) == (3, [Lease(4, 7, 1002, 10)], [(20, 22)], 3)


def test_a_stale_cursor_version_fails_and_changes_nothing(store: MetadataStore) -> None:
    project = new_project(store)
    sub = new_sub(store, project.uuid, "t", start=4)
    stale = store.get_cursor(project.uuid, sub.name)
    assert stale is not None
    winner = store.get_cursor(project.uuid, sub.name)
    assert winner is not None
    assert store.swap_cursor(project.uuid, sub.name, dataclasses.replace(winner, offset=6))
    assert not store.swap_cursor(project.uuid, sub.name, dataclasses.replace(stale, offset=99, acked=[(100, 101)]))
    stored = store.get_cursor(project.uuid, sub.name)
    assert stored is not None
    assert (stored.offset, stored.acked, stored.version) == (6, [], 1)


# --- registrations ---------------------------------------------------------------------------------
def test_a_registration_is_read_back_updated_and_deleted(store: MetadataStore) -> None:
    registration = Registration(unique("uuid"), unique("user"), "a@example.org", activation_token="t", registered_at=9)
    store.create_registration(registration)
    assert store.get_registration(registration.uuid) == registration
    assert store.get_registration(unique("uuid")) is None
    accepted = dataclasses.replace(registration, status="accepted", modified_by="admin", modified_at=10)
    assert store.update_registration(accepted)
    assert store.get_registration(registration.uuid) == accepted
    assert not store.update_registration(Registration(unique("uuid"), unique("user")))
    assert store.delete_registration(registration.uuid)
    assert not store.delete_registration(registration.uuid)
    assert store.get_registration(registration.uuid) is None


def test_registrations_are_listed_oldest_first_by_every_filter(store: MetadataStore) -> None:
    first = Registration(unique("uuid"), unique("user"), activation_token="a")
    second = Registration(unique("uuid"), unique("user"), status="declined", activation_token="b")
    third = Registration(unique("uuid"), unique("user"), activation_token="c")
    for registration in (first, second, third):
        store.create_registration(registration)
    assert store.list_registrations({}) == [first, second, third]
    assert store.list_registrations({"status": "pending"}) == [first, third]
    assert store.list_registrations({"status": "pending", "activation_token": "c"}) == [third]
    assert store.list_registrations({"name": second.name}) == [second]
    assert store.list_registrations({"name": unique("user")}) == []


# --- usage and metrics -----------------------------------------------------------------------------
def test_usage_counters_add_up_and_keep_the_latest_rate(store: MetadataStore) -> None:
    key = (unique("uuid"), "t")
    store.add_usage(UsageBatch(topics={key: Usage(3, 30, 100, 1.5)}, subs={key: Usage(1, 10, 100, 0.5)}))
    store.add_usage(UsageBatch(topics={key: Usage(2, 20, 200, 2.5)}))
    store.add_usage(UsageBatch(topics={key: Usage(1, 10, 150, 9.0)}))  # an older event: its rate does not win
    assert store.usage("topic", *key) == Usage(6, 60, 200, 2.5)
    assert store.usage("sub", *key) == Usage(1, 10, 100, 0.5)
    assert store.usage("topic", key[0], "other") == Usage()
    assert store.all_usage("topic") == [(*key, Usage(6, 60, 200, 2.5))]


def test_daily_messages_are_summed_newest_first_with_past_spark_figures_replacing(store: MetadataStore) -> None:
    project = unique("uuid")
    daily = {(project, "a", "2020-01-02"): 3, (project, "b", "2020-01-02"): 4, (project, "a", "2020-01-01"): 5}
    store.add_usage(UsageBatch(daily=daily))
    store.add_usage(UsageBatch(daily={(project, "a", "2020-01-02"): 1}))
    assert store.daily_messages(project, None, 7) == [("2020-01-02", 8), ("2020-01-01", 5)]
    assert store.daily_messages(project, "a", 1) == [("2020-01-02", 4)]
    store.replace_daily_usage("2020-01-01", [DailyUsage(project, "a", 50, 500)])
    assert store.daily_messages(project, "a", 7) == [("2020-01-02", 4), ("2020-01-01", 50)]
    assert store.daily_totals("2020-01-01", "2020-01-02") == {project: 58}
    assert store.daily_totals("2020-01-02", "2020-01-02") == {project: 8}


def test_created_between_counts_topics_subscriptions_and_members_in_the_window(store: MetadataStore) -> None:
    project = new_project(store)
    for created in (10, 20, 30):
        new_topic(store, project.uuid, created_on=created)
        new_sub(store, project.uuid, "t", created_on=created)
    new_user(store, project.uuid, created_on=15)
    new_user(store, project.uuid, created_on=40)
    new_user(store, created_on=20)  # no member
    assert store.created_between(project.uuid, 15, 30) == (2, 2, 1)
    assert store.created_between(project.uuid, 31, 39) == (0, 0, 0)


def test_node_metrics_are_kept_per_host_by_host_name(store: MetadataStore) -> None:
    store.put_node_metrics("node-b", 0.5, 0.25)
    store.put_node_metrics("node-a", 0.1, 0.2)
    store.put_node_metrics("node-b", 0.75, 0.5)
    assert store.node_metrics() == [("node-a", 0.1, 0.2), ("node-b", 0.75, 0.5)]
