"""A SQLite database: writes on one dedicated OS thread, reads inline.

Every write runs a whole function (one transaction) in the writer thread, so writes are
serialised and atomic, and a commit's fsync never stalls the gevent hub: other greenlets keep
serving while the thread waits for the disk. WAL with ``synchronous=FULL`` makes every
answered commit survive a crash of the process or of the machine.

Reads run in the caller's thread on a read-only connection, in a transaction of their own
(a WAL snapshot: they see every commit that returned before they began, and never wait for
the writer). A read function never yields to other greenlets, so nothing interleaves with it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from gevent.threadpool import ThreadPool

R = TypeVar("R")


class SqliteDb:
    def __init__(self, path: str, schema: str) -> None:
        self.path = path
        self._pool = ThreadPool(1)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._schema = schema
        self.run(lambda conn: None)  # open and migrate now: errors surface at start-up
        os.chmod(path, 0o600)
        self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._reader.execute("PRAGMA query_only=ON")
        self._read_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(self._schema)
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
