"""Group commit of the embedded backend's writes (ams_app/backends/sqlite/db.py, run_grouped):
a call that finds no commit under way goes at once, alone; calls made while a commit is under
way share the next transaction, each is answered with its own
result or exception, and a failing one rolls back only itself."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import gevent
import pytest

from ams_app.backends.sqlite import db as sqlite_db
from ams_app.backends.sqlite.db import SqliteDb

SCHEMA = ["CREATE TABLE IF NOT EXISTS rows (n INTEGER PRIMARY KEY);"]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteDb]:
    database = SqliteDb(str(tmp_path / "t.db"), SCHEMA)
    yield database
    database.close()


def _insert(n: int):  # type: ignore[no-untyped-def]
    def tx(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO rows (n) VALUES (?)", (n,))
        if n % 7 == 3:
            raise ValueError(f"refused {n}")
        return n * 10

    return tx


def test_concurrent_calls_share_commits_and_keep_their_own_outcomes(
    db: SqliteDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    transactions = []
    call = db._call

    def counted(fn):  # type: ignore[no-untyped-def]
        transactions.append(fn)
        return call(fn)

    monkeypatch.setattr(db, "_call", counted)
    calls = [gevent.spawn(db.run_grouped, _insert(n)) for n in range(40)]
    gevent.joinall(calls)
    for n, greenlet in enumerate(calls):
        if n % 7 == 3:
            assert isinstance(greenlet.exception, ValueError)
            assert str(greenlet.exception) == f"refused {n}"
        else:
            assert greenlet.value == n * 10
    kept = {row[0] for row in db.read(lambda conn: conn.execute("SELECT n FROM rows").fetchall())}
    assert kept == {n for n in range(40) if n % 7 != 3}  # a refused call's row is rolled back alone
    # the first found no commit under way and went alone; the other 39 queued meanwhile: one more
    assert len(transactions) == 2


def test_a_group_is_bounded(db: SqliteDb, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_db, "GROUP_LIMIT", 5)
    sizes = []
    call_group = db._call_group

    def counted(fns):  # type: ignore[no-untyped-def]
        sizes.append(len(fns))
        return call_group(fns)

    monkeypatch.setattr(db, "_call_group", counted)
    gevent.joinall([gevent.spawn(db.run_grouped, _insert(n)) for n in range(0, 60, 7)])
    assert max(sizes) <= 5
    assert sum(sizes) == len(range(0, 60, 7)) - 1  # the first went alone


def test_a_failed_transaction_fails_every_call_in_it(db: SqliteDb, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fn):  # type: ignore[no-untyped-def]
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(db, "_call", broken)
    calls = [gevent.spawn(db.run_grouped, _insert(n)) for n in range(4)]
    gevent.joinall(calls)
    assert all(isinstance(g.exception, sqlite3.OperationalError) for g in calls)
    monkeypatch.undo()
    assert db.run_grouped(_insert(100)) == 1000  # and the next group commits


def test_calls_queued_behind_a_killed_commit_are_still_answered(db: SqliteDb, monkeypatch: pytest.MonkeyPatch) -> None:
    """The greenlet committing the groups killed mid-commit (GreenletExit, as at a shutdown): its
    group is told so, and the calls queued after it are committed by another, not left waiting."""
    monkeypatch.setattr(sqlite_db, "GROUP_LIMIT", 5)
    call_group = db._call_group
    killed = []

    def killed_once(fns):  # type: ignore[no-untyped-def]
        if not killed:
            killed.append(len(fns))
            raise gevent.GreenletExit
        return call_group(fns)

    monkeypatch.setattr(db, "_call_group", killed_once)
    calls = [gevent.spawn(db.run_grouped, _insert(n)) for n in range(0, 140, 7)]  # none refused
    done = gevent.joinall(calls, timeout=10)
    assert len(done) == len(calls)  # none left waiting
    assert killed == [5]
    # the killed group's calls are told so (gevent counts a greenlet ended by GreenletExit as done,
    # with the exception as its value); the others are committed
    told = [g for g in calls if isinstance(g.value, gevent.GreenletExit)]
    assert len(told) == 5
    assert sorted(g.value for g in calls if g not in told) == sorted(
        n * 10 for n, g in zip(range(0, 140, 7), calls, strict=True) if g not in told
    )
    assert db.run_grouped(_insert(1000)) == 10000  # and grouping goes on
