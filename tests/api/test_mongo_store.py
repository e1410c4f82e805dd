"""The MongoDB store against the real MongoDB-wire server (FerretDB): its cursor compare-and-swap,
and its layout version.

These pin the property the cluster relies on: of concurrent writers moving a subscription's
cursor from one version, exactly one wins; and a writer holding an old read never wins. And what
an upgrade relies on: a database records its layout version, a newer one is refused before
anything is written, and so is the original ARGO AMS's database."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ams_app import __version__
from ams_app.backends.errors import LayoutRefused
from ams_app.backends.mongo.store import LAYOUT_COLLECTION, LAYOUT_VERSION, MongoMetadataStore, layout_version
from ams_app.models import Subscription
from tests.conftest import require_backend
from tests.helpers import database_state, run_ams, scratch_mongo_store, service_settings, unique


@pytest.fixture
def store() -> Iterator[MongoMetadataStore]:
    require_backend("kafka")
    with scratch_mongo_store("ams_store_test") as s:
        yield s


def test_concurrent_swaps_have_one_winner_per_version(store: MongoMetadataStore) -> None:
    assert store.create_subscription(Subscription("p", "s", "t"), 0)
    wins: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(40):
            cursor = store.get_cursor("p", "s")
            assert cursor is not None
            if store.swap_cursor("p", "s", dataclasses.replace(cursor, offset=cursor.offset + 1)):
                with lock:
                    wins.append(cursor.version + 1)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    final = store.get_cursor("p", "s")
    assert final is not None
    assert sorted(wins) == list(range(1, len(wins) + 1))  # every version won exactly once
    assert (final.version, final.offset) == (len(wins), len(wins))  # no update lost


def test_a_stale_read_never_wins(store: MongoMetadataStore) -> None:
    assert store.create_subscription(Subscription("p", "s", "t"), 0)
    old = store.get_cursor("p", "s")
    assert old is not None
    for _ in range(40):  # others move on; cleaning up history along the way
        current = store.get_cursor("p", "s")
        assert current is not None
        assert store.swap_cursor("p", "s", dataclasses.replace(current, offset=current.offset + 1))
    # the old read's next version exists: a plain collision
    assert not store.swap_cursor("p", "s", dataclasses.replace(old, offset=99))
    # a read too old to prove anything is refused outright
    aged = store.get_cursor("p", "s")
    assert aged is not None
    aged.store_mark = dataclasses.replace(aged.store_mark, read_at=time.monotonic() - 3600)
    assert not store.swap_cursor("p", "s", dataclasses.replace(aged, offset=99))
    final = store.get_cursor("p", "s")
    assert final is not None
    assert (final.version, final.offset) == (40, 40)


def test_a_recreated_subscription_starts_a_fresh_cursor(store: MongoMetadataStore) -> None:
    assert store.create_subscription(Subscription("p", "s", "t"), 5)
    cursor = store.get_cursor("p", "s")
    assert cursor is not None
    assert store.swap_cursor("p", "s", dataclasses.replace(cursor, offset=7))
    assert store.delete_subscription("p", "s")
    assert store.get_cursor("p", "s") is None
    store.swap_cursor("p", "s", dataclasses.replace(cursor, offset=9))  # a late writer of the deleted one
    assert store.create_subscription(Subscription("p", "s", "t"), 2)
    fresh = store.get_cursor("p", "s")
    assert fresh is not None
    assert (fresh.offset, fresh.version) == (2, 0)  # the late write went to the old cursor, read by nobody


def test_a_quiet_cursor_keeps_only_its_last_two_versions(
    store: MongoMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Versions a cursor's last writes left behind go once it has been quiet for the keep time
    (shortened here); the clean-up during writes alone left them for ever on a drained
    subscription, and FerretDB scanned them on every later commit."""
    from ams_app.backends.mongo import store as module

    monkeypatch.setattr(module, "_KEEP_SECONDS", 0.5)
    monkeypatch.setattr(module, "_TIDY_EVERY_SECONDS", 0.2)
    assert store.create_subscription(Subscription("p", "s", "t"), 0)
    for offset in range(1, 41):  # 40 versions, one clean-up among them (every 32)
        cursor = store.get_cursor("p", "s")
        assert cursor is not None
        assert store.swap_cursor("p", "s", dataclasses.replace(cursor, offset=offset))
    key = cursor.store_mark.cursor_id

    def versions() -> list[int]:
        return sorted(int(d["version"]) for d in store.db["cursors"].find({"cursor_id": key}, {"version": 1}))

    assert len(versions()) > 2
    deadline = time.monotonic() + 20
    while versions() != [39, 40] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert versions() == [39, 40]
    final = store.get_cursor("p", "s")
    assert final is not None
    assert (final.offset, final.version) == (40, 40)
    assert store.tidy_cursor(key) == 0  # the last two always stay


# --- the layout version (docs/production.md, "Upgrading") ------------------------------------------
@pytest.fixture
def database() -> Iterator[Any]:
    """An empty database of its own on the tests' MongoDB-wire server, dropped on the way out."""
    require_backend("kafka")
    client: MongoClient[dict[str, Any]] = MongoClient(
        service_settings()["AMS_MONGO_URI"], serverSelectionTimeoutMS=10_000
    )
    name = unique("ams_layout").replace("-", "_")
    try:
        yield client[name]
    finally:
        client.drop_database(name)
        client.close()


def _open(db: Any) -> MongoMetadataStore:
    return MongoMetadataStore(service_settings()["AMS_MONGO_URI"], db.name, 10)


def test_a_new_database_records_the_layout_version_and_opens_again(database: Any) -> None:
    _open(database).close()
    assert layout_version(database) == LAYOUT_VERSION
    assert database[LAYOUT_COLLECTION].find_one({"_id": "layout"})["release"] == __version__
    _open(database).close()  # its own version: opened as it is
    assert database[LAYOUT_COLLECTION].count_documents({}) == 1


def test_a_database_of_a_release_before_versions_is_of_the_first(database: Any) -> None:
    store = _open(database)
    assert store.create_subscription(Subscription("p", "s", "t"), 3)
    store.close()
    database.drop_collection(LAYOUT_COLLECTION)  # as a release before versions left it
    store = _open(database)
    try:
        assert layout_version(database) == LAYOUT_VERSION
        assert store.get_subscription("p", "s") is not None  # and nothing of it changed
    finally:
        store.close()


def test_a_newer_layout_is_refused_before_anything_is_written(database: Any) -> None:
    database[LAYOUT_COLLECTION].insert_one({"_id": "layout", "version": LAYOUT_VERSION + 1, "release": "9.0.0"})
    before = database_state(database)
    with pytest.raises(LayoutRefused, match=f"layout version {LAYOUT_VERSION + 1}, this release of ams knows"):
        _open(database)
    assert database_state(database) == before


def test_the_original_servers_database_is_refused_and_left_as_it_was(database: Any) -> None:
    """A database in the Go server's layout (its own collection names): no index, no version, nothing
    of ours is written to it."""
    database["projects"].insert_one({"uuid": "u1", "name": "ARGO", "description": ""})
    database["users"].insert_one({"uuid": "u2", "name": "alice", "token": "t" * 64, "projects": []})
    database["daily_topic_msg_count"].insert_one({"project_uuid": "u1", "topic_name": "t", "msg_count": 3})
    before = database_state(database)
    with pytest.raises(LayoutRefused, match="original ARGO AMS's layout"):
        _open(database)
    assert database_state(database) == before


def test_ams_stops_with_the_reason_on_a_newer_layout(database: Any, tmp_path: Path) -> None:
    database[LAYOUT_COLLECTION].insert_one({"_id": "layout", "version": LAYOUT_VERSION + 1, "release": "9.0.0"})
    env = {
        **os.environ,
        **service_settings(),
        "AMS_BACKEND": "kafka",
        "AMS_MONGO_DATABASE": database.name,
        "AMS_CONSUME_OWNER": "false",
        "AMS_PUSH_ENABLED": "false",
    }
    done = run_ams("admin", "bootstrap", "--data-dir", str(tmp_path), env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "newer release wrote it" in done.stderr
    assert "Traceback" not in done.stderr
