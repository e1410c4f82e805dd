"""``ams backup`` and ``ams restore`` through the command, on both backends: a backup taken while
the service serves, restored into a fresh deployment, where argo-ams-library's consumer carries on
at exactly its next message (docs/production.md, "Backup and restore")."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from argo_ams_library import AmsMessage, ArgoMessagingService

from ams_app import backup
from ams_app.backends.errors import LayoutRefused
from ams_app.backends.mongo.store import LAYOUT_COLLECTION, RESTORING_ID, MongoMetadataStore
from ams_app.models import Project, Topic
from ams_app.settings import Settings
from ams_app.timeutil import now_ns
from tests.conftest import require_backend
from tests.helpers import backend_env, drop_database, run_ams, scratch_mongo_store, service_settings, unique

SERVICE_TOKEN = "test-service-token"


def _env(server_env: dict[str, str], **more: str) -> dict[str, str]:
    return {**os.environ, "AMS_SERVICE_TOKEN": SERVICE_TOKEN, **server_env, **more}


def _fill(server: Any) -> tuple[str, str, list[str]]:
    """A project with a publisher-consumer, a topic, two subscriptions and 20 messages; the
    consumer has acknowledged the first 8 of ``work``; ``idle`` none. The token and the ids."""
    api = server.api(SERVICE_TOKEN)
    project = api.new_project("bk")
    name = unique("carol")
    user = api.new_user(name, projects=[{"project": project, "roles": ["publisher", "consumer"]}])
    api.ok("PUT", f"/projects/{project}/topics/jobs")
    api.ok("POST", f"/projects/{project}/topics/jobs:modifyAcl", {"authorized_users": [name]})
    for sub in ("work", "idle"):
        api.ok("PUT", f"/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/jobs"})
        api.ok("POST", f"/projects/{project}/subscriptions/{sub}:modifyAcl", {"authorized_users": [name]})
    ams = ArgoMessagingService(endpoint=server.host, token=user["token"], project=project)
    ids = ams.publish("jobs", [AmsMessage(data=f"job {i}".encode(), attributes={"n": str(i)}) for i in range(20)])[
        "messageIds"
    ]
    pulled = ams.pull_sub("work", num=8, return_immediately=True)
    assert [m.get_msgid() for _, m in pulled] == ids[:8]
    ams.ack_sub("work", [pulled[-1][0]])
    return project, user["token"], ids


def _drain(ams: ArgoMessagingService, sub: str) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    while pulled := ams.pull_sub(sub, num=6, return_immediately=True):
        got += [(m.get_msgid(), m.get_data()) for _, m in pulled]
        ams.ack_sub(sub, [pulled[-1][0]])
    return got


@pytest.mark.parametrize("backend", ["embedded", "kafka"])
def test_a_backup_restored_into_a_fresh_deployment_carries_on(make_server: Any, tmp_path: Path, backend: str) -> None:
    first = make_server(tmp_path / "first", backend=backend, ams_push_enabled="false")
    project, token, ids = _fill(first)
    backups = tmp_path / "backups"
    backups.mkdir()
    metrics = tmp_path / "ams-backup.prom"
    source_env = _env(first.env)
    fresh_db = unique("ams_restored").replace("-", "_")
    try:
        # taken while the first deployment serves, as the timer does
        made = run_ams("backup", "--data-dir", str(first.data_dir), "--to", str(backups), "--keep", "3",
                       "--metrics-file", str(metrics), env=source_env)  # fmt: skip
        assert made.returncode == 0, made.stderr
        archive = Path(made.stdout.strip())
        assert archive.parent == backups
        assert archive.name.startswith("ams-backup-")
        assert oct(archive.stat().st_mode & 0o777) == "0o600"
        checked = subprocess.run(["sha256sum", "-c", archive.name + ".sha256"], cwd=backups, capture_output=True)
        assert checked.returncode == 0, checked.stdout
        figures = dict(line.split(" ") for line in metrics.read_text().splitlines() if not line.startswith("#"))
        assert float(figures["ams_backup_last_success_timestamp_seconds"]) > 0
        assert float(figures["ams_backup_last_size_bytes"]) == archive.stat().st_size
        with tarfile.open(archive) as tar:
            manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest["backend"] == backend
        assert manifest["release"]
        first.stop()

        # a fresh deployment: another data directory, or another MongoDB database on the same Kafka
        target_env = _env(backend_env(backend), AMS_MONGO_DATABASE=fresh_db)
        fresh = tmp_path / "fresh"
        verify = run_ams("restore", str(archive), "--verify", "--data-dir", str(fresh), env=target_env)
        assert verify.returncode == 0, verify.stderr
        assert "sha256 ok" in verify.stdout
        restored = run_ams("restore", str(archive), "--data-dir", str(fresh), env=target_env)
        assert restored.returncode == 0, restored.stderr
        again = run_ams("restore", str(archive), "--data-dir", str(fresh), env=target_env)
        assert again.returncode == 1
        assert "--replace" in again.stderr
        replaced = run_ams("restore", str(archive), "--replace", "--data-dir", str(fresh), env=target_env)
        assert replaced.returncode == 0, replaced.stderr

        second = make_server(fresh, backend=backend, ams_push_enabled="false", ams_mongo_database=fresh_db)
        ams = ArgoMessagingService(endpoint=second.host, token=token, project=project)
        got = _drain(ams, "work")  # the same token; the consumer's next message, each once
        assert [message_id for message_id, _ in got] == ids[8:]
        assert [data for _, data in got] == [f"job {i}".encode() for i in range(8, 20)]
        assert [message_id for message_id, _ in _drain(ams, "idle")] == ids
        more = ams.publish("jobs", [AmsMessage(data=b"after the restore")])["messageIds"]
        assert more == [str(int(ids[-1]) + 1)]  # the topic's offsets go on
        assert [data for _, data in _drain(ams, "work")] == [b"after the restore"]
    finally:
        drop_database(fresh_db)
        drop_database(first.env.get("AMS_MONGO_DATABASE", ""))


def test_a_damaged_or_foreign_archive_is_refused_before_anything_is_written(make_server: Any, tmp_path: Path) -> None:
    first = make_server(tmp_path / "first", ams_push_enabled="false")
    _fill(first)
    backups = tmp_path / "backups"
    backups.mkdir()
    env = _env(first.env)
    made = run_ams("backup", "--data-dir", str(first.data_dir), "--to", str(backups), env=env)
    assert made.returncode == 0, made.stderr
    archive = Path(made.stdout.strip())

    # a running ams has the data directory open: a restore there waits for it to stop
    busy = run_ams("restore", str(archive), "--replace", "--data-dir", str(first.data_dir), env=env)
    assert busy.returncode == 1
    assert "stop it before the restore" in busy.stderr

    damaged = backups / "damaged.tar"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    fresh = tmp_path / "fresh"
    refused = run_ams("restore", str(damaged), "--data-dir", str(fresh), env=env)
    assert refused.returncode == 1
    assert "damaged" in refused.stderr, refused.stderr
    assert not (fresh / "metadata.db").exists()

    # the archive of the embedded backend does not go into MongoDB
    other = run_ams("restore", str(archive), "--data-dir", str(fresh), env={**env, **backend_env("kafka")})
    assert other.returncode == 1
    assert "the embedded backend" in other.stderr, other.stderr


def _mongo_settings(database: str) -> Settings:
    found = service_settings()
    return Settings(
        backend="kafka",
        mongo_uri=found["AMS_MONGO_URI"],
        mongo_database=database,
        kafka_bootstrap_servers=found["AMS_KAFKA_BOOTSTRAP_SERVERS"],
        kafka_timeout_seconds=10,
    )


def test_the_mongodb_dump_reads_again_until_the_objects_held_still(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic created while the collections are read: the first reads differ from the check's,
    so all is read again, and the archive holds the topic; objects that never hold still fail it."""
    require_backend("kafka")
    with scratch_mongo_store("ams_bk") as store:
        store.create_project(Project("p-uuid", "p", "test", now_ns()))
        store.create_topic(Topic("p-uuid", "t1", now_ns(), []))
        settings = _mongo_settings(store.db.name)
        real = backup._dump_collection
        checks: list[str] = []

        def racing(db: Any, name: str, out: Any, *, always: bool = False) -> tuple[str, int]:
            if name == "topics" and out is None:
                checks.append(name)
                if always or len(checks) == 1:
                    store.create_topic(Topic("p-uuid", f"t{len(checks) + 1}", now_ns(), []))
            return real(db, name, out)

        monkeypatch.setattr(backup, "_dump_collection", racing)
        archive = backup.backup(settings, tmp_path)
        assert len(checks) == 2  # read again once
        with tarfile.open(archive) as tar:
            topics = tar.extractfile("mongodb/topics.jsonl").read().decode().splitlines()  # type: ignore[union-attr]
        assert sorted(json.loads(line)["name"] for line in topics) == ["t1", "t2"]

        monkeypatch.setattr(backup, "_dump_collection", lambda db, name, out: racing(db, name, out, always=True))
        with pytest.raises(backup.BackupError, match="kept changing"):
            backup.backup(settings, tmp_path, now=datetime.now(UTC) + timedelta(seconds=5))


def test_an_unfinished_mongodb_restore_is_not_opened(tmp_path: Path) -> None:
    require_backend("kafka")
    with scratch_mongo_store("ams_bk") as store:
        store.create_project(Project("p-uuid", "p", "test", now_ns()))
        archive = backup.backup(_mongo_settings(store.db.name), tmp_path)
        store.db[LAYOUT_COLLECTION].insert_one({"_id": RESTORING_ID, "archive": "interrupted"})
        with pytest.raises(LayoutRefused, match="did not finish"):
            MongoMetadataStore(service_settings()["AMS_MONGO_URI"], store.db.name, 10)
        done = backup.restore(_mongo_settings(store.db.name), archive)  # no --replace needed to finish it
        assert "restored" in done.lines()
        MongoMetadataStore(service_settings()["AMS_MONGO_URI"], store.db.name, 10).close()
