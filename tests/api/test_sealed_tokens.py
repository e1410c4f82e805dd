"""Users' tokens at rest (ams_app/tokenseal.py, ams_app/backends/user_tokens.py), on both stores.

With a keyring, what the store holds (read here raw: the SQLite row, the MongoDB document) has no
token and no piece of one, yet every token finds its user and every user comes back with its token;
a store kept in clear is sealed when it first opens with a keyring; a rotation keeps every token
working and, once resealed, leaves nothing under the old key; a store does not open without the keys
its tokens need, and another keyring finds no user. Last, the same through the real server and the
``ams admin`` verbs."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from ams_app.auth import new_token
from ams_app.backends.store import MetadataStore
from ams_app.models import Membership, User
from ams_app.tokenseal import Keyring, TokenSealError, key_id_of
from tests.conftest import require_backend
from tests.helpers import run_ams, service_settings, unique
from tests.inprocess import InProcessServer

OLD = ("old", os.urandom(32))
NEW = ("new", os.urandom(32))
OTHER = ("other", os.urandom(32))


def ring(*keys: tuple[str, bytes]) -> Keyring:
    return Keyring(list(keys), "the test keyring")


def keyring_file(path: Path, *keys: tuple[str, bytes]) -> Path:
    path.write_text("".join(f"{key_id}:{base64.b64encode(secret).decode()}\n" for key_id, secret in keys))
    path.chmod(0o600)
    return path


class Place:
    """Where one store lives (a SQLite file, or a MongoDB database of its own): opened with a
    keyring or none, as often as a test likes, and read raw."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.path = tmp_path / "metadata.db"
        self.database = unique("ams_sealed").replace("-", "_")
        self.opened: list[MetadataStore] = []

    def open(self, keyring: Keyring | None = None) -> MetadataStore:
        store: MetadataStore
        if self.kind == "mongo":
            from ams_app.backends.mongo.store import MongoMetadataStore

            store = MongoMetadataStore(service_settings()["AMS_MONGO_URI"], self.database, 10, keyring)
        else:
            from ams_app.backends.sqlite.store import SqliteMetadataStore

            store = SqliteMetadataStore(str(self.path), keyring)
        self.opened.append(store)
        return store

    def reopen(self, keyring: Keyring | None = None) -> MetadataStore:
        """Close what is open (a restart), then open anew."""
        self.close()
        return self.open(keyring)

    def raw(self) -> dict[str, dict[str, Any]]:
        """Each user as the store holds it, by name: the token, token_hash, and all of it as text."""
        if self.kind == "mongo":
            from pymongo import MongoClient

            client: MongoClient[dict[str, Any]] = MongoClient(service_settings()["AMS_MONGO_URI"])
            try:
                docs = list(client[self.database]["users"].find())
            finally:
                client.close()
            return {d["name"]: {"token": d["token"], "token_hash": d.get("token_hash"), "all": str(d)} for d in docs}
        with contextlib.closing(sqlite3.connect(self.path)) as conn:
            rows = conn.execute("SELECT name, token, token_hash, doc FROM users").fetchall()
        return {r[0]: {"token": r[1], "token_hash": r[2], "all": "|".join(map(str, r))} for r in rows}

    def files(self) -> bytes:
        """Every byte of the SQLite store's files (the database, its journal): what a copy holds."""
        return b"".join(p.read_bytes() for p in self.path.parent.glob(f"{self.path.name}*"))

    def close(self) -> None:
        while self.opened:
            self.opened.pop().close()

    def drop(self) -> None:
        self.close()
        if self.kind == "mongo":
            from pymongo import MongoClient

            client: MongoClient[dict[str, Any]] = MongoClient(service_settings()["AMS_MONGO_URI"])
            client.drop_database(self.database)
            client.close()


@pytest.fixture(params=["sqlite", "mongo"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    if request.param == "mongo":
        require_backend("kafka")  # its MongoDB-wire server
    where = Place(request.param, tmp_path)
    yield where
    where.drop()


def new_user(store: MetadataStore) -> User:
    user = User(unique("uuid"), unique("user"), new_token(), email="a@example.org", projects=[Membership("p", ["x"])])
    assert store.create_user(user)
    return user


def assert_no_token_in(place: Place, users: list[User]) -> None:
    """No user's token, nor any 8 characters of it, anywhere in what the store holds of any user."""
    held = " ".join(u["all"] for u in place.raw().values())
    for user in users:
        pieces = {user.token[i : i + 8] for i in range(len(user.token) - 7)}
        assert not [p for p in pieces if p in held], f"a piece of {user.name}'s token is in the store"


def assert_found(store: MetadataStore, users: list[User]) -> None:
    for user in users:
        assert store.get_user(token=user.token) == user
        assert store.get_user(name=user.name) == user
        assert store.get_user(uuid=user.uuid) == user
    assert store.get_users([u.uuid for u in users]) == {u.uuid: u for u in users}
    assert sorted(store.list_users(None, 0, "").items, key=lambda u: u.name) == sorted(users, key=lambda u: u.name)


# --- the stores ------------------------------------------------------------------------------------
def test_with_a_keyring_the_store_holds_no_token_yet_every_token_finds_its_user(place: Place) -> None:
    store = place.open(ring(NEW))
    users = [new_user(store) for _ in range(3)]
    assert_found(store, users)
    assert store.get_user(token=new_token()) is None
    assert store.get_user(token="") is None
    assert {key_id_of(u["token"]) for u in place.raw().values()} == {"new"}
    assert_no_token_in(place, users)

    # a refreshed token: the new one finds the user, the old one no longer, neither is held
    old_token = users[0].token
    users[0].token = new_token()
    assert store.update_user(users[0])
    assert store.get_user(token=users[0].token) == users[0]
    assert store.get_user(token=old_token) is None
    assert_no_token_in(place, [*users, User("-", "-", old_token)])

    # a token stays unique, sealed as it is
    assert not store.create_user(User(unique("uuid"), unique("user"), users[1].token))
    assert not store.update_user(User(users[2].uuid, users[2].name, users[1].token))
    assert_found(store, users)


def test_a_store_kept_in_clear_is_sealed_when_it_opens_with_a_keyring(place: Place) -> None:
    store = place.open()
    users = [new_user(store) for _ in range(3)]
    raw = place.raw()
    assert {raw[u.name]["token"] for u in users} == {u.token for u in users}  # in clear, as before
    assert {r["token_hash"] for r in raw.values()} == {None}

    store = place.reopen(ring(NEW))
    assert_found(store, users)
    assert_no_token_in(place, users)
    if place.kind == "sqlite":  # nor in what the rows replaced, left in the file's free space
        held = place.files()
        assert not [u for u in users if u.token.encode() in held]
    sealed = place.raw()
    assert {key_id_of(r["token"]) for r in sealed.values()} == {"new"}
    assert all(r["token_hash"] for r in sealed.values())

    place.reopen(ring(NEW))  # idempotent: nothing left to seal, nothing rewritten
    assert place.raw() == sealed
    assert place.opened[-1].reseal_tokens() == 0


def test_stores_opening_at_once_on_a_store_in_clear_seal_it_once(place: Place) -> None:
    """Nodes restarted together: each seals what is still in clear when it gets there, per user
    on the token it read, so every token ends sealed under the key, whoever sealed it."""
    users = [new_user(place.open()) for _ in range(20)]
    place.close()
    opened: list[MetadataStore] = []
    failed: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(place.open(ring(NEW)))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failed
    assert len(opened) == 3
    for store in opened:
        assert_found(store, users)
    assert {key_id_of(r["token"]) for r in place.raw().values()} == {"new"}


def test_rotation_keeps_every_token_working_and_leaves_nothing_under_the_old_key(place: Place) -> None:
    store = place.open(ring(OLD))
    users = [new_user(store) for _ in range(3)]

    # the new key first, the old one second: nothing is rewritten at the start (a node not
    # restarted yet may lack the new key), every token works, what is written is under the new key
    store = place.reopen(ring(NEW, OLD))
    assert {key_id_of(r["token"]) for r in place.raw().values()} == {"old"}
    assert_found(store, users)
    users.append(new_user(store))
    assert key_id_of(place.raw()[users[-1].name]["token"]) == "new"

    under_old = [r["token"] for r in place.raw().values() if key_id_of(r["token"]) == "old"]
    assert store.reseal_tokens() == 3
    assert {key_id_of(r["token"]) for r in place.raw().values()} == {"new"}
    if place.kind == "sqlite":
        held = place.files()
        assert not [value for value in under_old if value.encode() in held]
    assert store.reseal_tokens() == 0
    assert_found(store, users)

    store = place.reopen(ring(NEW))  # the old key gone
    assert_found(store, users)
    assert_no_token_in(place, users)


def test_a_store_opens_only_with_the_keys_its_tokens_need(place: Place) -> None:
    users = [new_user(place.open(ring(OLD))) for _ in range(2)]
    place.close()
    held = place.raw()

    with pytest.raises(TokenSealError, match=r"sealed tokens of 2 user\(s\), and token_key_file is not set"):
        place.open()
    with pytest.raises(TokenSealError, match=r"key id\(s\) 'old' \(2 user\(s\)\) that the test keyring does not"):
        place.open(ring(OTHER))
    with pytest.raises(TokenSealError, match="'old' does not open with that key of the test keyring"):
        place.open(ring(("old", OTHER[1])))  # the right id, other bytes
    assert place.raw() == held  # none of them changed anything

    # another keyring finds no user by any token: none of its hashes is held
    hashes = {r["token_hash"] for r in held.values()}
    for other in (ring(OTHER), ring(("old", OTHER[1]))):
        assert not [u for u in users if set(other.lookup(u.token)) & hashes]

    assert_found(place.open(ring(OLD)), users)


def test_resealing_needs_a_keyring(place: Place) -> None:
    with pytest.raises(TokenSealError, match="token_key_file is not set"):
        place.open().reseal_tokens()


def test_a_data_directory_of_the_release_before_is_sealed_and_works(tmp_path: Path) -> None:
    """The unversioned fixture data directory (tests/unit/ams_app/test_sqlite_schema.py), opened
    with a keyring: its schema gains token_hash, its user's token is sealed and still works."""
    from ams_app.backends.sqlite.store import MIGRATIONS
    from tests.unit.ams_app.test_sqlite_schema import restore_legacy

    data = tmp_path / "data"
    restore_legacy(data)
    service = InProcessServer(data, token="legacy-service-token", token_key_file=str(keyring_file(tmp_path / "k", NEW)))
    try:
        api = service.api()
        alice = api.ok("GET", "/users/alice")
        assert api.as_(alice["token"]).get("/projects/legacy/topics/events").status_code == 200
    finally:
        service.stop()
    with contextlib.closing(sqlite3.connect(data / "metadata.db")) as conn:
        token, token_hash, doc = conn.execute("SELECT token, token_hash, doc FROM users WHERE name='alice'").fetchone()
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert key_id_of(token) == "new"
    assert token_hash
    assert alice["token"] not in token + doc


# --- through the server and the admin verbs --------------------------------------------------------
def ams(*args: str, keys: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AMS_TOKEN_KEY_FILE"}
    if keys is not None:
        env["AMS_TOKEN_KEY_FILE"] = str(keys)
    return run_ams(*args, env=env)


def test_with_a_keyring_a_token_works_at_the_front_door_and_show_token_prints_it(
    make_server: Any, tmp_path: Path
) -> None:
    keys = keyring_file(tmp_path / "token-keys", NEW)
    data = tmp_path / "data"
    srv = make_server(data, ams_token_key_file=str(keys))
    api = srv.api()
    project = api.new_project()
    carol = api.new_user(unique("carol"), projects=[{"project": project, "roles": ["consumer"]}])
    token = api.ok("GET", f"/users/{carol['name']}")["token"]
    assert token == carol["token"]
    assert api.as_(token).ok("GET", "/users/profile")["name"] == carol["name"]
    assert requests.get(f"{srv.url}/users/profile", params={"key": token}, timeout=30).status_code == 200
    assert api.as_(new_token()).get("/users/profile").status_code == 401

    shown = ams("admin", "show-token", carol["name"], "--data-dir", str(data), keys=keys)
    assert (shown.returncode, shown.stdout.strip()) == (0, token), shown.stderr
    resealed = ams("admin", "reseal-tokens", "--data-dir", str(data), keys=keys)
    assert resealed.returncode == 0, resealed.stderr
    assert resealed.stdout.startswith("0 user(s) resealed"), resealed.stdout

    refreshed = api.ok("POST", f"/users/{carol['name']}:refreshToken")["token"]
    assert api.as_(refreshed).get("/users/profile").status_code == 200
    assert api.as_(token).get("/users/profile").status_code == 401
    srv.stop()

    on_disk = b"".join(p.read_bytes() for p in data.iterdir() if p.is_file())
    assert token.encode() not in on_disk
    assert refreshed.encode() not in on_disk

    # without the keyring nothing starts, and it says why, without a traceback
    refused = ams("admin", "show-token", carol["name"], "--data-dir", str(data), keys=None)
    assert refused.returncode == 2, refused.stderr
    assert "token_key_file is not set" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    keys.write_text("new:short\n")
    checked = ams("check-config", "--data-dir", str(data), keys=keys)
    assert checked.returncode == 2, checked.stderr
    assert f"{keys}:1: the key 'new' is" in checked.stderr, checked.stderr
    assert "Traceback" not in checked.stderr
