"""``ams backup`` and ``ams restore``: the configured backend's metadata (and the embedded backend's
messages) in one checksummed, versioned archive, and back (docs/production.md, "Backup and restore").

An archive is a tar file of:

- ``manifest.json``: the format and its version, the release that wrote it, the backend, the
  layout version of each store, and for every other member its size and SHA-256;
- the embedded backend: ``embedded/metadata.db`` and ``embedded/messages.db``, each a copy made by
  SQLite's online backup, in one read transaction (a state the database was in); the metadata
  first, so that the messages copied are never older than the offsets the cursors name;
- MongoDB: ``mongodb/{collection}.jsonl``, each document in MongoDB's canonical extended JSON (its
  types and ``_id`` kept, so pages and cursor versions read as before).

MongoDB has no snapshot across collections without a replica set, so the MongoDB dump is made
stable instead: the collections that describe the objects (projects, users, topics, ...) are read,
then the ones that change with traffic (cursors, counters), then the first ones again; when the
two reads differ, everything is read again. What lands is a state of the objects that held while
the cursors and counters were read; each cursor is one of its own states.

Beside the archive, ``{archive}.sha256`` in ``sha256sum -c`` format. A restore checks every
member against the manifest before it writes anything, and refuses an archive of a newer format,
release or layout than this release knows, an archive of the other backend, and a destination that
holds projects or users already (unless told to replace them). Afterwards the subscriptions'
cursors are made consistent with what the message log holds: a cursor past the end of its topic
(the log lost messages the metadata had seen acknowledged) is brought back to that end, and
acknowledgement state above the end goes, so that the next messages published are delivered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from ams_app import __version__
from ams_app.backends.sqlite.datadir import RESTORING_MARK, DataDirLock
from ams_app.backends.sqlite.db import schema_version
from ams_app.settings import Settings

FORMAT = "ams-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARCHIVE_PATTERN = re.compile(r"^ams-backup-(\d{8}T\d{6}Z)\.tar$")
#: Embedded data files, in the order they are copied (the metadata first: see above).
EMBEDDED_FILES = ("metadata.db", "messages.db")
#: MongoDB collections that change with traffic rather than with the objects (read between the two
#: reads of the others, and not compared).
VOLATILE = frozenset({"cursors", "usage", "daily_messages", "node_metrics", "usage_daily"})
#: Fields that record use, not the object: left out of the comparison of the two reads.
USE_FIELDS = {"authn_bindings": ("last_auth",)}
#: The names of an archive's members besides the manifest, per backend.
_EMBEDDED_MEMBER = re.compile(r"^embedded/(metadata|messages)\.db$")
_MONGO_MEMBER = re.compile(r"^mongodb/(?!system\.)[A-Za-z0-9_]{1,64}\.jsonl$")
_STABLE_TRIES = 5
_CHUNK = 1 << 20


class BackupError(Exception):
    """What an operator is told: the archive or the destination is not one to use, and why."""


# --- versions ---------------------------------------------------------------------------------
def _newer_release(theirs: str, ours: str = __version__) -> bool:
    """Whether release ``theirs`` is newer than ``ours``; an unreadable one counts as newer. (A
    source tree never installed is 0.0.0+unknown: older than every release.)"""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(theirs) > Version(ours)
    except InvalidVersion:
        return True  # a release string we cannot read: not ours to trust


def known_layouts(backend: str) -> dict[str, int]:
    """The layout version of each store of ``backend`` that this release writes."""
    if backend == "embedded":
        from ams_app.backends.sqlite.log import MIGRATIONS as LOG_MIGRATIONS
        from ams_app.backends.sqlite.store import MIGRATIONS as STORE_MIGRATIONS

        return {"metadata.db": len(STORE_MIGRATIONS), "messages.db": len(LOG_MIGRATIONS)}
    from ams_app.backends.mongo.store import LAYOUT_VERSION

    return {"mongodb": LAYOUT_VERSION}


def stored_layouts(settings: Settings) -> dict[str, int | None]:
    """The layout version each store of the settings' backend records now, read without opening it
    as the service does (nothing is migrated); None: the store has none yet."""
    if settings.backend == "embedded":
        found: dict[str, int | None] = {}
        for name in EMBEDDED_FILES:
            path = os.path.join(settings.data_dir, name)
            if not os.path.exists(path):
                found[name] = None
                continue
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                found[name] = schema_version(conn) or None
            finally:
                conn.close()
        return found
    from ams_app.backends.mongo.store import layout_version

    client = _mongo_client(settings)
    try:
        db = client[settings.mongo_database]
        stored = layout_version(db)
        if stored is None and db.list_collection_names():
            stored = 1  # a database of a release before layout versions is of the first one
        return {"mongodb": stored}
    finally:
        client.close()


def _mongo_client(settings: Settings) -> Any:
    from pymongo import MongoClient

    ms = int(settings.kafka_timeout_seconds * 1000)
    return MongoClient(settings.mongo_uri, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms, appname="ams-backup")


# --- writing an archive ------------------------------------------------------------------------
@dataclasses.dataclass
class Member:
    name: str  # in the archive
    path: Path  # the staged file
    sha256: str = ""
    bytes: int = 0
    documents: int | None = None


def _digest(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _sqlite_copy(source: str, target: Path) -> int:
    """SQLite's online backup of ``source`` (in one step: one read transaction) into ``target``;
    the copy's schema version."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(str(target))
    try:
        src.backup(dst, pages=-1)
        version = schema_version(dst)
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
    finally:
        dst.close()
        src.close()
    return version


def _embedded_members(settings: Settings, staging: Path) -> tuple[list[Member], dict[str, int]]:
    known = known_layouts("embedded")
    if not os.path.exists(os.path.join(settings.data_dir, "metadata.db")):
        raise BackupError(f"{settings.data_dir} holds no metadata.db: nothing to back up (data_dir)")
    lock = DataDirLock(settings.data_dir, exclusive=False)
    members, layouts = [], {}
    try:
        for name in EMBEDDED_FILES:
            path = os.path.join(settings.data_dir, name)
            if not os.path.exists(path):
                continue  # a data directory of a service that never opened its log: metadata alone
            target = staging / name
            version = _sqlite_copy(path, target)
            if version > known[name]:
                raise BackupError(
                    f"{path} is at schema version {version}, this release knows up to {known[name]}: "
                    "back it up with the release that wrote it"
                )
            layouts[name] = version
            members.append(Member(f"embedded/{name}", target))
    finally:
        lock.close()
    return members, layouts


def _canonical(doc: dict[str, Any]) -> str:
    from bson import json_util

    return str(json_util.dumps(doc, json_options=json_util.CANONICAL_JSON_OPTIONS, sort_keys=True))


def _dump_collection(db: Any, name: str, out: IO[str] | None) -> tuple[str, int]:
    """Write the collection's documents (by _id) to ``out`` (None: only read them); the digest of
    what was read without the use fields, and how many documents."""
    h, n = hashlib.sha256(), 0
    ignore = USE_FIELDS.get(name, ())
    for doc in db[name].find({}, sort=[("_id", 1)]):
        line = _canonical(doc)
        if out is not None:
            out.write(line + "\n")
        h.update((_canonical({k: v for k, v in doc.items() if k not in ignore}) if ignore else line).encode())
        n += 1
    return h.hexdigest(), n


def _mongo_members(settings: Settings, staging: Path) -> tuple[list[Member], dict[str, int]]:
    from pymongo.errors import PyMongoError

    from ams_app.backends.mongo.store import check_layout

    client = _mongo_client(settings)
    try:
        db = client[settings.mongo_database]
        try:
            stored = check_layout(db)
            present = sorted(db.list_collection_names())
        except PyMongoError as exc:
            raise BackupError(f"the metadata database cannot be read: {exc}") from exc
        # a collection of a name that is none of ours (system.*, or one an operator added) stays out
        names = [n for n in present if _MONGO_MEMBER.match(f"mongodb/{n}.jsonl")]
        if "projects" not in names and "users" not in names:
            raise BackupError(f"the metadata database {settings.mongo_database!r} is empty: nothing to back up")
        objects = [n for n in names if n not in VOLATILE]
        for _ in range(_STABLE_TRIES):
            members: list[Member] = []
            first: dict[str, str] = {}
            for name in [*objects, *(n for n in names if n in VOLATILE)]:
                target = staging / f"{name}.jsonl"
                with target.open("w", encoding="utf-8") as out:
                    digest, count = _dump_collection(db, name, out)
                first[name] = digest
                members.append(Member(f"mongodb/{name}.jsonl", target, documents=count))
            if all(_dump_collection(db, name, None)[0] == first[name] for name in objects):
                return members, {"mongodb": stored or 1}  # none recorded: a release before versions
        raise BackupError(
            f"the metadata kept changing through {_STABLE_TRIES} reads (projects, users, topics or "
            "subscriptions created or changed meanwhile): try again at a quieter moment"
        )
    finally:
        client.close()


def archive_name(at: datetime) -> str:
    return f"ams-backup-{at.strftime('%Y%m%dT%H%M%SZ')}.tar"


def backup(settings: Settings, to_dir: Path, *, now: datetime | None = None) -> Path:
    """Write an archive of the settings' backend into ``to_dir``, and its ``.sha256``; its path."""
    now = now or datetime.now(UTC)
    if not to_dir.is_dir():
        raise BackupError(f"{to_dir} is not a directory")
    final = to_dir / archive_name(now)
    if final.exists():
        raise BackupError(f"{final} exists already (two backups in one second?)")
    with tempfile.TemporaryDirectory(prefix=".ams-backup-", dir=to_dir) as tmp:
        staging = Path(tmp)
        if settings.backend == "embedded":
            members, layouts = _embedded_members(settings, staging)
        else:
            members, layouts = _mongo_members(settings, staging)
        for m in members:
            m.sha256, m.bytes = _digest(m.path)
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "release": __version__,
            "backend": settings.backend,
            "created": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "layout": layouts,
            "files": {
                m.name: {"sha256": m.sha256, "bytes": m.bytes}
                | ({"documents": m.documents} if m.documents is not None else {})
                for m in members
            },
        }
        partial = staging / final.name
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode(), now)
            for m in members:
                info = tar.gettarinfo(str(m.path), arcname=m.name)
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
                with m.path.open("rb") as f:
                    tar.addfile(info, f)
            tar.close()
            raw.flush()
            os.fsync(raw.fileno())
        digest, _ = _digest(partial)
        sums = staging / f"{final.name}.sha256"
        sums.write_text(f"{digest}  {final.name}\n", encoding="utf-8")
        sums.chmod(0o600)
        os.replace(partial, final)
        os.replace(sums, to_dir / sums.name)
        _fsync_dir(to_dir)
    return final


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, at: datetime) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o600, int(at.timestamp())
    tar.addfile(info, io.BytesIO(data))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(to_dir: Path, keep: int) -> list[Path]:
    """Remove all but the ``keep`` newest archives (and their .sha256) of ``to_dir``; what went."""
    archives = sorted(p for p in to_dir.iterdir() if ARCHIVE_PATTERN.match(p.name))
    gone = archives[: max(len(archives) - keep, 0)]
    for p in gone:
        p.unlink()
        p.with_name(p.name + ".sha256").unlink(missing_ok=True)
    return gone


#: The Prometheus figures of the last backups (a textfile for node_exporter; docs/monitoring.md).
METRICS = {
    "ams_backup_last_success_timestamp_seconds": "When the last backup that succeeded finished (Unix time).",
    "ams_backup_last_size_bytes": "Size of the archive the last backup that succeeded wrote.",
    "ams_backup_last_duration_seconds": "How long the last backup that succeeded took.",
    "ams_backup_last_failure_timestamp_seconds": "When the last backup that failed gave up (Unix time); 0: none.",
}


def read_metrics(path: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition(" ")
            if name in METRICS:
                with contextlib.suppress(ValueError):
                    found[name] = float(value)
    return found


def write_metrics(path: Path, *, success: tuple[float, int, float] | None, failed_at: float | None) -> None:
    """Replace the textfile atomically: ``success`` (finished at, bytes, seconds) or ``failed_at``;
    the figures of the other kind carried over from the file."""
    figures = {name: 0.0 for name in METRICS} | read_metrics(path)
    if success is not None:
        at, size, seconds = success
        figures["ams_backup_last_success_timestamp_seconds"] = at
        figures["ams_backup_last_size_bytes"] = size
        figures["ams_backup_last_duration_seconds"] = seconds
    if failed_at is not None:
        figures["ams_backup_last_failure_timestamp_seconds"] = failed_at
    lines = []
    for name, help_text in METRICS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {figures[name]:.3f}"]
    from ams_app.telemetry import write_textfile

    write_textfile(path, "\n".join(lines) + "\n")


# --- reading an archive ------------------------------------------------------------------------
@dataclasses.dataclass
class Checked:
    """An archive that passed every check: its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def files(self) -> dict[str, dict[str, Any]]:
        return dict(self.manifest["files"])

    def summary(self) -> list[str]:
        m = self.manifest
        lines = [
            f"archive {self.path.name}: ams {m['release']}, backend {m['backend']}, made {m['created']}",
            f"layout {', '.join(f'{k} {v}' for k, v in sorted(m['layout'].items()))}",
        ]
        for name, f in sorted(self.files.items()):
            count = f" ({f['documents']} documents)" if "documents" in f else ""
            lines.append(f"  {name}: {f['bytes']} bytes{count}, sha256 ok")
        return lines


def _members(tar: tarfile.TarFile) -> Iterator[tuple[tarfile.TarInfo, IO[bytes]]]:
    for info in tar:
        if not info.isfile():
            raise BackupError(f"the archive holds {info.name!r}, which is not a regular file")
        f = tar.extractfile(info)
        if f is None:
            raise BackupError(f"the archive's {info.name!r} cannot be read")
        yield info, f


def check(archive: Path, backend: str) -> Checked:
    """Every check a restore makes before it writes: the ``.sha256`` beside the archive (when there
    is one), the manifest (format, release, backend, layout versions) and every member's SHA-256."""
    if not archive.is_file():
        raise BackupError(f"{archive}: no such file")
    sums = archive.with_name(archive.name + ".sha256")
    if sums.exists():
        expected = sums.read_text(encoding="utf-8").split()[:1]
        if expected != [_digest(archive)[0]]:
            raise BackupError(f"{archive.name} does not match {sums.name}: the archive is damaged")
    try:
        with tarfile.open(archive, mode="r:") as tar:
            first = tar.next()
            if first is None or first.name != MANIFEST:
                raise BackupError(f"{archive.name} is not an ams backup (no {MANIFEST} first)")
            handle = tar.extractfile(first)
            if handle is None:
                raise BackupError(f"{archive.name}: {MANIFEST} cannot be read")
            manifest = _manifest(json.loads(handle.read()), archive, backend)
            seen: set[str] = set()
            for info, f in _members(tar):
                if info.offset == first.offset:
                    continue  # the manifest itself
                entry = manifest["files"].get(info.name)
                if entry is None:
                    raise BackupError(f"{archive.name} holds {info.name!r}, which its manifest does not list")
                h = hashlib.sha256()
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                if h.hexdigest() != entry["sha256"] or info.size != entry["bytes"]:
                    raise BackupError(
                        f"{archive.name}: {info.name} does not match its checksum: the archive is damaged"
                    )
                seen.add(info.name)
            missing = sorted(set(manifest["files"]) - seen)
            if missing:
                raise BackupError(f"{archive.name} lacks {', '.join(missing)}: the archive is incomplete")
    except (tarfile.TarError, EOFError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BackupError(f"{archive.name} cannot be read as an ams backup: {exc}") from exc
    return Checked(archive, manifest)


def _manifest(manifest: Any, archive: Path, backend: str) -> dict[str, Any]:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{archive.name} is not an ams backup")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise BackupError(
            f"{archive.name} is in backup format {version!r}, this release reads up to {FORMAT_VERSION}: "
            "restore it with the release that wrote it, or a newer one"
        )
    release = str(manifest.get("release", ""))
    if _newer_release(release):
        raise BackupError(
            f"{archive.name} was written by ams {release}, newer than this release ({__version__}): "
            "restore it with that release or a newer one (downgrades are not supported)"
        )
    if manifest.get("backend") != backend:
        raise BackupError(
            f"{archive.name} is a backup of the {manifest.get('backend')} backend, this ams is configured for "
            f"the {backend} backend: a backup restores into the backend it was made of"
        )
    known = known_layouts(backend)
    layout = manifest.get("layout")
    files = manifest.get("files")
    if not isinstance(layout, dict) or not isinstance(files, dict):
        raise BackupError(f"{archive.name}: its manifest lacks the layout or the files")
    allowed = _EMBEDDED_MEMBER if backend == "embedded" else _MONGO_MEMBER
    for name in files:
        if not allowed.match(name):
            raise BackupError(f"{archive.name} lists {name!r}, which is not a file an archive holds")
    for store, stored in layout.items():
        if store not in known or not isinstance(stored, int) or stored > known[store]:
            raise BackupError(
                f"{archive.name} holds {store} at layout {stored!r}, this release knows "
                f"{known.get(store, 'no such store')}: restore it with the release that wrote it"
            )
    return manifest


# --- restoring ---------------------------------------------------------------------------------
@dataclasses.dataclass
class Restored:
    checked: Checked
    moved: list[str] = dataclasses.field(default_factory=list)  # cursors and snapshots brought back

    def lines(self) -> list[str]:
        lines = [*self.checked.summary(), "restored"]
        if self.moved:
            lines.append("made consistent with the message log:")
            lines += [f"  {m}" for m in self.moved]
        return lines


def restore(settings: Settings, archive: Path, *, replace: bool = False) -> Restored:
    """Check the archive, write it into the settings' backend (replacing what is there only with
    ``replace``), then bring the cursors in line with the message log."""
    checked = check(archive, settings.backend)
    if settings.backend == "embedded":
        _restore_embedded(settings, checked, replace)
    else:
        _restore_mongo(settings, checked, replace)
    return Restored(checked, reconcile(settings))


def _restore_embedded(settings: Settings, checked: Checked, replace: bool) -> None:
    data_dir = settings.data_dir
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    lock = DataDirLock(data_dir, exclusive=True)
    try:
        target = os.path.join(data_dir, "metadata.db")
        mark = Path(data_dir, RESTORING_MARK)
        if os.path.exists(target) and not replace and not mark.exists() and _sqlite_holds_objects(target):
            raise BackupError(f"{data_dir} holds projects or users already: restore with --replace to replace them")
        mark.write_text(f"{checked.path.name}\n", encoding="utf-8")
        staged: list[tuple[Path, Path]] = []
        with tarfile.open(checked.path, mode="r:") as tar:
            for info, f in _members(tar):
                if not info.name.startswith("embedded/"):
                    continue
                name = info.name.removeprefix("embedded/")
                if name not in EMBEDDED_FILES:
                    raise BackupError(f"{checked.path.name} holds {info.name!r}, not an embedded data file")
                part = Path(data_dir, f".{name}.restoring")
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                h = hashlib.sha256()
                with os.fdopen(fd, "wb") as out:
                    while chunk := f.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                if h.hexdigest() != checked.files[info.name]["sha256"]:  # the archive changed since the check
                    raise BackupError(f"{checked.path.name}: {info.name} does not match its checksum any more")
                if os.geteuid() == 0:  # root restores for the service's user, who owns the directory
                    owner = os.stat(data_dir)
                    os.chown(part, owner.st_uid, owner.st_gid)
                staged.append((part, Path(data_dir, name)))
        names = {final.name for _, final in staged}
        for name in EMBEDDED_FILES:  # a file the archive lacks (a log never opened) starts empty
            for suffix in ("", "-wal", "-shm", "-journal"):
                path = Path(data_dir, name + suffix)
                if suffix or name not in names:
                    path.unlink(missing_ok=True)
        for part, final in staged:
            os.replace(part, final)
        _fsync_dir(Path(data_dir))
        mark.unlink()
        _fsync_dir(Path(data_dir))
    finally:
        lock.close()


def _sqlite_holds_objects(path: str) -> bool:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return any(
            conn.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone()
            for table in ("projects", "users")
            if table in tables
        )
    finally:
        conn.close()


def _restore_mongo(settings: Settings, checked: Checked, replace: bool) -> None:
    from bson import json_util
    from pymongo.errors import PyMongoError

    from ams_app.backends.mongo.store import LAYOUT_COLLECTION, RESTORING_ID

    client = _mongo_client(settings)
    try:
        db = client[settings.mongo_database]
        try:
            present = [n for n in db.list_collection_names() if not n.startswith("system.")]
            unfinished = db[LAYOUT_COLLECTION].find_one({"_id": RESTORING_ID}) is not None
            holds = any(db[n].find_one({}, projection={"_id": 1}) for n in ("projects", "users") if n in present)
            if holds and not replace and not unfinished:
                raise BackupError(
                    f"the database {settings.mongo_database!r} holds projects or users already: "
                    "restore with --replace to replace them"
                )
            for name in present:
                if name != LAYOUT_COLLECTION:
                    db.drop_collection(name)
            db[LAYOUT_COLLECTION].delete_many({})
            db[LAYOUT_COLLECTION].insert_one({"_id": RESTORING_ID, "archive": checked.path.name})
            layout_docs: list[dict[str, Any]] = []
            with tarfile.open(checked.path, mode="r:") as tar:
                for info, f in _members(tar):
                    if not info.name.startswith("mongodb/"):
                        continue
                    name = info.name.removeprefix("mongodb/").removesuffix(".jsonl")
                    batch: list[dict[str, Any]] = []
                    for raw in io.TextIOWrapper(f, encoding="utf-8"):
                        doc = json_util.loads(raw, json_options=json_util.CANONICAL_JSON_OPTIONS)
                        if name == LAYOUT_COLLECTION:
                            layout_docs.append(doc)
                            continue
                        batch.append(doc)
                        if len(batch) >= 1000:
                            db[name].insert_many(batch, ordered=True)
                            batch = []
                    if batch:
                        db[name].insert_many(batch, ordered=True)
            if layout_docs:
                db[LAYOUT_COLLECTION].insert_many([d for d in layout_docs if d.get("_id") != RESTORING_ID])
            db[LAYOUT_COLLECTION].delete_one({"_id": RESTORING_ID})
        except PyMongoError as exc:
            raise BackupError(f"writing the metadata database failed: {exc} (run the restore again)") from exc
    finally:
        client.close()


def _trim(ranges: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    return [(s, min(e, end)) for s, e in ranges if s < end]


def reconcile(settings: Settings) -> list[str]:
    """Make every topic exist in the message log, and every cursor and snapshot consistent with
    what the log holds; what was changed, one line each."""
    from ams_app.backends import open_backends
    from ams_app.service.base import topic_key

    store, log = open_backends(settings)
    moved: list[str] = []
    try:
        for project in store.list_projects():
            topics = store.list_topics(project.uuid, None, 0, "").items
            for topic in topics:
                log.create_topic(topic_key(project, topic.name), topic.retention_s)
            names = {topic.name for topic in topics}
            for sub in store.list_subscriptions(project.uuid, None, 0, "").items:
                if sub.topic not in names:
                    continue  # of a deleted topic: it delivers nothing
                _, end = log.bounds(topic_key(project, sub.topic))
                moved += _reconcile_cursor(store, project.uuid, project.name, sub.name, end)
                moved += _reconcile_snapshots(store, project.uuid, project.name, sub.name, end)
    finally:
        store.close()
        log.close()
    return moved


def _reconcile_cursor(store: Any, project_uuid: str, project: str, name: str, end: int) -> list[str]:
    for _ in range(10):
        cursor = store.get_cursor(project_uuid, name)
        if cursor is None:
            return []
        fixed = dataclasses.replace(
            cursor,
            offset=min(cursor.offset, end),
            acked=_trim(cursor.acked, end),
            leases=[lease for lease in cursor.leases if lease.start < end],
            retries=[retry for retry in cursor.retries if retry.start < end],
        )
        if (fixed.offset, fixed.acked, fixed.leases, fixed.retries) == (
            cursor.offset,
            cursor.acked,
            cursor.leases,
            cursor.retries,
        ):
            return []
        if store.swap_cursor(project_uuid, name, fixed):
            return [
                f"subscription {project}/{name}: from offset {cursor.offset} to {fixed.offset} (the log ends at {end})"
            ]
        time.sleep(0.05)
    raise BackupError(f"the cursor of {project}/{name} kept changing: is an ams serving it already?")


def _reconcile_snapshots(store: Any, project_uuid: str, project: str, sub: str, end: int) -> list[str]:
    moved = []
    for name in store.snapshots_of_subscription(project_uuid, sub):
        snap = store.get_snapshot(project_uuid, name)
        if snap is None or (snap.offset <= end and _trim(snap.acked, end) == snap.acked):
            continue
        fixed = dataclasses.replace(snap, offset=min(snap.offset, end), acked=_trim(snap.acked, end))
        store.delete_snapshot(project_uuid, name)
        store.create_snapshot(fixed)
        moved.append(f"snapshot {project}/{name}: from offset {snap.offset} to {fixed.offset} (the log ends at {end})")
    return moved
