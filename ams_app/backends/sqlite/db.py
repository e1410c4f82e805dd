"""A SQLite database: writes on one dedicated OS thread, reads inline.

Every write runs a whole function (one transaction) in the writer thread, so writes are
serialised and atomic, and a commit's fsync never stalls the gevent hub: other greenlets keep
serving while the thread waits for the disk. WAL with ``synchronous=FULL`` makes every
answered commit survive a crash of the process or of the machine.

Writes that many requests make at once (publishing) may instead share a transaction:
``run_grouped`` queues the function, and the calls that queue while a commit is under way run
together in the next transaction, each in a savepoint of its own (one failing rolls back only
itself), with one commit: one fsync for them all (group commit); a call that finds no commit under
way goes at once, alone. A call is answered only after
the commit that holds it, so the guarantee is the same; what it changes is that concurrent
publishers stop queueing for the disk one by one (docs/benchmarks.md, "Publishing against the
raw producer").

Reads run in the caller's thread on a read-only connection, in a transaction of their own
(a WAL snapshot: they see every commit that returned before they began, and never wait for
the writer). A read function never yields to other greenlets, so nothing interleaves with it.

The schema is versioned (``PRAGMA user_version``): a database is built by a list of migrations,
the first of them the baseline, and opening it applies those it has not had yet, each in a
transaction of its own together with its version number, so a crash leaves it at one version or
the next. A database of a newer version than the code knows is refused: a downgrade would write
rows that code does not understand. The baseline is written with ``IF NOT EXISTS``, so that the
data directories of releases before versioning (version 0, tables present) pass through it.
Operators: README.md, "The embedded backend".
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

import gevent
from gevent.event import AsyncResult
from gevent.threadpool import ThreadPool

R = TypeVar("R")

#: At most this many grouped calls share one transaction.
GROUP_LIMIT = 64


class SchemaTooNew(RuntimeError):
    """The database was written by a newer version of the service."""


def statements(script: str) -> list[str]:
    """The SQL statements of ``script``, one by one (``executescript`` would commit the migration's
    transaction before running them)."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            out.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"an incomplete SQL statement at the end of a migration: {pending.strip()[:80]}")
    return out


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, migrations: Sequence[str], path: str = "") -> int:
    """Bring the database on ``conn`` (autocommit mode) to ``len(migrations)``; the version it had."""
    found = schema_version(conn)
    if found > len(migrations):
        raise SchemaTooNew(
            f"{path or 'the database'} is at schema version {found}, this version of ams knows versions up "
            f"to {len(migrations)}: a newer ams wrote it, and downgrades are not supported "
            "(README.md, 'The embedded backend')"
        )
    for version in range(found, len(migrations)):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(conn) == version:  # another process may have migrated meanwhile
                for statement in statements(migrations[version]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return found


class SqliteDb:
    def __init__(self, path: str, migrations: Sequence[str]) -> None:
        self.path = path
        self._pool = ThreadPool(1)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        first = self._connect()  # open and migrate here and now: errors surface at start-up
        try:
            migrate(first, migrations, path)
        finally:
            first.close()
        os.chmod(path, 0o600)
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()
        self._grouped: list[tuple[Callable[[sqlite3.Connection], object], AsyncResult]] = []
        self._grouping = False  # a greenlet is committing groups

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

    def run(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``fn`` in a write transaction."""
        return self._pool.apply(self._call, (fn,))  # type: ignore[no-any-return]

    def run_grouped(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``fn`` in a write transaction that it may share with other grouped calls (module
        docstring); its exception is its own, the others still commit."""
        if not self._grouping:
            # no commit under way: this one goes at once, from its own greenlet (a lone publish
            # pays no hand-over: 0.3 ms of its 1.7 measured), and those that come meanwhile queue
            self._grouping = True
            try:
                return self._pool.apply(self._call, (fn,))  # type: ignore[no-any-return]
            finally:
                if self._grouped:
                    gevent.spawn(self._commit_groups)
                else:
                    self._grouping = False
        done = AsyncResult()
        self._grouped.append((fn, done))
        return done.get()  # type: ignore[no-any-return]

    def _commit_groups(self) -> None:
        try:
            while self._grouped:
                group, self._grouped = self._grouped[:GROUP_LIMIT], self._grouped[GROUP_LIMIT:]
                try:
                    outcomes = self._pool.apply(self._call_group, ([fn for fn, _ in group],))
                except BaseException as exc:  # the transaction itself failed: none of them holds
                    for _, done in group:
                        done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, done), (failed, value) in zip(group, outcomes, strict=True):
                    if failed:
                        done.set_exception(value)
                    else:
                        done.set(value)
        finally:
            if self._grouped:  # this greenlet was killed: the calls queued after its group wait on another
                gevent.spawn(self._commit_groups)
            else:
                self._grouping = False

    def _call_group(self, fns: list[Callable[[sqlite3.Connection], object]]) -> list[tuple[bool, object]]:
        def each(conn: sqlite3.Connection) -> list[tuple[bool, object]]:
            outcomes: list[tuple[bool, object]] = []
            for fn in fns:
                conn.execute("SAVEPOINT grouped")
                try:
                    outcomes.append((False, fn(conn)))
                except Exception as exc:
                    conn.execute("ROLLBACK TO grouped")
                    outcomes.append((True, exc))
                conn.execute("RELEASE grouped")
            return outcomes

        return self._call(each)

    def read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``fn`` in a read transaction, here and now."""
        with self._read_lock:
            self._reader.execute("BEGIN")
            try:
                return fn(self._reader)
            finally:
                self._reader.execute("COMMIT")

    def close(self) -> None:
        def _close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        self._pool.apply(_close)
        self._pool.kill()
        with self._read_lock:
            self._reader.close()
