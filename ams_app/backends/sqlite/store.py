"""MetadataStore and SnapshotStore on SQLite: one JSON document per row, indexed columns beside it."""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ams_app.backends.sqlite.datadir import open_data_dir
from ams_app.backends.sqlite.db import SqliteDb
from ams_app.backends.store import (
    BindingWrite,
    DailyKey,
    DailyUsage,
    InvalidPageToken,
    MetadataStore,
    Page,
    SnapshotStore,
    binding_identifiers,
    daily_series,
    merge_daily,
    page_of,
    project_totals,
    utc_today,
)
from ams_app.backends.user_tokens import UserTokens
from ams_app.models import (
    Binding,
    Cursor,
    Project,
    Registration,
    Schema,
    ServiceType,
    Snapshot,
    Subscription,
    Topic,
    Usage,
    UsageBatch,
    User,
    binding_from_doc,
    cursor_from_doc,
    cursor_to_doc,
    schema_from_doc,
    service_type_from_doc,
    snapshot_from_doc,
    snapshot_to_doc,
    sub_from_doc,
    to_doc,
    user_from_doc,
)
from ams_app.tokenseal import Keyring, TokenSealError

T = TypeVar("T")

#: Version 1, the baseline: the schema as releases before versioning made it (IF NOT EXISTS, so that
#: their data directories pass through it unchanged).
BASELINE = """
CREATE TABLE IF NOT EXISTS projects (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS users (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    token TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS memberships (
    user_uuid TEXT NOT NULL REFERENCES users(uuid) ON DELETE CASCADE,
    project_uuid TEXT NOT NULL,
    PRIMARY KEY (project_uuid, user_uuid)
);
CREATE TABLE IF NOT EXISTS topics (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_uuid TEXT NOT NULL,
    name TEXT NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (project_uuid, name)
);
CREATE TABLE IF NOT EXISTS subscriptions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_uuid TEXT NOT NULL,
    name TEXT NOT NULL,
    topic TEXT NOT NULL,
    doc TEXT NOT NULL,
    cursor TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 0,
    UNIQUE (project_uuid, name)
);
CREATE INDEX IF NOT EXISTS subscriptions_by_topic ON subscriptions (project_uuid, topic);
CREATE TABLE IF NOT EXISTS acl (
    kind TEXT NOT NULL,          -- 'topic' or 'sub'
    project_uuid TEXT NOT NULL,
    name TEXT NOT NULL,
    user_uuid TEXT NOT NULL,
    PRIMARY KEY (kind, project_uuid, name, user_uuid)
);
CREATE INDEX IF NOT EXISTS acl_by_user ON acl (user_uuid);
CREATE TABLE IF NOT EXISTS schemas (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_uuid TEXT NOT NULL,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (project_uuid, name)
);
CREATE TABLE IF NOT EXISTS usage (
    kind TEXT NOT NULL,          -- 'topic' or 'sub'
    project_uuid TEXT NOT NULL,
    name TEXT NOT NULL,
    messages INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    latest_ns INTEGER NOT NULL,
    rate REAL NOT NULL,
    PRIMARY KEY (kind, project_uuid, name)
);
CREATE TABLE IF NOT EXISTS daily_messages (
    project_uuid TEXT NOT NULL,
    topic TEXT NOT NULL,
    day TEXT NOT NULL,           -- YYYY-MM-DD, UTC
    messages INTEGER NOT NULL,
    PRIMARY KEY (project_uuid, topic, day)
);
CREATE INDEX IF NOT EXISTS daily_by_day ON daily_messages (day);
CREATE TABLE IF NOT EXISTS usage_daily (  -- the Spark job's figures (docs/spark.md)
    day TEXT NOT NULL,
    project_uuid TEXT NOT NULL,
    topic TEXT NOT NULL,
    messages INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    PRIMARY KEY (day, project_uuid, topic)
);
CREATE INDEX IF NOT EXISTS usage_daily_by_topic ON usage_daily (project_uuid, topic);
CREATE TABLE IF NOT EXISTS node_metrics (
    hostname TEXT PRIMARY KEY,
    cpu REAL NOT NULL,
    memory REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS registrations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS authn_service_types (  -- AuthN (docs/authn.md)
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS authn_bindings (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    service_uuid TEXT NOT NULL,
    host TEXT NOT NULL,
    auth_type TEXT NOT NULL,
    auth_identifier TEXT NOT NULL,  -- the subject DN, compared byte for byte (BINARY)
    doc TEXT NOT NULL,
    -- its index is find_binding's (and list_bindings' on a service type): no second one
    UNIQUE (service_uuid, host, auth_type, auth_identifier)
);
"""

#: Version 2: every write of a user replaces its memberships by user_uuid, and deleting a user
#: cascades to them by it; without an index both scanned the whole table.
MEMBERSHIPS_BY_USER = """
CREATE INDEX memberships_by_user ON memberships (user_uuid);
"""

#: Version 3: users' tokens at rest (ams_app/backends/user_tokens.py). With token_key_file set,
#: ``token`` (and the doc's) holds the sealed token and ``token_hash`` its keyed hash, by which a
#: token finds its user; NULL while tokens are kept in clear (NULLs do not collide under UNIQUE).
TOKEN_HASH = """
ALTER TABLE users ADD COLUMN token_hash TEXT;
CREATE UNIQUE INDEX users_by_token_hash ON users (token_hash);
"""

#: Version 4: subscriptions' snapshots (SnapshotStore), stored as topics are; ``subscription`` beside
#: the doc for ``snapshots_of_subscription``.
SNAPSHOTS = """
CREATE TABLE snapshots (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    project_uuid TEXT NOT NULL,
    name TEXT NOT NULL,
    subscription TEXT NOT NULL,
    doc TEXT NOT NULL,
    UNIQUE (project_uuid, name)
);
CREATE INDEX snapshots_by_subscription ON snapshots (project_uuid, subscription);
"""

#: Version 5: schemas have revisions (docs/compatibility.md, "Schemas"): each schema written before
#: gets its first revision id (8 random lower-case hex digits), created when the upgrade ran, and no
#: earlier revisions. (Topics' schema_encoding needs no step: a document without it reads as "".)
SCHEMA_REVISIONS = """
UPDATE schemas SET doc = json_set(
    doc,
    '$.revision_id', lower(hex(randomblob(4))),
    '$.revision_created_ns', CAST(strftime('%s', 'now') AS INTEGER) * 1000000000,
    '$.revisions', json('[]')
) WHERE json_type(doc, '$.revision_id') IS NULL;
"""

#: The schema's migrations, in order: a database at version n has had the first n
#: (ams_app/backends/sqlite/db.py). Append; never edit one that has shipped.
MIGRATIONS = (BASELINE, MEMBERSHIPS_BY_USER, TOKEN_HASH, SNAPSHOTS, SCHEMA_REVISIONS)


def _dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _encode_token(seq: int) -> str:
    return base64.urlsafe_b64encode(str(seq).encode()).decode()


def _decode_token(token: str) -> int:
    try:
        value = int(base64.urlsafe_b64decode(token.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidPageToken(token) from exc
    if not 1 <= value < 2**63:
        raise InvalidPageToken(token)
    return value


def _write(conn: sqlite3.Connection, sql: str, args: Sequence[Any]) -> int | None:
    """Rows one INSERT or UPDATE changed; None when a uniqueness rule refused it (a name taken)."""
    try:
        return conn.execute(sql, args).rowcount
    except sqlite3.IntegrityError:
        return None


def _page(
    conn: sqlite3.Connection,
    table: str,
    where: str,
    args: list[Any],
    page_size: int,
    page_token: str,
    build: Callable[[sqlite3.Row | tuple[Any, ...]], T],
    oldest_first: bool = False,
) -> Page[T]:
    """A page of the rows ``where`` selects, newest first (or oldest first); a page token is the
    seq of the first row of its page."""
    total = conn.execute(f"SELECT COUNT(*) FROM {table} t WHERE {where}", args).fetchone()[0]
    query = f"SELECT t.seq, t.doc FROM {table} t WHERE {where}"
    qargs = list(args)
    if page_token:
        query += " AND t.seq >= ?" if oldest_first else " AND t.seq <= ?"
        qargs.append(_decode_token(page_token))
    query += " ORDER BY t.seq" if oldest_first else " ORDER BY t.seq DESC"
    if page_size > 0:
        query += " LIMIT ?"
        qargs.append(page_size + 1)
    return page_of(conn.execute(query, qargs).fetchall(), page_size, total, lambda r: _encode_token(r[0]), build)


class SqliteMetadataStore:
    def __init__(self, path: str, keyring: Keyring | None = None) -> None:
        """Open (and migrate) the database; users' tokens are sealed under ``keyring`` (None: in clear).
        Holds the data directory's lock while open (StoreBusy: a restore runs there, or did not finish)."""
        self._lock = open_data_dir(os.path.dirname(os.path.abspath(path)))
        try:
            self.db = SqliteDb(path, MIGRATIONS)
        except BaseException:
            self._lock.close()
            raise
        self.tokens = UserTokens(keyring)
        try:
            self._seal_tokens(rotate=False)
        except BaseException:
            self.close()
            raise

    def ping(self) -> None:
        self.db.read(lambda c: c.execute("SELECT 1").fetchone())

    def close(self) -> None:
        self.db.close()
        self._lock.close()

    # --- ACL helpers (inside a transaction) ---------------------------------------------
    @staticmethod
    def _acl(conn: sqlite3.Connection, kind: str, project_uuid: str, name: str) -> list[str]:
        rows = conn.execute(
            "SELECT user_uuid FROM acl WHERE kind=? AND project_uuid=? AND name=? ORDER BY rowid",
            (kind, project_uuid, name),
        ).fetchall()
        return [r[0] for r in rows]

    @staticmethod
    def _set_acl(conn: sqlite3.Connection, kind: str, project_uuid: str, name: str, users: list[str]) -> None:
        conn.execute("DELETE FROM acl WHERE kind=? AND project_uuid=? AND name=?", (kind, project_uuid, name))
        conn.executemany(
            "INSERT OR IGNORE INTO acl (kind, project_uuid, name, user_uuid) VALUES (?,?,?,?)",
            [(kind, project_uuid, name, u) for u in users],
        )

    # --- projects -----------------------------------------------------------------------
    def create_project(self, project: Project) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            written = _write(
                conn,
                "INSERT INTO projects (uuid, name, doc) VALUES (?,?,?)",
                (project.uuid, project.name, _dump(to_doc(project))),
            )
            return written is not None

        return self.db.run(tx)

    def get_project(self, *, name: str | None = None, uuid: str | None = None) -> Project | None:
        column, value = ("name", name) if name is not None else ("uuid", uuid)
        row = self.db.read(lambda c: c.execute(f"SELECT doc FROM projects WHERE {column}=?", (value,)).fetchone())
        return Project(**json.loads(row[0])) if row else None

    def list_projects(self) -> list[Project]:
        rows = self.db.read(lambda c: c.execute("SELECT doc FROM projects ORDER BY seq").fetchall())
        return [Project(**json.loads(r[0])) for r in rows]

    def update_project(self, project: Project) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            changed = _write(
                conn,
                "UPDATE projects SET name=?, doc=? WHERE uuid=?",
                (project.name, _dump(to_doc(project)), project.uuid),
            )
            if changed is None:
                return False
            return changed == 1  # as the MongoDB store: False when no such project

        return self.db.run(tx)

    def delete_project(self, uuid: str) -> list[str]:
        def tx(conn: sqlite3.Connection) -> list[str]:
            topics = [r[0] for r in conn.execute("SELECT name FROM topics WHERE project_uuid=?", (uuid,))]
            conn.execute("DELETE FROM topics WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM subscriptions WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM snapshots WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM acl WHERE project_uuid=?", (uuid,))
            members = [r[0] for r in conn.execute("SELECT user_uuid FROM memberships WHERE project_uuid=?", (uuid,))]
            for user_uuid in members:
                row = conn.execute("SELECT doc FROM users WHERE uuid=?", (user_uuid,)).fetchone()
                if row:
                    user = user_from_doc(json.loads(row[0]))
                    user.projects = [m for m in user.projects if m.project_uuid != uuid]
                    conn.execute("UPDATE users SET doc=? WHERE uuid=?", (_dump(to_doc(user)), user_uuid))
            conn.execute("DELETE FROM memberships WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM schemas WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM usage WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM daily_messages WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM usage_daily WHERE project_uuid=?", (uuid,))
            conn.execute("DELETE FROM projects WHERE uuid=?", (uuid,))
            return topics

        return self.db.run(tx)

    # --- users --------------------------------------------------------------------------
    def _user(self, doc: str) -> User:
        fields = json.loads(doc)
        fields["token"] = self.tokens.clear(fields["token"])
        return user_from_doc(fields)

    def _user_row(self, user: User) -> tuple[str, str | None, str]:
        """(token, token_hash, doc) of ``user`` as the table keeps them."""
        stored = self.tokens.stored(user.token)
        return stored.value, stored.hash, _dump(to_doc(user) | {"token": stored.value})

    def _seal_tokens(self, rotate: bool) -> int:
        """Seal the tokens kept in clear, and with ``rotate`` those under an older key; how many
        users changed (ams_app/backends/user_tokens.py). Then the file is rebuilt (VACUUM) and its
        journal emptied, so that a copy taken afterwards holds no trace of what they replaced: no
        token in clear, none that an old key opens (SQLite leaves replaced rows in free space)."""
        if self.tokens.keyring is None:  # only see that nothing is sealed
            rows = self.db.read(
                lambda c: c.execute("SELECT seq, token FROM users WHERE token_hash IS NOT NULL").fetchall()
            )
            self.tokens.plan(((r[0], r[1]) for r in rows), rotate)
            return 0

        def tx(conn: sqlite3.Connection) -> int:
            rows = conn.execute("SELECT seq, token FROM users").fetchall()
            changes = self.tokens.plan(((r[0], r[1]) for r in rows), rotate)
            for seq, _, new in changes:
                doc = json.loads(conn.execute("SELECT doc FROM users WHERE seq=?", (seq,)).fetchone()[0])
                conn.execute(
                    "UPDATE users SET token=?, token_hash=?, doc=? WHERE seq=?",
                    (new.value, new.hash, _dump(doc | {"token": new.value}), seq),
                )
            return len(changes)

        changed = self.db.run(tx)
        if changed:  # rebuilt from the live rows only, and the journal that held the old ones emptied
            with contextlib.closing(sqlite3.connect(self.db.path, isolation_level=None, timeout=30)) as conn:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return changed

    def reseal_tokens(self) -> int:
        if self.tokens.keyring is None:
            raise TokenSealError("token_key_file is not set: no key to seal the tokens with")
        return self._seal_tokens(rotate=True)

    @staticmethod
    def _write_memberships(conn: sqlite3.Connection, user: User) -> None:
        conn.execute("DELETE FROM memberships WHERE user_uuid=?", (user.uuid,))
        conn.executemany(
            "INSERT OR IGNORE INTO memberships (user_uuid, project_uuid) VALUES (?,?)",
            [(user.uuid, m.project_uuid) for m in user.projects],
        )

    def create_user(self, user: User) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            if (
                _write(
                    conn,
                    "INSERT INTO users (uuid, name, token, token_hash, doc) VALUES (?,?,?,?,?)",
                    (user.uuid, user.name, *self._user_row(user)),
                )
                is None
            ):
                return False
            self._write_memberships(conn, user)
            return True

        return self.db.run(tx)

    def get_user(self, *, name: str | None = None, uuid: str | None = None, token: str | None = None) -> User | None:
        if name is not None:
            column, value = "name", name
        elif uuid is not None:
            column, value = "uuid", uuid
        else:
            hashes = self.tokens.hashes(token or "")
            if hashes is not None:  # sealed: by the keyed hash alone, never by a token in clear
                marks = ",".join("?" * len(hashes))
                row = self.db.read(
                    lambda c: c.execute(f"SELECT doc FROM users WHERE token_hash IN ({marks})", hashes).fetchone()
                )
                return self._user(row[0]) if row else None
            column, value = "token", token or ""
        row = self.db.read(lambda c: c.execute(f"SELECT doc FROM users WHERE {column}=?", (value,)).fetchone())
        return self._user(row[0]) if row else None

    def get_users(self, uuids: list[str]) -> dict[str, User]:
        if not uuids:
            return {}

        def tx(conn: sqlite3.Connection) -> list[Any]:
            marks = ",".join("?" * len(uuids))
            return conn.execute(f"SELECT doc FROM users WHERE uuid IN ({marks})", uuids).fetchall()

        users = [self._user(r[0]) for r in self.db.read(tx)]
        return {u.uuid: u for u in users}

    def update_user(self, user: User) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            changed = _write(
                conn,
                "UPDATE users SET name=?, token=?, token_hash=?, doc=? WHERE uuid=?",
                (user.name, *self._user_row(user), user.uuid),
            )
            if changed is None:
                return False
            if changed:
                self._write_memberships(conn, user)
            return changed > 0

        return self.db.run(tx)

    def delete_user(self, uuid: str) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM acl WHERE user_uuid=?", (uuid,))
            return conn.execute("DELETE FROM users WHERE uuid=?", (uuid,)).rowcount > 0

        return self.db.run(tx)

    def list_users(self, project_uuid: str | None, page_size: int, page_token: str) -> Page[User]:
        where, args = "1=1", []
        if project_uuid is not None:
            where = "t.uuid IN (SELECT user_uuid FROM memberships WHERE project_uuid=?)"
            args = [project_uuid]
        return self.db.read(lambda c: _page(c, "users", where, args, page_size, page_token, lambda r: self._user(r[1])))

    def acl_of_user(self, user_uuid: str) -> list[tuple[str, str, str]]:
        rows = self.db.read(
            lambda c: c.execute(
                "SELECT kind, project_uuid, name FROM acl WHERE user_uuid=? ORDER BY name", (user_uuid,)
            ).fetchall()
        )
        return [(r[0], r[1], r[2]) for r in rows]

    # --- topics -------------------------------------------------------------------------
    def _topic(self, conn: sqlite3.Connection, doc: str) -> Topic:
        topic = Topic(**json.loads(doc))
        topic.acl = self._acl(conn, "topic", topic.project_uuid, topic.name)
        return topic

    def create_topic(self, topic: Topic) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            if (
                _write(
                    conn,
                    "INSERT INTO topics (project_uuid, name, doc) VALUES (?,?,?)",
                    (topic.project_uuid, topic.name, _dump(to_doc(topic) | {"acl": []})),
                )
                is None
            ):
                return False
            self._set_acl(conn, "topic", topic.project_uuid, topic.name, topic.acl)
            return True

        return self.db.run(tx)

    def get_topic(self, project_uuid: str, name: str) -> Topic | None:
        def tx(conn: sqlite3.Connection) -> Topic | None:
            row = conn.execute(
                "SELECT doc FROM topics WHERE project_uuid=? AND name=?", (project_uuid, name)
            ).fetchone()
            return self._topic(conn, row[0]) if row else None

        return self.db.read(tx)

    def update_topic(self, topic: Topic) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE topics SET doc=? WHERE project_uuid=? AND name=?",
                (_dump(to_doc(topic) | {"acl": []}), topic.project_uuid, topic.name),
            )
            if cur.rowcount:
                self._set_acl(conn, "topic", topic.project_uuid, topic.name, topic.acl)
            return cur.rowcount > 0

        return self.db.run(tx)

    def delete_topic(self, project_uuid: str, name: str) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM acl WHERE kind='topic' AND project_uuid=? AND name=?", (project_uuid, name))
            conn.execute("DELETE FROM usage WHERE kind='topic' AND project_uuid=? AND name=?", (project_uuid, name))
            return conn.execute("DELETE FROM topics WHERE project_uuid=? AND name=?", (project_uuid, name)).rowcount > 0

        return self.db.run(tx)

    def list_topics(self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str) -> Page[Topic]:
        where, args = "t.project_uuid=?", [project_uuid]
        if acl_user is not None:
            where += " AND EXISTS (SELECT 1 FROM acl a WHERE a.kind='topic' AND a.project_uuid=t.project_uuid"
            where += " AND a.name=t.name AND a.user_uuid=?)"
            args.append(acl_user)
        return self.db.read(
            lambda c: _page(c, "topics", where, args, page_size, page_token, lambda r: self._topic(c, r[1]))
        )

    # --- subscriptions ------------------------------------------------------------------
    def _sub(self, conn: sqlite3.Connection, doc: str) -> Subscription:
        sub = sub_from_doc(json.loads(doc))
        sub.acl = self._acl(conn, "sub", sub.project_uuid, sub.name)
        return sub

    def create_subscription(self, sub: Subscription, start_offset: int) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            if (
                _write(
                    conn,
                    "INSERT INTO subscriptions (project_uuid, name, topic, doc, cursor) VALUES (?,?,?,?,?)",
                    (
                        sub.project_uuid,
                        sub.name,
                        sub.topic,
                        _dump(to_doc(sub) | {"acl": []}),
                        _dump(cursor_to_doc(Cursor(offset=start_offset))),
                    ),
                )
                is None
            ):
                return False
            self._set_acl(conn, "sub", sub.project_uuid, sub.name, sub.acl)
            return True

        return self.db.run(tx)

    def get_subscription(self, project_uuid: str, name: str) -> Subscription | None:
        def tx(conn: sqlite3.Connection) -> Subscription | None:
            row = conn.execute(
                "SELECT doc FROM subscriptions WHERE project_uuid=? AND name=?", (project_uuid, name)
            ).fetchone()
            return self._sub(conn, row[0]) if row else None

        return self.db.read(tx)

    def update_subscription(self, sub: Subscription) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE subscriptions SET doc=? WHERE project_uuid=? AND name=?",
                (_dump(to_doc(sub) | {"acl": []}), sub.project_uuid, sub.name),
            )
            if cur.rowcount:
                self._set_acl(conn, "sub", sub.project_uuid, sub.name, sub.acl)
            return cur.rowcount > 0

        return self.db.run(tx)

    def delete_subscription(self, project_uuid: str, name: str) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM acl WHERE kind='sub' AND project_uuid=? AND name=?", (project_uuid, name))
            conn.execute("DELETE FROM usage WHERE kind='sub' AND project_uuid=? AND name=?", (project_uuid, name))
            cur = conn.execute("DELETE FROM subscriptions WHERE project_uuid=? AND name=?", (project_uuid, name))
            return cur.rowcount > 0

        return self.db.run(tx)

    def list_subscriptions(
        self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str
    ) -> Page[Subscription]:
        where, args = "t.project_uuid=?", [project_uuid]
        if acl_user is not None:
            where += " AND EXISTS (SELECT 1 FROM acl a WHERE a.kind='sub' AND a.project_uuid=t.project_uuid"
            where += " AND a.name=t.name AND a.user_uuid=?)"
            args.append(acl_user)
        return self.db.read(
            lambda c: _page(c, "subscriptions", where, args, page_size, page_token, lambda r: self._sub(c, r[1]))
        )

    def push_subscriptions(self) -> list[Subscription]:
        def tx(conn: sqlite3.Connection) -> list[Subscription]:
            rows = conn.execute(
                "SELECT doc FROM subscriptions WHERE json_extract(doc, '$.push.type') != '' ORDER BY seq"
            ).fetchall()
            return [self._sub(conn, r[0]) for r in rows]

        return self.db.read(tx)

    def subscriptions_of_topic(self, project_uuid: str, topic: str) -> list[str]:
        rows = self.db.read(
            lambda c: c.execute(
                "SELECT name FROM subscriptions WHERE project_uuid=? AND topic=? ORDER BY seq DESC",
                (project_uuid, topic),
            ).fetchall()
        )
        return [r[0] for r in rows]

    # --- snapshots ----------------------------------------------------------------------
    def create_snapshot(self, snapshot: Snapshot) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            written = _write(
                conn,
                "INSERT INTO snapshots (project_uuid, name, subscription, doc) VALUES (?,?,?,?)",
                (snapshot.project_uuid, snapshot.name, snapshot.subscription, _dump(snapshot_to_doc(snapshot))),
            )
            return written is not None

        return self.db.run(tx)

    def get_snapshot(self, project_uuid: str, name: str) -> Snapshot | None:
        row = self.db.read(
            lambda c: c.execute(
                "SELECT doc FROM snapshots WHERE project_uuid=? AND name=?", (project_uuid, name)
            ).fetchone()
        )
        return snapshot_from_doc(json.loads(row[0])) if row else None

    def delete_snapshot(self, project_uuid: str, name: str) -> bool:
        query = "DELETE FROM snapshots WHERE project_uuid=? AND name=?"
        return self.db.run(lambda c: c.execute(query, (project_uuid, name)).rowcount) > 0

    def list_snapshots(self, project_uuid: str, page_size: int, page_token: str) -> Page[Snapshot]:
        return self.db.read(
            lambda c: _page(
                c,
                "snapshots",
                "t.project_uuid=?",
                [project_uuid],
                page_size,
                page_token,
                lambda r: snapshot_from_doc(json.loads(r[1])),
            )
        )

    def snapshots_of_subscription(self, project_uuid: str, subscription: str) -> list[str]:
        rows = self.db.read(
            lambda c: c.execute(
                "SELECT name FROM snapshots WHERE project_uuid=? AND subscription=? ORDER BY seq DESC",
                (project_uuid, subscription),
            ).fetchall()
        )
        return [r[0] for r in rows]

    # --- schemas ------------------------------------------------------------------------
    def create_schema(self, schema: Schema) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            written = _write(
                conn,
                "INSERT INTO schemas (project_uuid, uuid, name, doc) VALUES (?,?,?,?)",
                (schema.project_uuid, schema.uuid, schema.name, _dump(to_doc(schema))),
            )
            return written is not None

        return self.db.run(tx)

    def get_schema(self, project_uuid: str, *, name: str | None = None, uuid: str | None = None) -> Schema | None:
        column, value = ("name", name) if name is not None else ("uuid", uuid)
        row = self.db.read(
            lambda c: c.execute(
                f"SELECT doc FROM schemas WHERE project_uuid=? AND {column}=?", (project_uuid, value)
            ).fetchone()
        )
        return schema_from_doc(json.loads(row[0])) if row else None

    def list_schemas(self, project_uuid: str) -> list[Schema]:
        rows = self.db.read(
            lambda c: c.execute("SELECT doc FROM schemas WHERE project_uuid=? ORDER BY seq", (project_uuid,)).fetchall()
        )
        return [schema_from_doc(json.loads(r[0])) for r in rows]

    def update_schema(self, schema: Schema, expected_revision_id: str | None = None) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            sql = "UPDATE schemas SET name=?, doc=? WHERE uuid=?"
            args = [schema.name, _dump(to_doc(schema)), schema.uuid]
            if expected_revision_id is not None:
                sql += " AND COALESCE(json_extract(doc, '$.revision_id'), '')=?"
                args.append(expected_revision_id)
            changed = _write(conn, sql, args)
            return bool(changed)  # None: the name is taken; 0: no such schema (or not at that revision)

        return self.db.run(tx)

    def delete_schema(self, project_uuid: str, uuid: str) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            rows = conn.execute(
                "SELECT seq, doc FROM topics WHERE project_uuid=? AND json_extract(doc, '$.schema_uuid')=?",
                (project_uuid, uuid),
            ).fetchall()
            for seq, doc in rows:
                detached = json.loads(doc) | {"schema_uuid": "", "schema_encoding": ""}
                conn.execute("UPDATE topics SET doc=? WHERE seq=?", (_dump(detached), seq))
            return (
                conn.execute("DELETE FROM schemas WHERE project_uuid=? AND uuid=?", (project_uuid, uuid)).rowcount > 0
            )

        return self.db.run(tx)

    # --- registrations ------------------------------------------------------------------
    def create_registration(self, registration: Registration) -> None:
        self.db.run(
            lambda c: c.execute(
                "INSERT INTO registrations (uuid, doc) VALUES (?,?)", (registration.uuid, _dump(to_doc(registration)))
            )
        )

    def get_registration(self, uuid: str) -> Registration | None:
        row = self.db.read(lambda c: c.execute("SELECT doc FROM registrations WHERE uuid=?", (uuid,)).fetchone())
        return Registration(**json.loads(row[0])) if row else None

    def list_registrations(self, filters: dict[str, str]) -> list[Registration]:
        # filter keys come from a fixed set (the service checks them), values are bound parameters
        where = " AND ".join(f"json_extract(doc, '$.{key}')=?" for key in filters) or "1=1"
        rows = self.db.read(
            lambda c: c.execute(
                f"SELECT doc FROM registrations WHERE {where} ORDER BY seq", list(filters.values())
            ).fetchall()
        )
        return [Registration(**json.loads(r[0])) for r in rows]

    def update_registration(self, registration: Registration) -> bool:
        cur = self.db.run(
            lambda c: (
                c.execute(
                    "UPDATE registrations SET doc=? WHERE uuid=?", (_dump(to_doc(registration)), registration.uuid)
                ).rowcount
            )
        )
        return cur > 0

    def delete_registration(self, uuid: str) -> bool:
        return self.db.run(lambda c: c.execute("DELETE FROM registrations WHERE uuid=?", (uuid,)).rowcount) > 0

    # --- AuthN: service types and bindings ---------------------------------------------------
    def create_service_type(self, service_type: ServiceType) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            written = _write(
                conn,
                "INSERT INTO authn_service_types (uuid, name, doc) VALUES (?,?,?)",
                (service_type.uuid, service_type.name, _dump(to_doc(service_type))),
            )
            return written is not None

        return self.db.run(tx)

    def get_service_type(self, *, name: str | None = None, uuid: str | None = None) -> ServiceType | None:
        column, value = ("name", name) if name is not None else ("uuid", uuid)
        row = self.db.read(
            lambda c: c.execute(f"SELECT doc FROM authn_service_types WHERE {column}=?", (value,)).fetchone()
        )
        return service_type_from_doc(json.loads(row[0])) if row else None

    def list_service_types(self) -> list[ServiceType]:
        rows = self.db.read(lambda c: c.execute("SELECT doc FROM authn_service_types ORDER BY seq").fetchall())
        return [service_type_from_doc(json.loads(r[0])) for r in rows]

    def update_service_type(self, service_type: ServiceType) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            changed = _write(
                conn,
                "UPDATE authn_service_types SET name=?, doc=? WHERE uuid=?",
                (service_type.name, _dump(to_doc(service_type)), service_type.uuid),
            )
            return bool(changed)  # None: the name is taken; 0: no such service type

        return self.db.run(tx)

    def delete_service_type(self, uuid: str) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            conn.execute("DELETE FROM authn_bindings WHERE service_uuid=?", (uuid,))
            return conn.execute("DELETE FROM authn_service_types WHERE uuid=?", (uuid,)).rowcount > 0

        return self.db.run(tx)

    @staticmethod
    def _binding_row(binding: Binding) -> tuple[str, ...]:
        """(name, service_uuid, host, auth_type, auth_identifier, doc): the columns a write sets."""
        return (
            binding.name,
            binding.service_uuid,
            binding.host,
            binding.auth_type,
            binding.auth_identifier,
            _dump(to_doc(binding)),
        )

    @staticmethod
    def _binding_conflict(conn: sqlite3.Connection, binding: Binding, other_than: int) -> BindingWrite | None:
        """After a UNIQUE constraint refused ``binding``: which rule, against a row other than
        seq ``other_than`` (the one an update rewrites); the name first. None: neither (its uuid
        is taken, no outcome of the contract)."""
        if conn.execute("SELECT 1 FROM authn_bindings WHERE name=? AND seq!=?", (binding.name, other_than)).fetchone():
            return "name"
        if conn.execute(
            "SELECT 1 FROM authn_bindings WHERE service_uuid=? AND host=? AND auth_type=? AND auth_identifier=?"
            " AND seq!=?",
            (binding.service_uuid, binding.host, binding.auth_type, binding.auth_identifier, other_than),
        ).fetchone():
            return "auth_identifier"
        return None

    def create_binding(self, binding: Binding) -> BindingWrite:
        def tx(conn: sqlite3.Connection) -> BindingWrite:
            try:
                conn.execute(
                    "INSERT INTO authn_bindings (uuid, name, service_uuid, host, auth_type, auth_identifier, doc)"
                    " VALUES (?,?,?,?,?,?,?)",
                    (binding.uuid, *self._binding_row(binding)),
                )
            except sqlite3.IntegrityError:
                conflict = self._binding_conflict(conn, binding, 0)  # seq starts at 1: no row is 0
                if conflict is None:
                    raise
                return conflict
            return "ok"

        return self.db.run(tx)

    def get_binding(self, name: str) -> Binding | None:
        row = self.db.read(lambda c: c.execute("SELECT doc FROM authn_bindings WHERE name=?", (name,)).fetchone())
        return binding_from_doc(json.loads(row[0])) if row else None

    def list_bindings(
        self, service_uuid: str | None, host: str | None, page_size: int, page_token: str
    ) -> Page[Binding]:
        clauses, args = ["1=1"], []
        if service_uuid is not None:
            clauses.append("t.service_uuid=?")
            args.append(service_uuid)
        if host is not None:
            clauses.append("t.host=?")
            args.append(host)
        where = " AND ".join(clauses)
        return self.db.read(
            lambda c: _page(
                c,
                "authn_bindings",
                where,
                args,
                page_size,
                page_token,
                lambda r: binding_from_doc(json.loads(r[1])),
                oldest_first=True,
            )
        )

    def find_binding(
        self, service_uuid: str, host: str, auth_identifiers: Sequence[str], auth_type: str = "x509"
    ) -> Binding | None:
        dns = binding_identifiers(auth_identifiers)
        if not dns:
            return None
        marks = ",".join("?" * len(dns))
        row = self.db.read(
            lambda c: c.execute(
                "SELECT doc FROM authn_bindings WHERE service_uuid=? AND host=? AND auth_type=?"
                f" AND auth_identifier IN ({marks}) ORDER BY seq LIMIT 1",
                [service_uuid, host, auth_type, *dns],
            ).fetchone()
        )
        return binding_from_doc(json.loads(row[0])) if row else None

    def update_binding(self, name: str, binding: Binding) -> BindingWrite:
        def tx(conn: sqlite3.Connection) -> BindingWrite:
            row = conn.execute("SELECT seq, doc FROM authn_bindings WHERE name=?", (name,)).fetchone()
            if row is None:
                return "missing"
            seq, stored = row[0], binding_from_doc(json.loads(row[1]))
            new = dataclasses.replace(binding, uuid=stored.uuid, created_on=stored.created_on)
            try:
                conn.execute(
                    "UPDATE authn_bindings SET name=?, service_uuid=?, host=?, auth_type=?, auth_identifier=?, doc=?"
                    " WHERE seq=?",
                    (*self._binding_row(new), seq),
                )
            except sqlite3.IntegrityError:
                conflict = self._binding_conflict(conn, new, seq)
                if conflict is None:
                    raise
                return conflict
            return "ok"

        return self.db.run(tx)

    def delete_binding(self, name: str) -> bool:
        return self.db.run(lambda c: c.execute("DELETE FROM authn_bindings WHERE name=?", (name,)).rowcount) > 0

    def record_binding_use(self, uuid: str, when: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT seq, doc FROM authn_bindings WHERE uuid=?", (uuid,)).fetchone()
            if row:
                doc = json.loads(row[1]) | {"last_auth": when}
                conn.execute("UPDATE authn_bindings SET doc=? WHERE seq=?", (_dump(doc), row[0]))

        self.db.run(tx)

    # --- usage and operational metrics ------------------------------------------------------
    def add_usage(self, batch: UsageBatch) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            for kind, rows in (("topic", batch.topics), ("sub", batch.subs)):
                conn.executemany(
                    "INSERT INTO usage (kind, project_uuid, name, messages, bytes, latest_ns, rate)"
                    " VALUES (?,?,?,?,?,?,?) ON CONFLICT (kind, project_uuid, name) DO UPDATE SET"
                    " messages = messages + excluded.messages, bytes = bytes + excluded.bytes,"
                    " latest_ns = MAX(latest_ns, excluded.latest_ns),"
                    " rate = CASE WHEN excluded.latest_ns >= latest_ns THEN excluded.rate ELSE rate END",
                    [(kind, p, n, u.messages, u.bytes, u.latest_ns, u.rate) for (p, n), u in rows.items()],
                )
            conn.executemany(
                "INSERT INTO daily_messages (project_uuid, topic, day, messages) VALUES (?,?,?,?)"
                " ON CONFLICT (project_uuid, topic, day) DO UPDATE SET messages = messages + excluded.messages",
                [(p, t, d, n) for (p, t, d), n in batch.daily.items()],
            )

        self.db.run(tx)

    def usage(self, kind: str, project_uuid: str, name: str) -> Usage:
        row = self.db.read(
            lambda c: c.execute(
                "SELECT messages, bytes, latest_ns, rate FROM usage WHERE kind=? AND project_uuid=? AND name=?",
                (kind, project_uuid, name),
            ).fetchone()
        )
        return Usage(*row) if row else Usage()

    def all_usage(self, kind: str) -> list[tuple[str, str, Usage]]:
        rows = self.db.read(
            lambda c: c.execute(
                "SELECT project_uuid, name, messages, bytes, latest_ns, rate FROM usage WHERE kind=?", (kind,)
            ).fetchall()
        )
        return [(r[0], r[1], Usage(*r[2:])) for r in rows]

    def _merged_daily(self, where: str, args: list[str]) -> dict[DailyKey, int]:
        """Live counters and Spark figures of the rows ``where`` selects, merged (``merge_daily``)."""
        today = utc_today()

        def read(conn: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
            columns = "SELECT project_uuid, topic, day, messages FROM"
            live = conn.execute(f"{columns} daily_messages WHERE {where}", args).fetchall()
            spark = conn.execute(f"{columns} usage_daily WHERE {where} AND day < ?", [*args, today]).fetchall()
            return live, spark

        live, spark = self.db.read(read)
        return merge_daily(
            (((p, t, d), int(n)) for p, t, d, n in live), (((p, t, d), int(n)) for p, t, d, n in spark), today
        )

    def daily_messages(self, project_uuid: str, topic: str | None, days: int) -> list[tuple[str, int]]:
        where, args = "project_uuid=?", [project_uuid]
        if topic is not None:
            where += " AND topic=?"
            args.append(topic)
        return daily_series(self._merged_daily(where, args), days)

    def daily_totals(self, start: str, end: str) -> dict[str, int]:
        return project_totals(self._merged_daily("day >= ? AND day <= ?", [start, end]))

    def replace_daily_usage(self, day: str, rows: list[DailyUsage]) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM usage_daily WHERE day=?", (day,))
            conn.executemany(
                "INSERT INTO usage_daily (day, project_uuid, topic, messages, bytes) VALUES (?,?,?,?,?)",
                [(day, r.project_uuid, r.topic, r.messages, r.bytes) for r in rows],
            )

        self.db.run(tx)

    def created_between(self, project_uuid: str, start_ns: int, end_ns: int) -> tuple[int, int, int]:
        def tx(conn: sqlite3.Connection) -> tuple[int, int, int]:
            window = "json_extract(doc, '$.created_on') BETWEEN ? AND ?"
            topics = conn.execute(
                f"SELECT COUNT(*) FROM topics WHERE project_uuid=? AND {window}", (project_uuid, start_ns, end_ns)
            ).fetchone()[0]
            subs = conn.execute(
                f"SELECT COUNT(*) FROM subscriptions WHERE project_uuid=? AND {window}",
                (project_uuid, start_ns, end_ns),
            ).fetchone()[0]
            users = conn.execute(
                f"SELECT COUNT(*) FROM users WHERE {window}"
                " AND uuid IN (SELECT user_uuid FROM memberships WHERE project_uuid=?)",
                (start_ns, end_ns, project_uuid),
            ).fetchone()[0]
            return int(topics), int(subs), int(users)

        return self.db.read(tx)

    def put_node_metrics(self, hostname: str, cpu: float, memory: float) -> None:
        self.db.run(
            lambda c: c.execute(
                "INSERT INTO node_metrics (hostname, cpu, memory) VALUES (?,?,?)"
                " ON CONFLICT (hostname) DO UPDATE SET cpu = excluded.cpu, memory = excluded.memory",
                (hostname, cpu, memory),
            )
        )

    def node_metrics(self) -> list[tuple[str, float, float]]:
        rows = self.db.read(
            lambda c: c.execute("SELECT hostname, cpu, memory FROM node_metrics ORDER BY hostname").fetchall()
        )
        return [(r[0], float(r[1]), float(r[2])) for r in rows]

    # --- cursors ------------------------------------------------------------------------
    def get_cursor(self, project_uuid: str, name: str) -> Cursor | None:
        row = self.db.read(
            lambda c: c.execute(
                "SELECT cursor, version FROM subscriptions WHERE project_uuid=? AND name=?",
                (project_uuid, name),
            ).fetchone()
        )
        return cursor_from_doc(json.loads(row[0]), row[1]) if row else None

    def swap_cursor(self, project_uuid: str, name: str, cursor: Cursor) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE subscriptions SET cursor=?, version=version+1 WHERE project_uuid=? AND name=? AND version=?",
                (_dump(cursor_to_doc(cursor)), project_uuid, name, cursor.version),
            )
            return cur.rowcount > 0

        return self.db.run(tx)


if TYPE_CHECKING:

    def _implements(store: SqliteMetadataStore) -> tuple[MetadataStore, SnapshotStore]:
        """Never called: mypy checks here that the class keeps both of its protocols."""
        return store, store
