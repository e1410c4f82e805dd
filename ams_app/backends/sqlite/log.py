"""MessageLog on SQLite: one table of messages keyed by (topic key, offset)."""

from __future__ import annotations

import json
import logging
import sqlite3
from typing import Any

import gevent

from ams_app.backends.log import NewMessage, StoredMessage
from ams_app.backends.notify import AppendNotifier
from ams_app.backends.sqlite.db import SqliteDb
from ams_app.timeutil import now_ns

#: Version 1, the baseline: the schema as releases before versioning made it.
BASELINE = """
CREATE TABLE IF NOT EXISTS log_topics (
    key TEXT PRIMARY KEY,
    next_offset INTEGER NOT NULL,
    min_offset INTEGER NOT NULL,
    last_ns INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    key TEXT NOT NULL,
    offset INTEGER NOT NULL,
    publish_ns INTEGER NOT NULL,
    attributes TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (key, offset)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS messages_by_time ON messages (key, publish_ns);
"""

#: Version 4: the messages in a table with rowids. WITHOUT ROWID keeps each whole row in the key's
#: B-tree, where a page of 4 KB holds rows of up to about 1 KB inline: a message of 1 KB went to an
#: overflow page of its own, the file grew three times as large as its data, and inserts cost twice
#: as much (docs/benchmarks.md, "The embedded log's table"). The time index names the offset, which
#: the old table's index held implicitly, so the first message at or after a time is still found
#: in the index alone, without a sort. A data directory's first start on this version copies its
#: messages once, in one transaction.
ROWID_TABLE = """
CREATE TABLE messages_rowid (
    key TEXT NOT NULL,
    offset INTEGER NOT NULL,
    publish_ns INTEGER NOT NULL,
    attributes TEXT NOT NULL,
    data TEXT NOT NULL,
    ordering_key TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (key, offset)
);
INSERT INTO messages_rowid (key, offset, publish_ns, attributes, data, ordering_key)
    SELECT key, offset, publish_ns, attributes, data, ordering_key FROM messages ORDER BY key, offset;
DROP TABLE messages;
ALTER TABLE messages_rowid RENAME TO messages;
CREATE INDEX messages_by_time ON messages (key, publish_ns, offset);
"""

#: The schema's migrations, in order (ams_app/backends/sqlite/db.py). Append; never edit one that
#: has shipped.
MIGRATIONS = (
    BASELINE,
    # 2: messages keep their ordering key (docs/delivery.md)
    "ALTER TABLE messages ADD COLUMN ordering_key TEXT NOT NULL DEFAULT '';",
    # 3: a topic's own retention (messageRetentionDuration), 0 for the log's
    "ALTER TABLE log_topics ADD COLUMN retention_ns INTEGER NOT NULL DEFAULT 0;",
    # 4: the messages in a table with rowids
    ROWID_TABLE,
)

#: How often waiting pulls re-check the log when nothing woke them (another process may write).
_RECHECK_SECONDS = 1.0


class SqliteMessageLog:
    def __init__(self, path: str, retention_seconds: int = 0) -> None:
        self.db = SqliteDb(path, MIGRATIONS)
        self._notifier = AppendNotifier(_RECHECK_SECONDS)
        self._retention_ns = retention_seconds * 1_000_000_000
        # always: a topic may have a retention of its own when the log keeps messages forever
        self._janitor: Any = gevent.spawn(self._retention_loop)

    def ping(self) -> None:
        self.db.read(lambda c: c.execute("SELECT 1").fetchone())

    def close(self) -> None:
        if self._janitor is not None:
            self._janitor.kill()
        self._notifier.wake_all()
        self.db.close()

    def create_topic(self, key: str, retention_seconds: int = 0) -> None:
        # A topic's counter outlives the topic: offsets (message ids) are never reused.
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO log_topics (key, next_offset, min_offset, last_ns) VALUES (?,0,0,0)", (key,)
            )
            conn.execute("UPDATE log_topics SET retention_ns=? WHERE key=?", (retention_seconds * 1_000_000_000, key))

        self.db.run(tx)

    def delete_topic(self, key: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM messages WHERE key=?", (key,))
            conn.execute("UPDATE log_topics SET min_offset=next_offset WHERE key=?", (key,))

        self.db.run(tx)

    def drop_topic(self, key: str) -> None:
        """Forget the topic entirely, counter included (its project is gone)."""

        def tx(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM messages WHERE key=?", (key,))
            conn.execute("DELETE FROM log_topics WHERE key=?", (key,))

        self.db.run(tx)

    def append(self, key: str, messages: list[NewMessage]) -> list[StoredMessage]:
        def tx(conn: sqlite3.Connection) -> list[StoredMessage]:
            row = conn.execute("SELECT next_offset, last_ns FROM log_topics WHERE key=?", (key,)).fetchone()
            if row is None:
                conn.execute("INSERT INTO log_topics (key, next_offset, min_offset, last_ns) VALUES (?,0,0,0)", (key,))
                row = (0, 0)
            offset, last_ns = row
            # Publish times never go backwards within a topic, so time lookups can bisect.
            ns = max(now_ns(), last_ns)
            stored = [
                StoredMessage(offset + i, ns, m.data, m.attributes, m.ordering_key) for i, m in enumerate(messages)
            ]
            conn.executemany(
                "INSERT INTO messages (key, offset, publish_ns, attributes, data, ordering_key) VALUES (?,?,?,?,?,?)",
                [
                    (
                        key,
                        s.offset,
                        s.publish_ns,
                        json.dumps(s.attributes) if s.attributes else "{}",
                        s.data,
                        s.ordering_key,
                    )
                    for s in stored
                ],
            )
            conn.execute(
                "UPDATE log_topics SET next_offset=?, last_ns=? WHERE key=?",
                (offset + len(messages), ns, key),
            )
            return stored

        stored = self.db.run_grouped(tx)
        self._notifier.notify(key)
        return stored

    def import_messages(self, key: str, messages: list[StoredMessage], end: int) -> int:
        """Store messages copied from another log at their own offsets and publish times (``ams
        migrate from-argo --copy-messages-from``), in one transaction; one already held at its
        offset is left as it is. The topic's next offset becomes at least ``end`` (that log's end:
        new ids follow its ids), its oldest the lowest offset held. How many were stored."""

        def tx(conn: sqlite3.Connection) -> int:
            conn.execute(
                "INSERT OR IGNORE INTO log_topics (key, next_offset, min_offset, last_ns) VALUES (?,0,0,0)", (key,)
            )
            stored = 0
            if messages:
                stored = conn.executemany(
                    "INSERT OR IGNORE INTO messages (key, offset, publish_ns, attributes, data, ordering_key)"
                    " VALUES (?,?,?,?,?,?)",
                    [(key, m.offset, m.publish_ns, json.dumps(m.attributes), m.data, m.ordering_key) for m in messages],
                ).rowcount
            top = max([end, *(m.offset + 1 for m in messages)])
            last_ns = max((m.publish_ns for m in messages), default=0)
            conn.execute(
                "UPDATE log_topics SET next_offset=MAX(next_offset, ?), last_ns=MAX(last_ns, ?) WHERE key=?",
                (top, last_ns, key),
            )
            conn.execute(
                "UPDATE log_topics SET min_offset = COALESCE("
                " (SELECT MIN(offset) FROM messages WHERE key=?), next_offset) WHERE key=?",
                (key, key),
            )
            return int(stored)

        stored = self.db.run(tx)
        if stored:
            self._notifier.notify(key)
        return stored

    def read(self, key: str, start: int, end: int, max_bytes: int) -> list[StoredMessage]:
        def tx(conn: sqlite3.Connection) -> list[StoredMessage]:
            out: list[StoredMessage] = []
            size = 0
            cursor = conn.execute(
                "SELECT offset, publish_ns, attributes, data, ordering_key FROM messages"
                " WHERE key=? AND offset>=? AND offset<? ORDER BY offset",
                (key, start, end),
            )
            for offset, publish_ns, attributes, data, ordering_key in cursor:
                size += len(data) + len(attributes)
                if out and size > max_bytes:
                    break
                out.append(StoredMessage(offset, publish_ns, data, json.loads(attributes), ordering_key))
            return out

        return self.db.read(tx)

    def peek(self, key: str, offset: int) -> StoredMessage | None:
        found = self.read(key, offset, 2**63 - 1, 1)
        return found[0] if found else None

    def known_bounds(self, key: str) -> tuple[int, int] | None:
        return None  # bounds is a local read: nothing to save

    def bounds(self, key: str) -> tuple[int, int]:
        row = self.db.read(
            lambda c: c.execute("SELECT min_offset, next_offset FROM log_topics WHERE key=?", (key,)).fetchone()
        )
        return (row[0], row[1]) if row else (0, 0)

    def offset_for_time(self, key: str, publish_ns: int) -> int | None:
        row = self.db.read(
            lambda c: c.execute(
                "SELECT offset FROM messages WHERE key=? AND publish_ns>=? ORDER BY publish_ns, offset LIMIT 1",
                (key, publish_ns),
            ).fetchone()
        )
        return row[0] if row else None

    def marker(self, key: str) -> int:
        return self._notifier.marker(key)

    def wait_for_append(self, key: str, marker: int, timeout: float) -> None:
        self._notifier.wait(key, marker, timeout)

    def wake(self, key: str) -> None:
        self._notifier.notify(key)

    def purge_expired(self) -> int:
        """Remove messages past retention (a topic's own, or the log's); return how many went."""
        now = now_ns()

        def tx(conn: sqlite3.Connection) -> int:
            removed = 0
            own = conn.execute("SELECT key, retention_ns FROM log_topics WHERE retention_ns > 0").fetchall()
            for key, retention_ns in own:
                removed += conn.execute(
                    "DELETE FROM messages WHERE key=? AND publish_ns < ?", (key, now - retention_ns)
                ).rowcount
            if self._retention_ns > 0:
                removed += conn.execute(
                    "DELETE FROM messages WHERE publish_ns < ?"
                    " AND key IN (SELECT key FROM log_topics WHERE retention_ns = 0)",
                    (now - self._retention_ns,),
                ).rowcount
            if removed:
                conn.execute(
                    "UPDATE log_topics SET min_offset = COALESCE("
                    " (SELECT MIN(offset) FROM messages m WHERE m.key = log_topics.key), next_offset)"
                )
            return int(removed)

        return self.db.run(tx)

    def _retention_loop(self) -> None:
        while True:
            gevent.sleep(60)
            try:
                self.purge_expired()
            except sqlite3.Error:  # pragma: no cover - the next round tries again
                logging.getLogger("ams").exception("retention purge failed")
