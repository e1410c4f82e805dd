"""The MongoDB store's cursor compare-and-swap, against the real MongoDB-wire server (FerretDB).

These pin the property the cluster relies on: of concurrent writers moving a subscription's
cursor from one version, exactly one wins; and a writer holding an old read never wins."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import pytest

from ams_app.backends.mongo.store import MongoMetadataStore
from ams_app.models import Subscription
from tests.conftest import require_backend
from tests.helpers import scratch_mongo_store


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
