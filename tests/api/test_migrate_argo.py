"""``ams migrate from-argo`` (docs/migration.md) from a database in the original ARGO AMS's layout
(tests/argo_layout.py) on the tests' MongoDB-wire server, with its messages in Kafka under the
original's topic names: a dry run, the migration, a second run, then ``ams serve`` on the same
Kafka and argo-ams-library with the original's tokens. Consumers resume at exactly their next
message; the counters and the daily history come along; the source is never written to. Into the
embedded backend, the messages are copied from Kafka at their offsets (``--copy-messages-from``),
and consumers resume there the same way."""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from argo_ams_library import ArgoMessagingService
from pymongo import MongoClient

from tests import argo_layout
from tests.argo_layout import ArgoSource
from tests.conftest import require_backend
from tests.helpers import database_state, drop_database, run_ams, service_settings, unique


@pytest.fixture
def source() -> Iterator[tuple[Any, ArgoSource]]:
    require_backend("kafka")
    settings = service_settings()
    client: MongoClient[dict[str, Any]] = MongoClient(settings["AMS_MONGO_URI"], serverSelectionTimeoutMS=10_000)
    name = unique("argo_go").replace("-", "_")
    db = client[name]
    filled = argo_layout.fill(db)
    argo_layout.produce(settings["AMS_KAFKA_BOOTSTRAP_SERVERS"], filled)
    try:
        yield db, filled
    finally:
        client.drop_database(name)
        client.close()


def migrate(env: dict[str, str], source_db: str, *more: str) -> subprocess.CompletedProcess[str]:
    uri = service_settings()["AMS_MONGO_URI"]
    args = ["migrate", "from-argo", "--source-database", source_db, "--source-mongo-uri", uri, *more]
    return run_ams(*args, env={**os.environ, **env}, timeout=300)


def test_a_migration_onto_the_same_kafka_is_seen_unchanged_by_the_library(
    source: tuple[Any, ArgoSource], make_server: Any, tmp_path: Path
) -> None:
    db, argo = source
    before = database_state(db)
    dest = unique("ams_migrated").replace("-", "_")
    env = {**service_settings(), "AMS_BACKEND": "kafka", "AMS_MONGO_DATABASE": dest, "AMS_CONSUME_OWNER": "false"}
    try:
        dry = migrate(env, db.name, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "projects: would create 1, already there 0" in dry.stdout
        assert "users: would create 4, already there 0" in dry.stdout
        assert "subscriptions: would create 3, already there 0" in dry.stdout

        done = migrate(env, db.name)
        assert done.returncode == 0, done.stderr
        report = done.stdout.splitlines()
        assert "projects: created 1, already there 0" in report
        assert "users: created 4, already there 0" in report
        assert "schemas: created 1, already there 0" in report
        assert "registrations: created 1, already there 0" in report
        assert "topics: created 2, already there 0, counters brought up 1" in report
        unmapped = [line for line in report if line.startswith("not mapped: ")]
        assert any("'orphan'" in line and "deleted-topic" in line for line in unmapped), unmapped
        assert any("user 'bob': membership of project" in line for line in unmapped), unmapped
        assert any("role 'wizard'" in line for line in unmapped), unmapped
        assert any("topic 'events'" in line and "ACL entry" in line for line in unmapped), unmapped
        assert [line for line in report if line.startswith("left out: ")] == [
            "left out: op_metrics: the Go hosts' own CPU and memory, not tenant data",
            "left out: roles: the route-to-roles table: fixed in code here (its differences are listed above)",
        ]
        assert "not mapped: roles table: 'x' is not a route here" in unmapped
        assert (
            "not mapped: roles table: 'topics:publish' is for project_admin, publisher there, "
            "for project_admin, publisher, service_admin here"
        ) in unmapped

        again = migrate(env, db.name)  # idempotent: everything is there, nothing counted twice
        assert again.returncode == 0, again.stderr
        assert "projects: created 0, already there 1" in again.stdout
        assert "subscriptions: created 0, already there 3" in again.stdout
        assert "counters brought up" not in again.stdout
        assert database_state(db) == before  # the source was never written to

        server = make_server(tmp_path / "data", backend="kafka", ams_mongo_database=dest, ams_push_enabled="false")
        _consumers_resume(server, argo)
        _metrics_and_objects(server, argo)
    finally:
        drop_database(dest)


def _drain(ams: ArgoMessagingService, sub: str) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    while True:
        pulled = ams.pull_sub(sub, num=7, return_immediately=True)
        if not pulled:
            return got
        got += [(m.get_msgid(), m.get_data()) for _, m in pulled]
        ams.ack_sub(sub, [pulled[-1][0]])


def _consumers_resume(server: Any, argo: ArgoSource) -> None:
    """bob's consumer of ``ingest`` had acknowledged 37: it gets 37 on, each once; ``fresh`` had a
    pull of 10 outstanding, never acknowledged: it gets everything from 0."""
    bob = ArgoMessagingService(endpoint=server.host, token=argo.tokens["bob"], project=argo.project)
    got = _drain(bob, "ingest")
    assert [message_id for message_id, _ in got] == [str(i) for i in range(37, argo.messages)]
    assert [data for _, data in got] == [f"message {i}".encode() for i in range(37, argo.messages)]
    root = ArgoMessagingService(endpoint=server.host, token=argo.tokens["root"], project=argo.project)
    fresh = _drain(root, "fresh")
    assert [message_id for message_id, _ in fresh] == [str(i) for i in range(argo.messages)]
    alice = ArgoMessagingService(endpoint=server.host, token=argo.tokens["alice"], project=argo.project)
    published = alice.publish("events", [_message(b"after the migration")])
    assert published["messageIds"] == [str(argo.messages)]  # the next offset: ids stay the Kafka offsets


def _message(data: bytes) -> Any:
    from argo_ams_library import AmsMessage

    return AmsMessage(data=data)


def _metrics_and_objects(server: Any, argo: ArgoSource) -> None:
    api = server.api()
    project = argo.project
    metrics = api.ok("GET", f"/projects/{project}/topics/events:metrics")["metrics"]
    by_name = {m["metric"]: m for m in metrics}
    # the original's count, and the publish above once the node has flushed it
    assert by_name["topic.number_of_messages"]["timeseries"][0]["value"] in (argo.messages, argo.messages + 1)
    daily = {
        point["timestamp"][:10]: point["value"] for point in by_name["topic.number_of_daily_messages"]["timeseries"]
    }
    for day, count in argo.daily.items():
        assert daily.get(day, 0) >= count, daily  # today's has the publish above on top
    hook = api.ok("GET", f"/projects/{project}/subscriptions/hook")
    assert hook["pushConfig"]["pushEndpoint"] == "https://receiver.example.org/push"
    assert hook["pushConfig"]["verified"] is True
    assert hook["pushConfig"]["authorizationHeader"] == {"type": "autogen", "value": "secret-header"}
    assert api.ok("GET", f"/projects/{project}/subscriptions/ingest")["ackDeadlineSeconds"] == 30
    carol = api.ok("GET", "/users/carol")
    assert carol["token"] == argo.tokens["carol"]
    assert carol["projects"] == [{"project": project, "roles": ["project_admin"], "topics": [], "subscriptions": []}]
    topic = api.ok("GET", f"/projects/{project}/topics/logs")
    assert topic["schema"] == f"projects/{project}/schemas/event-schema"
    acl = api.ok("GET", f"/projects/{project}/topics/events:acl")
    assert acl["authorized_users"] == ["alice"]


def test_a_migration_into_the_embedded_backend_takes_the_metadata(
    source: tuple[Any, ArgoSource], make_server: Any, tmp_path: Path
) -> None:
    """The same source into the embedded backend: the objects, tokens, offsets and counters; a
    second run finds them all there."""
    db, argo = source
    data = tmp_path / "embedded"
    env = {"AMS_BACKEND": "embedded", "AMS_DATA_DIR": str(data)}
    done = migrate(env, db.name, "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    assert "users: created 4, already there 0" in done.stdout
    again = migrate(env, db.name, "--data-dir", str(data))
    assert "users: created 0, already there 4" in again.stdout
    assert "counters brought up" not in again.stdout
    server = make_server(data, backend="embedded", ams_push_enabled="false")
    api = server.api()
    project = argo.project
    assert api.ok("GET", f"/projects/{project}")["name"] == project
    bob = api.as_(argo.tokens["bob"])
    ingest = bob.ok("GET", f"/projects/{project}/subscriptions/ingest")
    assert ingest["topic"].endswith(f"projects/{project}/topics/events")
    assert api.ok("GET", f"/projects/{project}/subscriptions/ingest:offsets")["current"] == 37
    metrics = api.ok("GET", f"/projects/{project}/subscriptions/ingest:metrics")["metrics"]
    consumed = {m["metric"]: m["timeseries"][0]["value"] for m in metrics if m["timeseries"]}
    assert consumed["subscription.number_of_messages"] == 37


def test_the_messages_copied_into_the_embedded_backend_keep_their_ids(
    source: tuple[Any, ArgoSource], make_server: Any, tmp_path: Path
) -> None:
    """``--copy-messages-from``: each message of the original's Kafka topics lands in the embedded
    log at its offset, as its record holds it; a run after the original published more copies those
    alone, one more copies nothing. Then argo-ams-library: bob's consumer, part-way through the
    backlog (37 acknowledged), gets exactly the rest, each once, with the original's ids, data,
    attributes and publish times; the next publish gets the id Kafka would have given."""
    db, argo = source
    bootstrap = service_settings()["AMS_KAFKA_BOOTSTRAP_SERVERS"]
    data = tmp_path / "embedded"
    env = {"AMS_BACKEND": "embedded", "AMS_DATA_DIR": str(data)}
    copy = ("--data-dir", str(data), "--copy-messages-from", bootstrap)
    events, logs = f"{argo.project_uuid}.events", f"{argo.project_uuid}.logs"

    dry = migrate(env, db.name, *copy, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "messages: would copy 50, already there 0" in dry.stdout.splitlines()
    assert "messages of ARGO/events: would copy 50, already there 0 (Kafka offsets 0 to 49)" in dry.stdout
    assert f"messages of ARGO/logs: no Kafka topic {logs} (never published to)" in dry.stdout

    done = migrate(env, db.name, *copy)
    assert done.returncode == 0, done.stderr
    report = done.stdout.splitlines()
    assert "users: created 4, already there 0" in report
    assert "messages: copied 50, already there 0" in report
    assert "messages of ARGO/events: copied 50, already there 0 (Kafka offsets 0 to 49)" in report
    assert f"messages of ARGO/logs: no Kafka topic {logs} (never published to)" in report
    assert not [line for line in report if line.startswith("not mapped: messages")], report

    argo_layout.produce_more(bootstrap, argo, 5)  # the original served on (not frozen yet)
    again = migrate(env, db.name, *copy, "--dry-run")
    assert "messages of ARGO/events: would copy 5, already there 50 (Kafka offsets 0 to 54)" in again.stdout
    again = migrate(env, db.name, *copy)
    assert again.returncode == 0, again.stderr
    assert "users: created 0, already there 4" in again.stdout
    assert "messages of ARGO/events: copied 5, already there 50 (Kafka offsets 0 to 54)" in again.stdout
    last = migrate(env, db.name, *copy)
    assert "messages: copied 0, already there 55" in last.stdout.splitlines()

    records = argo_layout.records(bootstrap, events)
    assert sorted(records) == list(range(55))
    server = make_server(data, backend="embedded", ams_push_enabled="false")
    bob = ArgoMessagingService(endpoint=server.host, token=argo.tokens["bob"], project=argo.project)
    got = _drain_whole(bob, "ingest")
    assert [message_id for message_id, *_ in got] == [str(i) for i in range(37, 55)]  # nothing lost, none twice
    for message_id, data_, attributes, publish_time in got:
        record = records[int(message_id)]
        assert data_ == base64.b64decode(record["data"])
        assert attributes == record.get("attributes", {})
        assert publish_time == record["publishTime"]  # nine digits, as the record holds it
    root = ArgoMessagingService(endpoint=server.host, token=argo.tokens["root"], project=argo.project)
    assert [message_id for message_id, *_ in _drain_whole(root, "fresh")] == [str(i) for i in range(55)]
    api = server.api()
    offsets = api.ok("GET", f"/projects/{argo.project}/subscriptions/ingest:offsets")
    assert (offsets["min"], offsets["max"], offsets["current"]) == (0, 55, 55)
    alice = ArgoMessagingService(endpoint=server.host, token=argo.tokens["alice"], project=argo.project)
    assert alice.publish("events", [_message(b"after the copy")])["messageIds"] == ["55"]


def _drain_whole(ams: ArgoMessagingService, sub: str) -> list[tuple[str, bytes, dict[str, str], str]]:
    """Pull and acknowledge until nothing is left: each message's id, data, attributes, publishTime."""
    got: list[tuple[str, bytes, dict[str, str], str]] = []
    while True:
        pulled = ams.pull_sub(sub, num=7, return_immediately=True)
        if not pulled:
            return got
        got += [(m.get_msgid(), m.get_data(), m.get_attr() or {}, m.get_publishtime()) for _, m in pulled]
        ams.ack_sub(sub, [pulled[-1][0]])


def test_messages_are_copied_only_into_the_embedded_backend() -> None:
    """On the Kafka backend the messages stay where they are: the option is refused before anything
    is read."""
    env = {**service_settings(), "AMS_BACKEND": "kafka", "AMS_MONGO_DATABASE": "ams_never_opened"}
    done = migrate(env, "argo_never_read", "--copy-messages-from", "127.0.0.1:1")
    assert done.returncode == 2
    assert "--copy-messages-from is for the embedded backend" in done.stderr
    assert done.stdout == ""


def test_the_playbook_runs_what_the_ams_role_installs() -> None:
    """playbooks/migrate_from_argo.yml names the ams command, the settings file and the user by the
    ams role's variables, with the role's defaults where the inventory sets none."""
    root = Path(__file__).resolve().parents[2]
    defaults = yaml.safe_load((root / "roles/ams/defaults/main.yml").read_text())
    internal = yaml.safe_load((root / "roles/ams/vars/main.yml").read_text())
    assert internal["_ams_bin"] == "{{ ams_install_root }}/current/bin/ams"
    assert internal["_ams_settings_file"] == "{{ ams_config_dir }}/ams.yml"
    (play,) = yaml.safe_load((root / "playbooks/migrate_from_argo.yml").read_text())
    install_root = f"ams_install_root | default('{defaults['ams_install_root']}')"
    config_dir = f"ams_config_dir | default('{defaults['ams_config_dir']}')"
    assert play["vars"]["__argo_migrate_bin"] == "{{ " + install_root + " }}/current/bin/ams"
    assert play["vars"]["__argo_migrate_settings"] == "{{ " + config_dir + " }}/ams.yml"
    assert play["become_user"] == "{{ ams_user | default('" + defaults["ams_user"] + "') }}"
    assert play["hosts"] == "ams[0]"
