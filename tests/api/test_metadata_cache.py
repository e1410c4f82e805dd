"""The nodes' metadata cache (ams_app/service/metacache.py, docs/production.md) over real ZooKeeper
and the MongoDB-wire server: lookups inside a request come from memory, and a change made through
any node is seen by the next request on every node.

Two layers: the cache itself in-process (two caches over one database stand for two nodes), and
two ``ams serve`` nodes over HTTP, where a change through one node must hold at once on the other."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from ams_app.backends.mongo.store import MongoMetadataStore
from ams_app.errors import AmsError
from ams_app.models import Project
from ams_app.service import metacache
from ams_app.service.metacache import MetadataCache
from ams_app.settings import Settings
from tests.conftest import require_backend
from tests.helpers import ClusterNode, b64, drop_database, load_tool, service_settings, unique

cluster_tool = load_tool("cluster")


class CountingStore(MongoMetadataStore):
    """The real store, counting the lookups that reach it."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reads: Counter[str] = Counter()

    def get_project(self, *, name: str | None = None, uuid: str | None = None) -> Project | None:
        self.reads["get_project"] += 1
        return super().get_project(name=name, uuid=uuid)


def node_cache(database: str, zookeeper_hosts: str | None = None) -> MetadataCache:
    found = service_settings()
    settings = Settings(
        backend="kafka",
        mongo_uri=found["AMS_MONGO_URI"],
        mongo_database=database,
        zookeeper_hosts=zookeeper_hosts or found["AMS_ZOOKEEPER_HOSTS"],
    )
    from kazoo.client import KazooClient

    # the threading handler: this test process is not monkey-patched as ``ams serve`` is
    client = KazooClient(hosts=settings.zookeeper_hosts, timeout=10.0, connection_retry={"max_tries": -1})
    cache = MetadataCache(settings, CountingStore(settings.mongo_uri, database), client=client)
    cache.start()
    return cache


@pytest.fixture
def two_nodes() -> Iterator[tuple[MetadataCache, MetadataCache]]:
    require_backend("kafka")  # outside CI a missing service skips; under CI=true it fails
    database = "ams_test_metacache_" + uuid.uuid4().hex[:10]
    a, b = node_cache(database), node_cache(database)
    try:
        yield a, b
    finally:
        a.client.delete(a.path)  # both nodes' generation: one znode
        for cache in (a, b):
            cache.close()
        drop_database(database)


def reads(cache: MetadataCache) -> int:
    return int(cache.inner.reads["get_project"])


def new_project(cache: MetadataCache, description: str = "first") -> Project:
    project = Project(uuid=str(uuid.uuid4()), name=unique("p"), description=description)
    assert cache.create_project(project)
    return project


def test_lookups_in_a_request_come_from_memory_and_as_copies(two_nodes: Any) -> None:
    a, _ = two_nodes
    project = new_project(a)
    with a.view():
        first = a.get_project(name=project.name)
        first.description = "changed by the caller, not stored"
    with a.view():
        again = a.get_project(name=project.name)
        missing = [a.get_project(name="nosuch") for _ in range(3)]
    assert reads(a) == 2  # the project once, the missing name once
    assert again.description == "first"
    assert missing == [None] * 3


def test_outside_a_request_every_lookup_reads_the_store(two_nodes: Any) -> None:
    a, _ = two_nodes
    project = new_project(a)
    for _ in range(3):
        assert a.get_project(name=project.name).description == "first"
    assert reads(a) == 3


def test_a_change_through_another_node_is_seen_by_the_next_request(two_nodes: Any) -> None:
    a, b = two_nodes
    project = new_project(a)
    for round_ in range(5):
        with a.view():
            seen = a.get_project(name=project.name)
        project.description = f"round {round_}"
        assert b.update_project(project)
        with a.view():
            assert a.get_project(name=project.name).description == f"round {round_}", seen
    b.delete_project(project.uuid)
    with a.view():
        assert a.get_project(name=project.name) is None


def test_a_request_reads_back_its_own_change(two_nodes: Any) -> None:
    a, _ = two_nodes
    project = new_project(a)
    with a.view():
        assert a.get_project(name=project.name).description == "first"
        project.description = "second"
        assert a.update_project(project)
        assert a.get_project(name=project.name).description == "second"


def test_a_lookup_that_raced_a_change_is_not_kept_for_later_requests(two_nodes: Any) -> None:
    a, b = two_nodes
    project = new_project(a)
    original = a.inner.get_project
    raced: list[bool] = []

    def lookup(**kwargs: Any) -> Project | None:
        found = original(**kwargs)
        if not raced:  # the first lookup read the store before a change that answers before it does
            raced.append(True)
            project.description = "changed meanwhile"
            assert b.update_project(project)
        return found

    a.__dict__.pop("get_project", None)  # the cache wraps the store's method when first asked for it
    a.inner.get_project = lookup
    with a.view():
        assert a.get_project(name=project.name).description == "first"
    with a.view():
        assert a.get_project(name=project.name).description == "changed meanwhile"


def test_without_zookeeper_a_change_is_refused_and_nothing_is_cached() -> None:
    require_backend("kafka")
    database = "ams_test_metacache_" + uuid.uuid4().hex[:10]
    cache = node_cache(database, zookeeper_hosts="127.0.0.1:1")  # nothing listens there
    cache.connect_seconds = 0.5
    try:
        project = Project(uuid=str(uuid.uuid4()), name=unique("p"))
        with pytest.raises(AmsError) as refused:
            cache.create_project(project)
        assert refused.value.code == 503
        with cache.view():
            assert cache.get_project(name=project.name) is None  # nothing was written
            assert cache.get_project(name=project.name) is None
        assert reads(cache) == 2  # and nothing came from memory
    finally:
        cache.close()
        drop_database(database)


def test_every_method_named_in_the_lists_is_a_store_method() -> None:
    from ams_app.backends.store import MetadataStore

    methods = {name for name in dir(MetadataStore) if not name.startswith("_")}
    assert methods >= metacache.CACHED
    assert methods >= metacache.PASSTHROUGH
    assert not metacache.CACHED & metacache.PASSTHROUGH


# --- two nodes over HTTP -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nodes() -> Iterator[list[ClusterNode]]:
    require_backend("kafka")
    database = "ams_test_metacache_http_" + uuid.uuid4().hex[:10]
    try:
        cluster = cluster_tool.start_cluster(nodes=2, database=database, env={"AMS_METADATA_CACHE": "true"})
        yield [ClusterNode(node.url, cluster.token) for node in cluster.nodes]
    finally:
        try:
            cluster_tool.stop_cluster()
        finally:
            drop_database(database)


@pytest.mark.slow
def test_changes_through_one_node_hold_at_once_on_the_other(nodes: list[ClusterNode]) -> None:
    one, other = nodes
    project = unique("mc")
    one.ok("POST", f"/projects/{project}", {})
    for round_ in range(10):
        topic, sub = unique("t"), unique("s")
        path = f"/projects/{project}/topics/{topic}"
        one.ok("PUT", path)
        other.ok("POST", f"{path}:publish", {"messages": [{"data": b64("warm")}]})  # cached on the other
        one.ok("PUT", f"/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/{topic}"})
        other.ok("GET", f"/projects/{project}/subscriptions/{sub}")
        one.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyAckDeadline", {"ackDeadlineSeconds": 77})
        assert other.ok("GET", f"/projects/{project}/subscriptions/{sub}")["ackDeadlineSeconds"] == 77, round_
        one.ok("DELETE", path)
        gone = other.request("POST", f"{path}:publish", {"messages": [{"data": b64("late")}]})
        assert gone.status_code == 404, (round_, gone.text)


@pytest.mark.slow
def test_a_refreshed_token_is_refused_at_once_on_the_other_node(nodes: list[ClusterNode]) -> None:
    one, other = nodes
    project = unique("mc")
    one.ok("POST", f"/projects/{project}", {})
    user = unique("u")
    token = one.ok("POST", f"/users/{user}", {"projects": [{"project": project, "roles": ["consumer"]}]})["token"]
    for round_ in range(10):
        assert other.request("GET", f"/projects/{project}/subscriptions", token=token).status_code == 200  # cached
        token_was = token
        token = one.ok("POST", f"/users/{user}:refreshToken")["token"]
        refused = other.request("GET", f"/projects/{project}/subscriptions", token=token_was)
        assert refused.status_code == 401, (round_, refused.text)
        assert other.request("GET", f"/projects/{project}/subscriptions", token=token).status_code == 200
