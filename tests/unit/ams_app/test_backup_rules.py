"""The rules of ``ams backup`` and ``ams restore`` (ams_app/backup.py) in-process, on the embedded
backend: what an archive must be to be restored, retention, the metrics file, the data directory's
lock, and cursors brought in line with the message log. Through the command and over sockets, on
both backends: tests/api/test_backup.py."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sqlite3
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ams_app import __version__, backup, cli
from ams_app.backends.errors import StoreBusy
from ams_app.backends.sqlite.datadir import RESTORING_MARK, DataDirLock
from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.settings import Settings
from tests.helpers import b64
from tests.inprocess import InProcessServer

NOW = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)


def _scenario(data_dir: Path) -> tuple[str, list[str]]:
    """A topic of 6 messages and a subscription that acknowledged 4 of them (its cursor at 4)."""
    server = InProcessServer(data_dir)
    try:
        api = server.api()
        project = api.new_project("rules")
        api.ok("PUT", f"/projects/{project}/topics/t")
        api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"})
        ids = api.publish(project, "t", *[f"m{i}" for i in range(6)])
        pulled = api.pull(project, "s", 4)
        assert api.ack(project, "s", [m["ackId"] for m in pulled]).status_code == 200
    finally:
        server.stop()
    return project, ids


def _made(tmp_path: Path) -> tuple[Settings, Path]:
    settings = Settings(data_dir=str(tmp_path / "data"))
    _scenario(tmp_path / "data")
    out = tmp_path / "out"
    out.mkdir()
    return settings, backup.backup(settings, out, now=NOW)


def _rewrite(archive: Path, change: Any) -> Path:
    """A copy of ``archive`` whose manifest and members ``change(manifest, members)`` edited, the
    checksums in the manifest made to match (so that only the rule under test refuses it)."""
    with tarfile.open(archive) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    manifest = json.loads(members.pop("manifest.json"))
    change(manifest, members)
    manifest["files"].update(
        {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)} for name, data in members.items()}
    )
    out = archive.with_name("edited.tar")
    with tarfile.open(out, "w") as tar:
        for name, data in [("manifest.json", json.dumps(manifest).encode()), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def test_an_archive_names_its_release_backend_layouts_and_checksums(tmp_path: Path) -> None:
    _settings, archive = _made(tmp_path)
    assert archive.name == "ams-backup-20261128T120000Z.tar"
    checked = backup.check(archive, "embedded")
    assert checked.manifest["release"] == __version__
    assert checked.manifest["layout"] == backup.known_layouts("embedded")
    assert set(checked.files) == {"embedded/metadata.db", "embedded/messages.db"}
    sums = archive.with_name(archive.name + ".sha256").read_text()
    assert sums == f"{hashlib.sha256(archive.read_bytes()).hexdigest()}  {archive.name}\n"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m, f: m.update(release="999.0.0"), "newer than this release"),
        (lambda m, f: m.update(format_version=2), "backup format 2"),
        (lambda m, f: m.update(format="tarball"), "not an ams backup"),
        (lambda m, f: m.update(backend="kafka"), "a backup of the kafka backend"),
        (lambda m, f: m["layout"].update({"metadata.db": 99}), "metadata.db at layout 99"),
        (lambda m, f: f.update({"embedded/../../etc/passwd": b"x"}), "not a file an archive holds"),
        (lambda m, f: f.pop("embedded/messages.db"), "lacks embedded/messages.db"),
    ],
)
def test_an_archive_is_refused_for_what_it_holds(tmp_path: Path, change: Any, reason: str) -> None:
    _, archive = _made(tmp_path)
    edited = _rewrite(archive, change)
    with pytest.raises(backup.BackupError, match=reason.replace("(", r"\(")):
        backup.check(edited, "embedded")


def test_a_damaged_member_or_archive_is_refused(tmp_path: Path) -> None:
    _, archive = _made(tmp_path)
    swapped = _rewrite(archive, lambda m, f: None)
    with tarfile.open(swapped) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    with tarfile.open(swapped, "w") as tar:
        for info, data in members:
            if info.name == "embedded/metadata.db":
                data = data[:-1] + bytes([data[-1] ^ 1])
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(backup.BackupError, match="does not match its checksum"):
        backup.check(swapped, "embedded")
    archive.with_name(archive.name + ".sha256").write_text("0" * 64 + f"  {archive.name}\n")
    with pytest.raises(backup.BackupError, match=r"does not match .*sha256"):
        backup.check(archive, "embedded")
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(backup.BackupError, match="cannot be read as an ams backup"):
        backup.check(junk, "embedded")


def test_a_restore_waits_for_the_running_service_and_nothing_opens_a_half_restore(tmp_path: Path) -> None:
    settings, archive = _made(tmp_path)
    store = SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"))
    try:
        with pytest.raises(StoreBusy, match="stop it before the restore"):
            backup.restore(settings, archive, replace=True)
    finally:
        store.close()
    Path(settings.data_dir, RESTORING_MARK).write_text("interrupted\n")
    with pytest.raises(StoreBusy, match="did not finish"):
        SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"))
    held = DataDirLock(settings.data_dir, exclusive=True)  # a restore at work
    try:
        with pytest.raises(StoreBusy, match="is running"):
            SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"))
    finally:
        held.close()
    done = backup.restore(settings, archive)  # an unfinished restore is done again without --replace
    assert not Path(settings.data_dir, RESTORING_MARK).exists()
    assert "restored" in done.lines()


def test_cursors_past_the_end_of_a_lost_log_come_back_to_it(tmp_path: Path) -> None:
    """The metadata restored, the messages not (the log lost them): the cursor that had
    acknowledged 4 messages goes back to the log's end, and the next message published is
    delivered, not skipped."""
    _settings, archive = _made(tmp_path)
    fresh = Settings(data_dir=str(tmp_path / "fresh"))
    edited = _rewrite(archive, lambda m, f: (f.pop("embedded/messages.db"), m["files"].pop("embedded/messages.db")))
    done = backup.restore(fresh, edited)
    assert [line for line in done.moved if "/s: from offset 4 to 0" in line], done.moved
    server = InProcessServer(tmp_path / "fresh")
    try:
        api = server.api()
        project = api.ok("GET", "/projects")["projects"][0]["name"]
        assert api.publish(project, "t", "after") == ["0"]
        assert [m["message"]["data"] for m in api.pull(project, "s")] == [b64("after")]
    finally:
        server.stop()


def test_retention_keeps_the_newest_archives(tmp_path: Path) -> None:
    for day in range(5):
        name = backup.archive_name(NOW + timedelta(days=day))
        (tmp_path / name).write_bytes(b"x")
        (tmp_path / f"{name}.sha256").write_text("x")
    (tmp_path / "notes.txt").write_text("kept")
    gone = backup.prune(tmp_path, 2)
    assert [p.name for p in gone] == [backup.archive_name(NOW + timedelta(days=d)) for d in range(3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ams-backup-20261201T120000Z.tar",
        "ams-backup-20261201T120000Z.tar.sha256",
        "ams-backup-20261202T120000Z.tar",
        "ams-backup-20261202T120000Z.tar.sha256",
        "notes.txt",
    ]


def test_a_failure_keeps_the_last_success_in_the_metrics_file(tmp_path: Path) -> None:
    path = tmp_path / "ams-backup.prom"
    backup.write_metrics(path, success=(1000.0, 2048, 1.5), failed_at=None)
    backup.write_metrics(path, success=None, failed_at=2000.0)
    assert backup.read_metrics(path) == {
        "ams_backup_last_success_timestamp_seconds": 1000.0,
        "ams_backup_last_size_bytes": 2048.0,
        "ams_backup_last_duration_seconds": 1.5,
        "ams_backup_last_failure_timestamp_seconds": 2000.0,
    }
    assert "# TYPE ams_backup_last_success_timestamp_seconds gauge" in path.read_text()


def test_a_failed_backup_says_why_and_records_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    metrics = tmp_path / "m.prom"
    empty = tmp_path / "empty"
    args = ["backup", "--data-dir", str(empty), "--to", str(tmp_path), "--metrics-file", str(metrics)]
    assert cli.main(args) == 1
    assert "nothing to back up" in capsys.readouterr().err
    assert backup.read_metrics(metrics)["ams_backup_last_failure_timestamp_seconds"] > 0
    assert cli.main([*args[:-2], "--keep", "0"]) == 2


def test_admin_layout_says_whether_this_release_opens_the_data_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    assert cli.main(["admin", "layout", "--data-dir", str(data)]) == 0  # nothing stored yet
    _scenario(data)
    assert cli.main(["admin", "layout", "--data-dir", str(data)]) == 0
    capsys.readouterr()
    known = backup.known_layouts("embedded")["metadata.db"]
    for version, code in ((known - 1, 3), (known + 1, 2)):
        conn = sqlite3.connect(data / "metadata.db")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.close()
        assert cli.main(["admin", "layout", "--data-dir", str(data)]) == code
        said = json.loads(capsys.readouterr().out)
        assert said["stores"]["metadata.db"] == {"stored": version, "known": known}
        assert said["release"] == __version__
        assert said["backend"] == "embedded"
