"""MetadataStore and SnapshotStore on MongoDB.

Collections mirror the embedded store's tables: one document per project, user, topic,
subscription, snapshot, schema, registration, AuthN service type and binding (ACLs and memberships
embedded as arrays), plus usage counters. Every change is one atomic document operation; a
subscription's cursor changes only through a compare-and-swap on its ``version``, so many
stateless nodes can serve one subscription without losing an ack or advancing twice. Indexes
match the API's queries.

A subscription's cursor changes through an insert, not an update: each version of the cursor
is an immutable document keyed uniquely by (cursor_id, version), and moving from version v to
v+1 is inserting v+1, which exactly one writer can do. A filtered ``update_one`` would do on
MongoDB, but FerretDB's SQLite handler does not apply it atomically (measured: concurrent
compare-and-swaps on one document all "succeed"), while its unique indexes hold.

Old versions are deleted, but only once they are ``_KEEP_SECONDS`` old, and a writer whose
read is more than ``_STALE_SECONDS`` old does not write (it reads again). So the version a
writer would collide with is always still there: a deleted version can never be written again
by a late writer, which would otherwise "win" against a state it never saw and lose a lease.
The clean-up runs every ``_GC_EVERY`` versions while a cursor is written to, and once more when
it has been quiet for ``_KEEP_SECONDS`` (a background sweep), so that a drained subscription
keeps two versions, not the hundreds its last seconds wrote.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from bson import ObjectId
from bson.errors import InvalidId
from pymongo import ASCENDING, DESCENDING, MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError

from ams_app import __version__
from ams_app.backends.errors import LayoutRefused
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
Doc = dict[str, Any]

_STALE_SECONDS = 10.0
_KEEP_SECONDS = 30.0
_GC_EVERY = 32  # versions between two clean-ups of a cursor
_TIDY_EVERY_SECONDS = 5.0  # how often quiet cursors are looked for
_BINDING_WRITES = 3  # tries of a binding write whose conflicting binding vanished before it was found


@dataclasses.dataclass(frozen=True)
class _Mark:
    """A cursor version's ``store_mark`` here: the cursor it belongs to (apart from the
    subscription, so that a recreated subscription starts a cursor of its own) and when it was
    known to be the latest (time.monotonic()), to bound how old a read may write."""

    cursor_id: str
    read_at: float


_INDEXES: dict[str, list[tuple[list[tuple[str, int]], bool]]] = {
    "projects": [([("uuid", ASCENDING)], True), ([("name", ASCENDING)], True)],
    "users": [
        ([("uuid", ASCENDING)], True),
        ([("name", ASCENDING)], True),
        ([("token", ASCENDING)], True),
        ([("token_hash", ASCENDING)], True),  # sparse (_SPARSE)
        ([("projects.project_uuid", ASCENDING)], False),
    ],
    "topics": [([("project_uuid", ASCENDING), ("name", ASCENDING)], True), ([("acl", ASCENDING)], False)],
    "subscriptions": [
        ([("project_uuid", ASCENDING), ("name", ASCENDING)], True),
        ([("project_uuid", ASCENDING), ("topic", ASCENDING)], False),
        ([("acl", ASCENDING)], False),
    ],
    "snapshots": [
        ([("project_uuid", ASCENDING), ("name", ASCENDING)], True),
        ([("project_uuid", ASCENDING), ("subscription", ASCENDING)], False),
    ],
    "schemas": [([("project_uuid", ASCENDING), ("name", ASCENDING)], True), ([("uuid", ASCENDING)], True)],
    "registrations": [([("uuid", ASCENDING)], True)],
    # AuthN (docs/authn.md); the bindings' DN index is also find_binding's
    "authn_service_types": [([("uuid", ASCENDING)], True), ([("name", ASCENDING)], True)],
    "authn_bindings": [
        ([("uuid", ASCENDING)], True),
        ([("name", ASCENDING)], True),
        (
            [
                ("service_uuid", ASCENDING),
                ("host", ASCENDING),
                ("auth_type", ASCENDING),
                ("auth_identifier", ASCENDING),
            ],
            True,
        ),
    ],
    "cursors": [([("cursor_id", ASCENDING), ("version", ASCENDING)], True)],
    "usage": [([("kind", ASCENDING), ("project_uuid", ASCENDING), ("name", ASCENDING)], True)],
    "daily_messages": [
        ([("project_uuid", ASCENDING), ("topic", ASCENDING), ("day", ASCENDING)], True),
        ([("day", ASCENDING)], False),
    ],
    "node_metrics": [([("hostname", ASCENDING)], True)],
    # written by the Spark job usage_report (docs/spark.md), read here
    "usage_daily": [
        ([("day", ASCENDING), ("project_uuid", ASCENDING), ("topic", ASCENDING)], True),
        ([("project_uuid", ASCENDING), ("topic", ASCENDING)], False),
    ],
}

#: Indexes (collection, first key) that only documents holding the key are in: a user has a
#: token_hash only while token_key_file is set (ams_app/backends/user_tokens.py).
_SPARSE = {("users", "token_hash")}


#: How FerretDB words a unique index's refusal of an update: its SQLite handler passes SQLite's
#: message on, its PostgreSQL handler PostgreSQL's (SQLSTATE 23505, unique_violation).
_DUPLICATE_MESSAGES = ("UNIQUE constraint failed", "duplicate key value violates unique constraint")


def _duplicate(exc: OperationFailure) -> bool:
    """A unique index refused the write: MongoDB says DuplicateKeyError (11000); FerretDB
    reports a failed update as a generic error carrying its SQL backend's constraint message."""
    return isinstance(exc, DuplicateKeyError) or exc.code == 11000 or any(m in str(exc) for m in _DUPLICATE_MESSAGES)


def unstorable_text(exc: OperationFailure) -> bool:
    """The store refused a string it cannot hold: FerretDB's PostgreSQL handler keeps documents as
    PostgreSQL jsonb, which has no NUL character (SQLSTATE 22P05), whether in a value to write or
    in a query. MongoDB holds any string; this is the tests' stand-in's limit."""
    return "SQLSTATE 22P05" in str(exc)


def _strip(doc: Doc | None) -> Doc | None:
    if doc is None:
        return None
    return {k: v for k, v in doc.items() if k not in ("_id", "cursor_id")}


def _encode_token(oid: ObjectId) -> str:
    return base64.urlsafe_b64encode(str(oid).encode()).decode()


def _decode_token(token: str) -> ObjectId:
    try:
        return ObjectId(base64.urlsafe_b64decode(token.encode()).decode())
    except (binascii.Error, ValueError, UnicodeDecodeError, InvalidId, TypeError) as exc:
        raise InvalidPageToken(token) from exc


def legacy_revision_id(schema_uuid: str) -> str:
    """The revision id of a schema that a release before revisions wrote (none stored): derived from
    its uuid, so that every node reads the same one."""
    return hashlib.sha256(schema_uuid.encode()).hexdigest()[:8]


def _schema_from(stored: Doc) -> Schema:
    doc = _strip(stored) or {}
    doc["schema"] = json.loads(doc.pop("raw_schema"))
    if "revision_id" not in doc:  # written before revisions: its first revision, created with it
        doc["revision_id"] = legacy_revision_id(doc["uuid"])
        oid = stored.get("_id")
        doc["revision_created_ns"] = int(oid.generation_time.timestamp()) * 10**9 if isinstance(oid, ObjectId) else 0
    doc["revisions"] = [
        {k: v for k, v in r.items() if k != "raw_schema"} | {"schema": json.loads(r["raw_schema"])}
        for r in doc.get("revisions", [])
    ]
    return schema_from_doc(doc)


def _schema_query(uuid: str, expected_revision_id: str | None) -> Doc:
    """The schema of ``uuid``; given ``expected_revision_id``, only while that is its current
    revision (a document without one is at its legacy_revision_id, as _schema_from reads it)."""
    if expected_revision_id is None:
        return {"uuid": uuid}
    if expected_revision_id == legacy_revision_id(uuid):
        return {"uuid": uuid, "$or": [{"revision_id": expected_revision_id}, {"revision_id": {"$exists": False}}]}
    return {"uuid": uuid, "revision_id": expected_revision_id}


def _schema_doc(schema: Schema) -> Doc:
    doc = to_doc(schema)
    # JSON Schema keys ($ref, $id) are no Mongo field names: the schemas are kept as JSON text
    doc["raw_schema"] = json.dumps(doc.pop("schema"))
    for revision in doc["revisions"]:
        revision["raw_schema"] = json.dumps(revision.pop("schema"))
    return doc


#: The version of the database layout this release reads and writes (its collections, fields and
#: indexes), kept in the database's ``ams_layout`` collection, as the embedded backend keeps its
#: schema version (docs/production.md, "Upgrading"). A release opens a database of its own version
#: or older, bringing an older one up to its own (``_LAYOUT_STEPS``), and refuses a newer one: a
#: downgrade would write what its code does not know. A database of a release before versions (no
#: ``ams_layout``) is of version 1, the first one.
LAYOUT_VERSION = 1
#: The steps from each version to the next: ``_LAYOUT_STEPS[i]`` takes version i + 1 to i + 2.
_LAYOUT_STEPS: tuple[Callable[[Database[Doc]], None], ...] = ()
LAYOUT_COLLECTION = "ams_layout"
#: The ``ams_layout`` document a restore writes first and removes last (ams_app/backup.py): while it
#: is there, the database is not opened.
RESTORING_ID = "restoring"
#: Collections of the original ARGO AMS's database (the Go server's) that this layout has not: a
#: database that holds them and no ``ams_layout`` is the original's, and is never written to here.
ORIGINAL_COLLECTIONS = ("daily_topic_msg_count", "user_registrations", "op_metrics", "roles")


def layout_version(db: Database[Doc]) -> int | None:
    """The layout version a database records; None when it records none (a new database, one of a
    release before versions, or one that is not ours)."""
    found = db[LAYOUT_COLLECTION].find_one({"_id": "layout"})
    return int(found["version"]) if found is not None else None


def check_layout(db: Database[Doc]) -> int | None:
    """What opening ``db`` finds: its recorded layout version, or None for one that records none.
    Raises LayoutRefused for a newer layout, or for the original's database."""
    found = layout_version(db)
    if db[LAYOUT_COLLECTION].find_one({"_id": RESTORING_ID}) is not None:
        raise LayoutRefused(
            f"a restore into the metadata database {db.name!r} did not finish: run `ams restore` again "
            "(docs/production.md, 'Backup and restore')"
        )
    if found is not None and found > LAYOUT_VERSION:
        raise LayoutRefused(
            f"the metadata database {db.name!r} is at layout version {found}, this release of ams knows "
            f"versions up to {LAYOUT_VERSION}: a newer release wrote it, and downgrades are not supported "
            "(docs/production.md, 'Upgrading')"
        )
    if found is None:
        original = sorted(set(ORIGINAL_COLLECTIONS) & set(db.list_collection_names()))
        if original:
            raise LayoutRefused(
                f"the metadata database {db.name!r} is in the original ARGO AMS's layout ({', '.join(original)}): "
                "ams does not write to it: give ams a database of its own (mongo_database)"
            )
    return found


class MongoMetadataStore:
    def __init__(self, uri: str, database: str, timeout_seconds: float = 10.0, keyring: Keyring | None = None) -> None:
        """Connect, check the database's layout (LayoutRefused: not one to open), bring it to this
        release's, make the indexes; users' tokens are sealed under ``keyring`` (None: in clear)."""
        ms = int(timeout_seconds * 1000)
        self.client: MongoClient[Doc] = MongoClient(
            uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, socketTimeoutMS=ms * 3, appname="ams"
        )
        self.db = self.client[database]
        try:
            found = check_layout(self.db)  # before anything is written
        except BaseException:
            self.client.close()
            raise
        for step in _LAYOUT_STEPS[(found or 1) - 1 :]:
            step(self.db)
        for name, indexes in _INDEXES.items():
            for keys, unique in indexes:
                self.db[name].create_index(keys, unique=unique, sparse=(name, keys[0][0]) in _SPARSE)
        self._record_layout(found)
        # cursors written to lately -> when to tidy them: the versions a cursor's last writes left
        # behind go once it has been quiet for _KEEP_SECONDS (the every-_GC_EVERY clean-up only
        # runs while it is written to, so a drained subscription kept them for ever)
        self._untidy: dict[str, float] = {}
        self._tidier: threading.Thread | None = None
        self._closing = threading.Event()
        self.tokens = UserTokens(keyring)
        try:
            self._seal_tokens(rotate=False)
        except BaseException:
            self.client.close()
            raise

    def _record_layout(self, found: int | None) -> None:
        """Record this release's layout version (nodes starting together: one writes it first)."""
        layouts = self.db[LAYOUT_COLLECTION]
        if found is None:
            with contextlib.suppress(DuplicateKeyError):
                layouts.insert_one({"_id": "layout", "version": LAYOUT_VERSION, "release": __version__})
        elif found < LAYOUT_VERSION:
            layouts.update_one(
                {"_id": "layout", "version": {"$lt": LAYOUT_VERSION}},
                {"$set": {"version": LAYOUT_VERSION, "release": __version__}},
            )

    def _c(self, name: str) -> Collection[Doc]:
        return self.db[name]

    def ping(self) -> None:
        self.client.admin.command("ping")

    def close(self) -> None:
        self._closing.set()
        if self._tidier is not None:
            self._tidier.join(timeout=5)
        self.client.close()

    def _tidy_later(self, cursor_id: str) -> None:
        self._untidy[cursor_id] = time.monotonic() + _KEEP_SECONDS + 1
        if self._tidier is None:
            self._tidier = threading.Thread(target=self._tidy_loop, name="ams-cursor-tidy", daemon=True)
            self._tidier.start()

    def _tidy_loop(self) -> None:
        while not self._closing.wait(_TIDY_EVERY_SECONDS):
            now = time.monotonic()
            for cursor_id in [c for c, due in list(self._untidy.items()) if due <= now]:
                self._untidy.pop(cursor_id, None)
                try:
                    self.tidy_cursor(cursor_id)
                except PyMongoError:
                    self._untidy.setdefault(cursor_id, now + _TIDY_EVERY_SECONDS)  # the server is away: later

    def tidy_cursor(self, cursor_id: str) -> int:
        """Delete a cursor's versions before its last two that are older than _KEEP_SECONDS; how many."""
        latest = self._c("cursors").find_one({"cursor_id": cursor_id}, {"version": 1}, sort=[("version", DESCENDING)])
        if latest is None:
            return 0
        aged = [{"at": {"$lt": time.time() - _KEEP_SECONDS}}, {"at": {"$exists": False}}]  # the first has none
        done = self._c("cursors").delete_many(
            {"cursor_id": cursor_id, "version": {"$lt": int(latest["version"]) - 1}, "$or": aged}
        )
        return int(done.deleted_count)

    @staticmethod
    def _insert(collection: Collection[Doc], doc: Doc) -> bool:
        try:
            collection.insert_one(doc)
        except OperationFailure as exc:
            if _duplicate(exc):
                return False
            raise
        return True

    @staticmethod
    def _replace(collection: Collection[Doc], query: Doc, doc: Doc) -> bool:
        """Replace one document; False when it is missing or a unique index refuses it."""
        try:
            return collection.replace_one(query, doc).matched_count > 0
        except OperationFailure as exc:
            if _duplicate(exc):
                return False
            raise

    def _page(
        self,
        name: str,
        query: Doc,
        page_size: int,
        page_token: str,
        build: Callable[[Doc], T],
        oldest_first: bool = False,
    ) -> Page[T]:
        """A page of the documents ``query`` selects, newest first (or oldest first); a page
        token is the _id of the first document of its page."""
        collection = self._c(name)
        total = collection.count_documents(query)
        find = dict(query)
        if page_token:
            find["_id"] = {"$gte" if oldest_first else "$lte": _decode_token(page_token)}
        cursor = collection.find(find).sort("_id", ASCENDING if oldest_first else DESCENDING)
        if page_size > 0:
            cursor = cursor.limit(page_size + 1)
        return page_of(list(cursor), page_size, total, lambda d: _encode_token(d["_id"]), build)

    # --- projects -------------------------------------------------------------------------
    def create_project(self, project: Project) -> bool:
        return self._insert(self._c("projects"), to_doc(project))

    def get_project(self, *, name: str | None = None, uuid: str | None = None) -> Project | None:
        query = {"name": name} if name is not None else {"uuid": uuid}
        doc = _strip(self._c("projects").find_one(query))
        return Project(**doc) if doc else None

    def list_projects(self) -> list[Project]:
        return [Project(**_strip(d) or {}) for d in self._c("projects").find().sort("_id", ASCENDING)]

    def update_project(self, project: Project) -> bool:
        return self._replace(self._c("projects"), {"uuid": project.uuid}, to_doc(project))

    def delete_project(self, uuid: str) -> list[str]:
        topics = [d["name"] for d in self._c("topics").find({"project_uuid": uuid}, {"name": 1})]
        cursor_ids = [d["cursor_id"] for d in self._c("subscriptions").find({"project_uuid": uuid}, {"cursor_id": 1})]
        self._c("cursors").delete_many({"cursor_id": {"$in": cursor_ids}})
        for name in ("topics", "subscriptions", "snapshots", "schemas", "usage", "daily_messages", "usage_daily"):
            self._c(name).delete_many({"project_uuid": uuid})
        for doc in self._c("users").find({"projects.project_uuid": uuid}):
            kept = [m for m in doc.get("projects", []) if m.get("project_uuid") != uuid]
            self._c("users").update_one({"_id": doc["_id"]}, {"$set": {"projects": kept}})
        self._c("projects").delete_one({"uuid": uuid})
        return topics

    # --- users ----------------------------------------------------------------------------
    def _user(self, doc: Doc) -> User:
        fields = _strip(doc) or {}
        fields.pop("token_hash", None)
        fields["token"] = self.tokens.clear(fields["token"])
        return user_from_doc(fields)

    def _user_doc(self, user: User) -> Doc:
        stored = self.tokens.stored(user.token)
        doc = to_doc(user) | {"token": stored.value}
        if stored.hash is not None:
            doc["token_hash"] = stored.hash
        return doc

    def _seal_tokens(self, rotate: bool) -> int:
        """Seal the tokens kept in clear, and with ``rotate`` those under an older key; how many
        users changed (ams_app/backends/user_tokens.py). Each document changes only if its token
        is still the one read, so that nodes starting together, or a token refreshed meanwhile,
        lose nothing."""
        users = self._c("users")
        query: Doc = {} if self.tokens.keyring is not None else {"token_hash": {"$exists": True}}
        rows = [(d["_id"], str(d.get("token", ""))) for d in users.find(query, {"token": 1})]
        changed = 0
        for _id, old, new in self.tokens.plan(rows, rotate):
            done = users.update_one({"_id": _id, "token": old}, {"$set": {"token": new.value, "token_hash": new.hash}})
            changed += done.modified_count
        return changed

    def reseal_tokens(self) -> int:
        if self.tokens.keyring is None:
            raise TokenSealError("token_key_file is not set: no key to seal the tokens with")
        return self._seal_tokens(rotate=True)

    def create_user(self, user: User) -> bool:
        return self._insert(self._c("users"), self._user_doc(user))

    def get_user(self, *, name: str | None = None, uuid: str | None = None, token: str | None = None) -> User | None:
        query: Doc
        if name is not None:
            query = {"name": name}
        elif uuid is not None:
            query = {"uuid": uuid}
        else:
            hashes = self.tokens.hashes(token or "")
            # sealed: by the keyed hash alone, never by a token in clear
            query = {"token": token or "\0"} if hashes is None else {"token_hash": {"$in": hashes}}
        doc = self._c("users").find_one(query)
        return self._user(doc) if doc else None

    def get_users(self, uuids: list[str]) -> dict[str, User]:
        if not uuids:
            return {}
        users = [self._user(d) for d in self._c("users").find({"uuid": {"$in": uuids}})]
        return {u.uuid: u for u in users}

    def update_user(self, user: User) -> bool:
        return self._replace(self._c("users"), {"uuid": user.uuid}, self._user_doc(user))

    def delete_user(self, uuid: str) -> bool:
        for name in ("topics", "subscriptions"):
            self._c(name).update_many({"acl": uuid}, {"$pull": {"acl": uuid}})
        return self._c("users").delete_one({"uuid": uuid}).deleted_count > 0

    def list_users(self, project_uuid: str | None, page_size: int, page_token: str) -> Page[User]:
        query = {} if project_uuid is None else {"projects.project_uuid": project_uuid}
        return self._page("users", query, page_size, page_token, self._user)

    def acl_of_user(self, user_uuid: str) -> list[tuple[str, str, str]]:
        out = [("topic", d["project_uuid"], d["name"]) for d in self._c("topics").find({"acl": user_uuid})]
        out += [("sub", d["project_uuid"], d["name"]) for d in self._c("subscriptions").find({"acl": user_uuid})]
        return sorted(out, key=lambda entry: entry[2])

    # --- topics ---------------------------------------------------------------------------
    def create_topic(self, topic: Topic) -> bool:
        return self._insert(self._c("topics"), to_doc(topic))

    def get_topic(self, project_uuid: str, name: str) -> Topic | None:
        doc = _strip(self._c("topics").find_one({"project_uuid": project_uuid, "name": name}))
        return Topic(**doc) if doc else None

    def update_topic(self, topic: Topic) -> bool:
        return self._replace(self._c("topics"), {"project_uuid": topic.project_uuid, "name": topic.name}, to_doc(topic))

    def delete_topic(self, project_uuid: str, name: str) -> bool:
        self._c("usage").delete_one({"kind": "topic", "project_uuid": project_uuid, "name": name})
        return self._c("topics").delete_one({"project_uuid": project_uuid, "name": name}).deleted_count > 0

    def list_topics(self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str) -> Page[Topic]:
        query: Doc = {"project_uuid": project_uuid}
        if acl_user is not None:
            query["acl"] = acl_user
        return self._page("topics", query, page_size, page_token, lambda d: Topic(**_strip(d) or {}))

    # --- subscriptions --------------------------------------------------------------------
    def create_subscription(self, sub: Subscription, start_offset: int) -> bool:
        cursor_id = uuidlib.uuid4().hex
        if not self._insert(self._c("subscriptions"), to_doc(sub) | {"cursor_id": cursor_id}):
            return False
        state = cursor_to_doc(Cursor(offset=start_offset))
        self._c("cursors").insert_one({"cursor_id": cursor_id, "version": 0, "state": state})
        return True

    def get_subscription(self, project_uuid: str, name: str) -> Subscription | None:
        doc = _strip(self._c("subscriptions").find_one({"project_uuid": project_uuid, "name": name}))
        return sub_from_doc(doc) if doc else None

    def update_subscription(self, sub: Subscription) -> bool:
        query = {"project_uuid": sub.project_uuid, "name": sub.name}
        return self._c("subscriptions").update_one(query, {"$set": to_doc(sub)}).matched_count > 0

    def delete_subscription(self, project_uuid: str, name: str) -> bool:
        self._c("usage").delete_one({"kind": "sub", "project_uuid": project_uuid, "name": name})
        doc = self._c("subscriptions").find_one_and_delete({"project_uuid": project_uuid, "name": name})
        if doc is None:
            return False
        self._c("cursors").delete_many({"cursor_id": doc["cursor_id"]})
        return True

    def list_subscriptions(
        self, project_uuid: str, acl_user: str | None, page_size: int, page_token: str
    ) -> Page[Subscription]:
        query: Doc = {"project_uuid": project_uuid}
        if acl_user is not None:
            query["acl"] = acl_user
        return self._page("subscriptions", query, page_size, page_token, lambda d: sub_from_doc(_strip(d) or {}))

    def push_subscriptions(self) -> list[Subscription]:
        docs = self._c("subscriptions").find({"push.type": {"$nin": ["", None]}})
        return [sub_from_doc(_strip(d) or {}) for d in docs]

    def subscriptions_of_topic(self, project_uuid: str, topic: str) -> list[str]:
        docs = self._c("subscriptions").find({"project_uuid": project_uuid, "topic": topic}, {"name": 1})
        return [d["name"] for d in docs.sort("_id", DESCENDING)]

    # --- snapshots ------------------------------------------------------------------------
    def create_snapshot(self, snapshot: Snapshot) -> bool:
        return self._insert(self._c("snapshots"), snapshot_to_doc(snapshot))

    def get_snapshot(self, project_uuid: str, name: str) -> Snapshot | None:
        doc = _strip(self._c("snapshots").find_one({"project_uuid": project_uuid, "name": name}))
        return snapshot_from_doc(doc) if doc else None

    def delete_snapshot(self, project_uuid: str, name: str) -> bool:
        return self._c("snapshots").delete_one({"project_uuid": project_uuid, "name": name}).deleted_count > 0

    def list_snapshots(self, project_uuid: str, page_size: int, page_token: str) -> Page[Snapshot]:
        query = {"project_uuid": project_uuid}
        return self._page("snapshots", query, page_size, page_token, lambda d: snapshot_from_doc(_strip(d) or {}))

    def snapshots_of_subscription(self, project_uuid: str, subscription: str) -> list[str]:
        docs = self._c("snapshots").find({"project_uuid": project_uuid, "subscription": subscription}, {"name": 1})
        return [d["name"] for d in docs.sort("_id", DESCENDING)]

    # --- schemas --------------------------------------------------------------------------
    def create_schema(self, schema: Schema) -> bool:
        return self._insert(self._c("schemas"), _schema_doc(schema))

    def get_schema(self, project_uuid: str, *, name: str | None = None, uuid: str | None = None) -> Schema | None:
        query: Doc = {"project_uuid": project_uuid}
        query.update({"name": name} if name is not None else {"uuid": uuid})
        doc = self._c("schemas").find_one(query)
        return _schema_from(doc) if doc else None

    def list_schemas(self, project_uuid: str) -> list[Schema]:
        docs = self._c("schemas").find({"project_uuid": project_uuid}).sort("_id", ASCENDING)
        return [_schema_from(d) for d in docs]

    def update_schema(self, schema: Schema, expected_revision_id: str | None = None) -> bool:
        return self._replace(self._c("schemas"), _schema_query(schema.uuid, expected_revision_id), _schema_doc(schema))

    def delete_schema(self, project_uuid: str, uuid: str) -> bool:
        self._c("topics").update_many(
            {"project_uuid": project_uuid, "schema_uuid": uuid}, {"$set": {"schema_uuid": "", "schema_encoding": ""}}
        )
        return self._c("schemas").delete_one({"project_uuid": project_uuid, "uuid": uuid}).deleted_count > 0

    # --- registrations --------------------------------------------------------------------
    def create_registration(self, registration: Registration) -> None:
        self._c("registrations").insert_one(to_doc(registration))

    def get_registration(self, uuid: str) -> Registration | None:
        doc = _strip(self._c("registrations").find_one({"uuid": uuid}))
        return Registration(**doc) if doc else None

    def list_registrations(self, filters: dict[str, str]) -> list[Registration]:
        docs = self._c("registrations").find(dict(filters)).sort("_id", ASCENDING)
        return [Registration(**_strip(d) or {}) for d in docs]

    def update_registration(self, registration: Registration) -> bool:
        return self._replace(self._c("registrations"), {"uuid": registration.uuid}, to_doc(registration))

    def delete_registration(self, uuid: str) -> bool:
        return self._c("registrations").delete_one({"uuid": uuid}).deleted_count > 0

    # --- AuthN: service types and bindings -------------------------------------------------
    def create_service_type(self, service_type: ServiceType) -> bool:
        return self._insert(self._c("authn_service_types"), to_doc(service_type))

    def get_service_type(self, *, name: str | None = None, uuid: str | None = None) -> ServiceType | None:
        query = {"name": name} if name is not None else {"uuid": uuid}
        doc = _strip(self._c("authn_service_types").find_one(query))
        return service_type_from_doc(doc) if doc else None

    def list_service_types(self) -> list[ServiceType]:
        docs = self._c("authn_service_types").find().sort("_id", ASCENDING)
        return [service_type_from_doc(_strip(d) or {}) for d in docs]

    def update_service_type(self, service_type: ServiceType) -> bool:
        return self._replace(self._c("authn_service_types"), {"uuid": service_type.uuid}, to_doc(service_type))

    def delete_service_type(self, uuid: str) -> bool:
        # the bindings first: a delete cut short leaves the service type, to be deleted again
        self._c("authn_bindings").delete_many({"service_uuid": uuid})
        return self._c("authn_service_types").delete_one({"uuid": uuid}).deleted_count > 0

    def _binding_conflict(self, binding: Binding, other_than: str | None) -> BindingWrite | None:
        """After a unique index refused ``binding``: which rule, against a binding other than
        the one of uuid ``other_than`` (the one an update rewrites); the name first. None:
        neither (the conflicting binding is gone meanwhile, or the uuid is taken)."""
        others: Doc = {} if other_than is None else {"uuid": {"$ne": other_than}}
        bindings = self._c("authn_bindings")
        if bindings.find_one({"name": binding.name} | others, {"_id": 1}):
            return "name"
        dn = {
            "service_uuid": binding.service_uuid,
            "host": binding.host,
            "auth_type": binding.auth_type,
            "auth_identifier": binding.auth_identifier,
        }
        if bindings.find_one(dn | others, {"_id": 1}):
            return "auth_identifier"
        return None

    def _write_binding(self, write: Callable[[], bool], binding: Binding, other_than: str | None) -> BindingWrite:
        """``write`` (False: the binding to replace is gone), and on a duplicate key the rule it
        broke. The unique indexes decide; the look that names the rule comes after, so when the
        binding it collided with has gone by then, the write is tried again."""
        for attempt in range(_BINDING_WRITES):
            try:
                return "ok" if write() else "missing"
            except OperationFailure as exc:
                if not _duplicate(exc):
                    raise
                conflict = self._binding_conflict(binding, other_than)
                if conflict is not None:
                    return conflict
                if attempt == _BINDING_WRITES - 1:
                    raise
        raise AssertionError("unreachable")

    def create_binding(self, binding: Binding) -> BindingWrite:
        def write() -> bool:
            self._c("authn_bindings").insert_one(to_doc(binding))
            return True

        return self._write_binding(write, binding, None)

    def get_binding(self, name: str) -> Binding | None:
        doc = _strip(self._c("authn_bindings").find_one({"name": name}))
        return binding_from_doc(doc) if doc else None

    def list_bindings(
        self, service_uuid: str | None, host: str | None, page_size: int, page_token: str
    ) -> Page[Binding]:
        query: Doc = {}
        if service_uuid is not None:
            query["service_uuid"] = service_uuid
        if host is not None:
            query["host"] = host
        return self._page(
            "authn_bindings", query, page_size, page_token, lambda d: binding_from_doc(_strip(d) or {}), True
        )

    def find_binding(
        self, service_uuid: str, host: str, auth_identifiers: Sequence[str], auth_type: str = "x509"
    ) -> Binding | None:
        dns = binding_identifiers(auth_identifiers)
        if not dns:
            return None
        query = {"service_uuid": service_uuid, "host": host, "auth_type": auth_type, "auth_identifier": {"$in": dns}}
        doc = _strip(self._c("authn_bindings").find_one(query, sort=[("_id", ASCENDING)]))
        return binding_from_doc(doc) if doc else None

    def update_binding(self, name: str, binding: Binding) -> BindingWrite:
        stored = self._c("authn_bindings").find_one({"name": name}, {"uuid": 1, "created_on": 1})
        if stored is None:
            return "missing"
        new = dataclasses.replace(binding, uuid=stored["uuid"], created_on=stored.get("created_on", ""))

        def write() -> bool:
            # still called `name`: renamed meanwhile, it is gone as far as this update goes
            query = {"uuid": new.uuid, "name": name}
            return self._c("authn_bindings").replace_one(query, to_doc(new)).matched_count > 0

        return self._write_binding(write, new, new.uuid)

    def delete_binding(self, name: str) -> bool:
        return self._c("authn_bindings").delete_one({"name": name}).deleted_count > 0

    def record_binding_use(self, uuid: str, when: str) -> None:
        self._c("authn_bindings").update_one({"uuid": uuid}, {"$set": {"last_auth": when}})

    # --- usage and operational metrics ----------------------------------------------------
    def add_usage(self, batch: UsageBatch) -> None:
        usage = self._c("usage")
        for kind, rows in (("topic", batch.topics), ("sub", batch.subs)):
            for (project_uuid, name), u in rows.items():
                key = {"kind": kind, "project_uuid": project_uuid, "name": name}
                usage.update_one(
                    key,
                    {
                        "$inc": {"messages": u.messages, "bytes": u.bytes},
                        "$max": {"latest_ns": u.latest_ns},
                        "$setOnInsert": {"rate": u.rate},
                    },
                    upsert=True,
                )
                # the rate of the latest event wins: set it only if ours is (still) the latest
                usage.update_one(key | {"latest_ns": {"$lte": u.latest_ns}}, {"$set": {"rate": u.rate}})
        for (project_uuid, topic, day), n in batch.daily.items():
            self._c("daily_messages").update_one(
                {"project_uuid": project_uuid, "topic": topic, "day": day}, {"$inc": {"messages": n}}, upsert=True
            )

    def usage(self, kind: str, project_uuid: str, name: str) -> Usage:
        doc = self._c("usage").find_one({"kind": kind, "project_uuid": project_uuid, "name": name})
        return self._usage(doc) if doc else Usage()

    @staticmethod
    def _usage(doc: Doc) -> Usage:
        return Usage(int(doc["messages"]), int(doc["bytes"]), int(doc["latest_ns"]), float(doc["rate"]))

    def all_usage(self, kind: str) -> list[tuple[str, str, Usage]]:
        return [(d["project_uuid"], d["name"], self._usage(d)) for d in self._c("usage").find({"kind": kind})]

    def _merged_daily(self, query: Doc) -> dict[DailyKey, int]:
        """Live counters and Spark figures of the documents ``query`` selects, merged (``merge_daily``)."""
        today = utc_today()
        fields = {"_id": 0, "project_uuid": 1, "topic": 1, "day": 1, "messages": 1}
        live = self._c("daily_messages").find(query, fields)
        spark_query = {"$and": [query, {"day": {"$lt": today}}]}
        spark = self._c("usage_daily").find(spark_query, fields)
        return merge_daily(
            (((d["project_uuid"], d["topic"], d["day"]), int(d["messages"])) for d in live),
            (((d["project_uuid"], d["topic"], d["day"]), int(d["messages"])) for d in spark),
            today,
        )

    def daily_messages(self, project_uuid: str, topic: str | None, days: int) -> list[tuple[str, int]]:
        query: Doc = {"project_uuid": project_uuid}
        if topic is not None:
            query["topic"] = topic
        return daily_series(self._merged_daily(query), days)

    def daily_totals(self, start: str, end: str) -> dict[str, int]:
        return project_totals(self._merged_daily({"day": {"$gte": start, "$lte": end}}))

    def replace_daily_usage(self, day: str, rows: list[DailyUsage]) -> None:
        coll = self._c("usage_daily")
        coll.delete_many({"day": day})
        if rows:
            coll.insert_many([{"day": day, **r._asdict()} for r in rows], ordered=False)

    def created_between(self, project_uuid: str, start_ns: int, end_ns: int) -> tuple[int, int, int]:
        window = {"created_on": {"$gte": start_ns, "$lte": end_ns}}
        topics = self._c("topics").count_documents({"project_uuid": project_uuid} | window)
        subs = self._c("subscriptions").count_documents({"project_uuid": project_uuid} | window)
        users = self._c("users").count_documents({"projects.project_uuid": project_uuid} | window)
        return topics, subs, users

    def put_node_metrics(self, hostname: str, cpu: float, memory: float) -> None:
        self._c("node_metrics").update_one(
            {"hostname": hostname}, {"$set": {"cpu": cpu, "memory": memory}}, upsert=True
        )

    def node_metrics(self) -> list[tuple[str, float, float]]:
        docs = self._c("node_metrics").find().sort("hostname", ASCENDING)
        return [(d["hostname"], float(d["cpu"]), float(d["memory"])) for d in docs]

    # --- cursors --------------------------------------------------------------------------
    def get_cursor(self, project_uuid: str, name: str) -> Cursor | None:
        sub = self._c("subscriptions").find_one({"project_uuid": project_uuid, "name": name}, {"cursor_id": 1})
        if sub is None:
            return None
        latest = self._c("cursors").find_one({"cursor_id": sub["cursor_id"]}, sort=[("version", DESCENDING)])
        if latest is None:
            return None
        cursor = cursor_from_doc(latest["state"], int(latest["version"]))
        cursor.store_mark = _Mark(sub["cursor_id"], time.monotonic())
        return cursor

    def swap_cursor(self, project_uuid: str, name: str, cursor: Cursor) -> bool:
        mark = cursor.store_mark
        started = time.monotonic()
        if not isinstance(mark, _Mark) or started - mark.read_at > _STALE_SECONDS:
            return False  # not read here, or too old a read to prove anything: read again
        version = cursor.version + 1
        doc = {"cursor_id": mark.cursor_id, "version": version, "state": cursor_to_doc(cursor), "at": time.time()}
        if not self._insert(self._c("cursors"), doc):
            return False  # another writer made this version first
        cursor.store_mark = _Mark(mark.cursor_id, started)  # the written version was the latest then
        self._tidy_later(mark.cursor_id)
        if version % _GC_EVERY == 0:  # history nobody reads any more
            self._c("cursors").delete_many(
                {
                    "cursor_id": mark.cursor_id,
                    "version": {"$lt": version - 1},
                    "at": {"$lt": time.time() - _KEEP_SECONDS},
                }
            )
        return True


if TYPE_CHECKING:

    def _implements(store: MongoMetadataStore) -> tuple[MetadataStore, SnapshotStore]:
        """Never called: mypy checks here that the class keeps both of its protocols."""
        return store, store
