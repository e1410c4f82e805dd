"""The embedded backend's schema versions (ams_app/backends/sqlite/db.py): a fresh database is at
the latest version, an old data directory upgrades in place and keeps its data, a failed step
leaves the version it had, and a database of a newer release is refused."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ams_app.backends.log import NewMessage
from ams_app.backends.sqlite import log as sqlite_log
from ams_app.backends.sqlite import store as sqlite_store
from ams_app.backends.sqlite.db import SchemaTooNew, migrate, schema_version, statements
from ams_app.models import Snapshot
from tests.helpers import ROOT, b64, free_port
from tests.inprocess import InProcessServer

LEGACY = ROOT / "tests" / "fixtures" / "datadir-unversioned"
LATEST = {"metadata": len(sqlite_store.MIGRATIONS), "messages": len(sqlite_log.MIGRATIONS)}


def version_of(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return schema_version(conn)


def indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}


def restore_legacy(data: Path) -> None:
    data.mkdir(parents=True)
    for name in LATEST:
        with sqlite3.connect(data / f"{name}.db") as conn:
            conn.executescript((LEGACY / f"{name}.sql").read_text())


def test_a_fresh_data_directory_is_at_the_latest_versions(tmp_path: Path) -> None:
    InProcessServer(tmp_path / "data").stop()
    for name, latest in LATEST.items():
        assert version_of(tmp_path / "data" / f"{name}.db") == latest
    assert {"memberships_by_user", "snapshots_by_subscription"} <= indexes(tmp_path / "data" / "metadata.db")


def test_a_database_of_the_version_before_snapshots_upgrades_and_keeps_its_data(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    before = sqlite_store.MIGRATIONS.index(sqlite_store.SNAPSHOTS)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, sqlite_store.MIGRATIONS[:before])
    assert version_of(path) == before
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # data written by that version
        doc = '{"uuid":"p-1","name":"kept","description":"","created_on":0,"modified_on":0,"created_by":""}'
        conn.execute("INSERT INTO projects (uuid, name, doc) VALUES ('p-1', 'kept', ?)", (doc,))
        assert conn.execute("SELECT name FROM sqlite_master WHERE name='snapshots'").fetchone() is None

    store = sqlite_store.SqliteMetadataStore(str(path))
    try:
        assert version_of(path) == LATEST["metadata"]
        project = store.get_project(name="kept")
        assert project is not None
        assert project.uuid == "p-1"
        snapshot = Snapshot("p-1", "snap", "t", "s", 3, [(5, 6)], 1, 2)
        assert store.create_snapshot(snapshot)
        assert store.get_snapshot("p-1", "snap") == snapshot
        assert store.snapshots_of_subscription("p-1", "s") == ["snap"]
    finally:
        store.close()
    assert "snapshots_by_subscription" in indexes(path)


def test_messages_written_without_rowids_move_to_the_rowid_table_whole(tmp_path: Path) -> None:
    path = tmp_path / "messages.db"
    before = sqlite_log.MIGRATIONS.index(sqlite_log.ROWID_TABLE)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, sqlite_log.MIGRATIONS[:before])
    rows = [  # as that version wrote them: two topics, attributes, ordering keys, a trimmed start
        ("projects/p/topics/a", offset, 1_000 + offset // 2, json.dumps({"n": str(offset)}), b64(f"a{offset}"), key)
        for offset, key in ((3, ""), (4, "k"), (5, ""), (6, "k"))
    ] + [("projects/p/topics/b", 0, 7, "{}", b64("b0"), "")]
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO log_topics (key, next_offset, min_offset, last_ns) VALUES (?,?,?,?)",
            [("projects/p/topics/a", 7, 3, 1_003), ("projects/p/topics/b", 1, 0, 7)],
        )
        conn.executemany(
            "INSERT INTO messages (key, offset, publish_ns, attributes, data, ordering_key) VALUES (?,?,?,?,?,?)", rows
        )
        assert "WITHOUT ROWID" in conn.execute("SELECT sql FROM sqlite_master WHERE name='messages'").fetchone()[0]

    log = sqlite_log.SqliteMessageLog(str(path))
    try:
        assert version_of(path) == LATEST["messages"]
        a = log.read("projects/p/topics/a", 0, 100, 10**6)
        assert [(m.offset, m.publish_ns, m.attributes, m.data, m.ordering_key) for m in a] == [
            (r[1], r[2], json.loads(r[3]), r[4], r[5]) for r in rows[:4]
        ]
        assert log.bounds("projects/p/topics/a") == (3, 7)
        assert log.offset_for_time("projects/p/topics/a", 1_002) == 4  # the first of 4 and 5, both at 1,002
        assert log.offset_for_time("projects/p/topics/a", 1_004) is None
        assert [m.data for m in log.read("projects/p/topics/b", 0, 100, 10**6)] == [b64("b0")]
        stored = log.append("projects/p/topics/a", [NewMessage(b64("next"), {})])
        assert [m.offset for m in stored] == [7]  # ids go on from where they were
    finally:
        log.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        table = conn.execute("SELECT sql FROM sqlite_master WHERE name='messages'").fetchone()[0]
        assert "WITHOUT ROWID" not in table
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT offset FROM messages WHERE key=? AND publish_ns>=?"
            " ORDER BY publish_ns, offset LIMIT 1",
            ("k", 0),
        ).fetchall()
        assert "COVERING INDEX messages_by_time" in str(plan), plan  # found in the index, not sorted
        assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {
            "log_topics",
            "messages",
        }


def test_schemas_written_before_revisions_get_a_first_revision(tmp_path: Path) -> None:
    path = tmp_path / "metadata.db"
    before = sqlite_store.MIGRATIONS.index(sqlite_store.SCHEMA_REVISIONS)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, sqlite_store.MIGRATIONS[:before])
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # data written by that version
        for n in (1, 2):
            doc = json.dumps({"uuid": f"s-{n}", "project_uuid": "p-1", "name": f"s{n}", "type": "json", "schema": {}})
            conn.execute(
                "INSERT INTO schemas (project_uuid, uuid, name, doc) VALUES ('p-1', ?, ?, ?)", (f"s-{n}", f"s{n}", doc)
            )
        topic = {"project_uuid": "p-1", "name": "t", "created_on": 0, "acl": [], "schema_uuid": "s-1", "retention_s": 0}
        conn.execute("INSERT INTO topics (project_uuid, name, doc) VALUES ('p-1', 't', ?)", (json.dumps(topic),))
    started = time.time_ns()
    store = sqlite_store.SqliteMetadataStore(str(path))
    try:
        first, second = store.list_schemas("p-1")
        for schema in (first, second):
            assert re.fullmatch(r"[0-9a-f]{8}", schema.revision_id), schema
            assert started - 2 * 10**9 <= schema.revision_created_ns <= time.time_ns()
            assert (schema.schema, schema.revisions) == ({}, [])
        assert first.revision_id != second.revision_id
        assert store.get_schema("p-1", uuid="s-1") == first  # written down, not made up on each read
        topic_read = store.get_topic("p-1", "t")
        assert topic_read is not None
        assert (topic_read.schema_uuid, topic_read.schema_encoding) == ("s-1", "")
    finally:
        store.close()


def test_an_unversioned_data_directory_upgrades_in_place_and_keeps_its_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    restore_legacy(data)
    assert version_of(data / "metadata.db") == 0
    assert "memberships_by_user" not in indexes(data / "metadata.db")

    service = InProcessServer(data, token="legacy-service-token")
    try:
        api = service.api()
        assert api.ok("GET", "/projects/legacy")["description"] == "written before schema versions"
        alice = api.ok("GET", "/users/alice")
        assert alice["projects"] == [
            {"project": "legacy", "roles": ["consumer", "publisher"], "topics": [], "subscriptions": []}
        ]
        assert api.as_(alice["token"]).get("/projects/legacy/topics/events").status_code == 200
        assert api.ok("GET", "/projects/legacy/subscriptions/reader:offsets")["current"] == 1
        pulled = api.pull("legacy", "reader")
        assert [m["message"]["data"] for m in pulled] == [b64("two"), b64("three")]
        assert [m["message"]["messageId"] for m in pulled] == ["1", "2"]
        # and it goes on: a new user's memberships take the new index's path
        api.ok("POST", "/users/bob", {"projects": [{"project": "legacy", "roles": ["consumer"]}]})
        assert api.publish("legacy", "events", "four") == ["3"]
    finally:
        service.stop()
    for name, latest in LATEST.items():
        assert version_of(data / f"{name}.db") == latest
    assert "memberships_by_user" in indexes(data / "metadata.db")


def test_a_failed_step_leaves_the_version_it_had(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    good = ["CREATE TABLE a (x INTEGER);"]
    assert migrate(conn, good) == 0
    broken = [*good, "CREATE TABLE b (y INTEGER);\nCREATE INDEX b_by_z ON b (z);"]
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, broken)
    assert schema_version(conn) == 1
    assert conn.execute("SELECT name FROM sqlite_master WHERE name='b'").fetchone() is None  # rolled back whole
    fixed = [*good, "CREATE TABLE b (y INTEGER);\nCREATE INDEX b_by_y ON b (y);"]
    assert migrate(conn, fixed) == 1
    assert schema_version(conn) == 2
    assert migrate(conn, fixed) == 2  # nothing left to do
    conn.close()


def test_a_data_directory_of_a_newer_release_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    InProcessServer(data).stop()
    newer = LATEST["metadata"] + 1
    with sqlite3.connect(data / "metadata.db") as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    with pytest.raises(SchemaTooNew, match=f"schema version {newer}"):
        sqlite_store.SqliteMetadataStore(str(data / "metadata.db"))
    # the service says so and stops, without a traceback
    ran = subprocess.run(
        [sys.executable, "-m", "ams_app", "serve", "--data-dir", str(data), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert ran.returncode == 2, ran.stderr
    assert f"is at schema version {newer}" in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr, ran.stderr
    assert version_of(data / "metadata.db") == newer  # untouched


def test_statements_are_split_whole() -> None:
    script = "CREATE TABLE t (\n  a TEXT -- one; two\n);\nCREATE INDEX i ON t (a);\n"
    assert statements(script) == ["CREATE TABLE t (\n  a TEXT -- one; two\n);", "CREATE INDEX i ON t (a);"]
    with pytest.raises(ValueError, match="incomplete"):
        statements("CREATE TABLE t (a")


def test_the_shipped_migrations_are_only_appended() -> None:
    """A migration that shipped is never edited: its version already stands on operators' disks.
    The baselines must build exactly the schema the unversioned release made."""
    for name, module in (("metadata", sqlite_store), ("messages", sqlite_log)):
        legacy = sqlite3.connect(":memory:")
        legacy.executescript((LEGACY / f"{name}.sql").read_text())
        fresh = sqlite3.connect(":memory:", isolation_level=None)
        migrate(fresh, module.MIGRATIONS[:1])

        def shape(conn: sqlite3.Connection) -> set[tuple[str, str]]:
            return {
                (r[0], r[1])
                for r in conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
            }

        assert shape(fresh) == shape(legacy), name
