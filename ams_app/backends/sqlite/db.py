"""A SQLite database served by one dedicated OS thread.

Every call runs a whole function (one transaction) in that thread, so calls are serialised
and atomic, and a commit's fsync never stalls the gevent hub: other greenlets keep serving
while the thread waits for the disk. WAL with ``synchronous=FULL`` makes every answered
commit survive a crash of the process or of the machine.
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

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(self._schema)
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection], R], write: bool) -> R:
        with self._lock:
            if self._conn is None:
                self._conn = self._connect()
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

    def run(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``fn`` in a write transaction."""
        return self._pool.apply(self._call, (fn, True))  # type: ignore[no-any-return]

    def read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        """Run ``fn`` in a read transaction."""
        return self._pool.apply(self._call, (fn, False))  # type: ignore[no-any-return]

    def close(self) -> None:
        def _close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        self._pool.apply(_close)
        self._pool.kill()
