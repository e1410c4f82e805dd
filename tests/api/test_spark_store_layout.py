"""The Spark jobs read the metadata store's layout on the driver with pymongo (spark/common.py), not
through ams_app, which the cluster does not carry. These tests write through the MongoDB store
(ams_app/backends/mongo/store.py) on the real MongoDB-wire server and read back through the jobs'
readers, so that a change of the store's layout that the jobs do not follow fails here, in seconds,
and not only in the Spark pipeline test."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from ams_app.backends.mongo.store import MongoMetadataStore
from ams_app.models import Project, Subscription, Topic
from ams_app.service.base import topic_key
from spark import common
from tests.conftest import require_backend
from tests.helpers import scratch_mongo_store, unique


@pytest.fixture
def store() -> Iterator[MongoMetadataStore]:
    require_backend("kafka")
    with scratch_mongo_store("ams_layout_test") as s:
        yield s


def advance(store: MongoMetadataStore, project_uuid: str, name: str, offset: int) -> None:
    cursor = store.get_cursor(project_uuid, name)
    assert cursor is not None
    assert store.swap_cursor(project_uuid, name, dataclasses.replace(cursor, offset=offset))


def test_the_jobs_read_projects_topics_and_committed_offsets_as_the_store_wrote_them(
    store: MongoMetadataStore,
) -> None:
    project = Project(unique("uuid"), "ARGO")
    assert store.create_project(project)
    assert store.create_topic(Topic(project.uuid, "alerts"))
    assert store.create_topic(Topic(project.uuid, "quiet"))
    assert store.create_subscription(Subscription(project.uuid, "s1", "alerts"), 5)
    assert store.create_subscription(Subscription(project.uuid, "s2", "quiet"), 0)
    for offset in (6, 8, 12):
        advance(store, project.uuid, "s1", offset)

    db = store.db
    assert common.read_projects(db) == {project.uuid: "ARGO"}
    assert sorted(common.read_topics(db)) == [(project.uuid, "alerts"), (project.uuid, "quiet")]
    assert sorted(common.read_subscriptions(db), key=lambda s: s.name) == [
        common.SubscriptionState(project.uuid, "s1", "alerts", committed=12, start_offset=5),
        common.SubscriptionState(project.uuid, "s2", "quiet", committed=0, start_offset=0),
    ]
    # the jobs name a topic's Kafka topic as the service does
    assert common.topic_key(project.uuid, "alerts") == topic_key(project, "alerts")


def test_a_cursor_whose_history_was_swept_still_reads_its_committed_offset(store: MongoMetadataStore) -> None:
    """The store's sweep keeps a quiet cursor's last two versions: the first (the offset the
    subscription started at) goes, and the jobs read that as unknown, not as zero."""
    project = Project(unique("uuid"), "ARGO")
    assert store.create_project(project)
    assert store.create_subscription(Subscription(project.uuid, "s", "alerts"), 3)
    for offset in range(4, 10):
        advance(store, project.uuid, "s", offset)
    sub = store.db["subscriptions"].find_one({"name": "s"})
    assert sub is not None
    cursor_id = sub["cursor_id"]
    store.db["cursors"].update_many({"cursor_id": cursor_id}, {"$set": {"at": 0}})  # quiet for long
    assert store.tidy_cursor(cursor_id) > 0
    assert common.read_subscriptions(store.db) == [
        common.SubscriptionState(project.uuid, "s", "alerts", committed=9, start_offset=None)
    ]
