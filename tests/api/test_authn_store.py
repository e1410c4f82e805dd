"""The AuthN records in the metadata store (docs/authn.md): service types, and bindings of a
certificate's subject DN on a service's host to an AMS user.

One contract, pinned on both stores alike: the embedded SQLite store and the MongoDB store
(against FerretDB). The uniqueness rules are the stores' own (UNIQUE constraints, unique
indexes), so they hold between concurrent writers too."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import unicodedata
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo.errors import OperationFailure

from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.backends.store import BindingWrite, InvalidPageToken, MetadataStore
from ams_app.models import Binding, ServiceType
from tests.conftest import require_backend
from tests.helpers import either_store, scratch_mongo_store

CREATED = "2026-01-02T03:04:05Z"


@pytest.fixture(params=["sqlite", "mongo"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "mongo":
        require_backend("kafka")  # its MongoDB-wire server
    with either_store(request.param, tmp_path, "ams_authn_store_test") as store:
        yield store


def service_type(name: str, *hosts: str) -> ServiceType:
    return ServiceType(uuid.uuid4().hex, name, list(hosts), created_on=CREATED, updated_on=CREATED)


def binding(name: str, dn: str, service_uuid: str = "svc-1", host: str = "ams.example.org", **kw: str) -> Binding:
    return Binding(
        uuid.uuid4().hex, name, service_uuid, host, dn, kw.pop("unique_key", "user-1"), created_on=CREATED, **kw
    )


# --- service types ---------------------------------------------------------------------------------
def test_service_types_are_created_read_and_listed_in_creation_order(store: MetadataStore) -> None:
    first = service_type("ams", "msg.argo.grnet.gr", "msg-devel.argo.grnet.gr")
    second = service_type("web-api", "api.argo.grnet.gr")
    second.auth_types = ["x509", "oidc"]
    second.type = "web-api"
    assert store.create_service_type(first)
    assert store.create_service_type(second)

    assert store.get_service_type(name="ams") == first
    assert store.get_service_type(uuid=second.uuid) == second
    assert store.get_service_type(name="nope") is None
    assert store.get_service_type(uuid="nope") is None
    assert store.list_service_types() == [first, second]
    got = store.get_service_type(name="ams")
    assert got is not None
    assert got.hosts == ["msg.argo.grnet.gr", "msg-devel.argo.grnet.gr"]  # a list, in its order
    assert got.auth_types == ["x509"]  # the default


def test_a_service_type_name_is_unique(store: MetadataStore) -> None:
    ams, other = service_type("ams", "a.example.org"), service_type("other", "b.example.org")
    assert store.create_service_type(ams)
    assert store.create_service_type(other)
    assert not store.create_service_type(service_type("ams", "c.example.org"))
    assert store.list_service_types() == [ams, other]

    # an update onto another's name is refused and changes nothing
    assert not store.update_service_type(dataclasses.replace(other, name="ams", hosts=["x.example.org"]))
    assert store.get_service_type(uuid=other.uuid) == other
    # a rename to a free name, and the old name is free again
    renamed = dataclasses.replace(other, name="renamed", hosts=["b.example.org", "d.example.org"], updated_on="x")
    assert store.update_service_type(renamed)
    assert store.get_service_type(name="renamed") == renamed
    assert store.get_service_type(name="other") is None
    assert store.create_service_type(service_type("other", "e.example.org"))
    # an update keeping its own name is no conflict; one of no stored service type does nothing
    assert store.update_service_type(dataclasses.replace(ams, hosts=[]))
    assert store.get_service_type(name="ams") == dataclasses.replace(ams, hosts=[])
    assert not store.update_service_type(service_type("ghost"))
    assert store.get_service_type(name="ghost") is None


def test_deleting_a_service_type_deletes_its_bindings(store: MetadataStore) -> None:
    gone, kept = service_type("gone", "h"), service_type("kept", "h")
    assert store.create_service_type(gone)
    assert store.create_service_type(kept)
    for i in range(3):
        assert store.create_binding(binding(f"gone-{i}", f"CN={i}", gone.uuid, "h")) == "ok"
    assert store.create_binding(binding("kept-0", "CN=0", kept.uuid, "h")) == "ok"

    assert store.delete_service_type(gone.uuid)
    assert store.get_service_type(uuid=gone.uuid) is None
    assert [b.name for b in store.list_bindings(None, None, 0, "").items] == ["kept-0"]
    assert store.get_binding("gone-0") is None
    assert store.find_binding(gone.uuid, "h", ["CN=0"]) is None
    assert not store.delete_service_type(gone.uuid)
    assert store.list_service_types() == [kept]
    # the names and DNs it held are free again
    assert store.create_binding(binding("gone-0", "CN=0", gone.uuid, "h")) == "ok"


# --- bindings ---------------------------------------------------------------------------------------
def test_a_binding_is_created_and_read_back(store: MetadataStore) -> None:
    b = binding("alice", "CN=Alice,OU=People,O=Example,C=GR", unique_key="user-alice")
    assert store.create_binding(b) == "ok"
    assert store.get_binding("alice") == b
    assert store.get_binding("bob") is None
    assert store.delete_binding("alice")
    assert store.get_binding("alice") is None
    assert not store.delete_binding("alice")


def test_binding_conflicts_name_the_rule_broken(store: MetadataStore) -> None:
    dn = "CN=Alice,O=Example"
    first = binding("alice", dn, "svc-1", "h1")
    assert store.create_binding(first) == "ok"
    # the same name, whatever else
    assert store.create_binding(binding("alice", "CN=Other", "svc-2", "h2")) == "name"
    # the same DN on the same host of the same service type, under another name
    assert store.create_binding(binding("alice-2", dn, "svc-1", "h1")) == "auth_identifier"
    # both broken: the name is reported
    assert store.create_binding(binding("alice", dn, "svc-1", "h1")) == "name"
    # the same DN elsewhere is another binding: another host, another service type, another auth type
    assert store.create_binding(binding("alice-h2", dn, "svc-1", "h2")) == "ok"
    assert store.create_binding(binding("alice-svc2", dn, "svc-2", "h1")) == "ok"
    assert store.create_binding(binding("alice-oidc", dn, "svc-1", "h1", auth_type="oidc")) == "ok"
    # nothing refused was written
    assert store.get_binding("alice") == first
    assert store.get_binding("alice-2") is None
    assert store.list_bindings(None, None, 0, "").total_size == 4


def test_update_replaces_renames_and_reports_conflicts(store: MetadataStore) -> None:
    alice = binding("alice", "CN=Alice", unique_key="user-a")
    bob = binding("bob", "CN=Bob", unique_key="user-b")
    assert store.create_binding(alice) == "ok"
    assert store.create_binding(bob) == "ok"

    # a rename with other fields: uuid and created_on stay the stored ones
    change = binding("alice2", "CN=Alice,O=New", unique_key="user-c", updated_on="2026-02-02T00:00:00Z")
    assert store.update_binding("alice", change) == "ok"
    assert store.get_binding("alice") is None
    stored = store.get_binding("alice2")
    assert stored == dataclasses.replace(change, uuid=alice.uuid, created_on=alice.created_on)
    assert store.find_binding("svc-1", "ams.example.org", ["CN=Alice,O=New"]) == stored
    assert store.find_binding("svc-1", "ams.example.org", ["CN=Alice"]) is None  # the old DN is free
    assert store.create_binding(binding("alice", "CN=Alice")) == "ok"  # and the old name

    # onto another's name, onto another's DN (same host and service type), both: refused, unchanged
    assert store.update_binding("alice2", dataclasses.replace(stored, name="bob")) == "name"
    assert store.update_binding("alice2", dataclasses.replace(stored, auth_identifier="CN=Bob")) == "auth_identifier"
    assert store.update_binding("alice2", dataclasses.replace(stored, name="bob", auth_identifier="CN=Bob")) == "name"
    assert store.get_binding("alice2") == stored
    assert store.get_binding("bob") == bob

    # keeping its own name and DN is no conflict with itself
    assert store.update_binding("bob", dataclasses.replace(bob, unique_key="user-z")) == "ok"
    assert store.get_binding("bob") == dataclasses.replace(bob, unique_key="user-z")
    # moving it to another host takes the DN there
    assert store.update_binding("bob", dataclasses.replace(bob, host="other.example.org")) == "ok"
    assert store.find_binding("svc-1", "other.example.org", ["CN=Bob"]) is not None
    assert store.find_binding("svc-1", "ams.example.org", ["CN=Bob"]) is None

    # one that is not there
    assert store.update_binding("carol", binding("carol", "CN=Carol")) == "missing"
    assert store.get_binding("carol") is None
    assert store.list_bindings(None, None, 0, "").total_size == 3


def test_find_binding_takes_any_of_a_dns_spellings(store: MetadataStore) -> None:
    b = binding("alice", "CN=Alice,O=Example,C=GR", "svc-1", "h1")
    assert store.create_binding(b) == "ok"
    assert store.create_binding(binding("bob", "CN=Bob,O=Example,C=GR", "svc-1", "h1")) == "ok"
    spellings = ["C=GR,O=Example,CN=Alice", "CN=Alice,O=Example,C=GR", "cn=Alice,o=Example,c=GR"]
    assert store.find_binding("svc-1", "h1", spellings) == b
    assert store.find_binding("svc-1", "h1", ("CN=Alice,O=Example,C=GR",)) == b
    assert store.find_binding("svc-1", "h1", "CN=Alice,O=Example,C=GR") == b  # a lone string is one DN
    assert store.find_binding("svc-1", "h1", ["C=GR,O=Example,CN=Alice", "cn=alice,o=example,c=gr"]) is None
    assert store.find_binding("svc-1", "h1", []) is None
    assert store.find_binding("svc-1", "h2", spellings) is None  # another host
    assert store.find_binding("svc-2", "h1", spellings) is None  # another service type
    assert store.find_binding("svc-1", "h1", spellings, "oidc") is None  # another auth type


def test_list_bindings_filters_by_service_type_and_host(store: MetadataStore) -> None:
    layout = [("a", "svc-1", "h1"), ("b", "svc-1", "h2"), ("c", "svc-2", "h1"), ("d", "svc-1", "h3")]
    for name, svc, host in layout:
        assert store.create_binding(binding(name, "CN=Same", svc, host)) == "ok"

    def names(service_uuid: str | None, host: str | None) -> tuple[list[str], int]:
        page = store.list_bindings(service_uuid, host, 0, "")
        assert page.next_page_token == ""
        return [b.name for b in page.items], page.total_size

    assert names(None, None) == (["a", "b", "c", "d"], 4)  # creation order
    assert names("svc-1", None) == (["a", "b", "d"], 3)
    assert names(None, "h1") == (["a", "c"], 2)
    assert names("svc-1", "h1") == (["a"], 1)
    assert names("svc-1", "h3") == (["d"], 1)
    assert names("svc-2", "h2") == ([], 0)
    assert names("svc-3", None) == ([], 0)
    assert names(None, "h4") == ([], 0)


def test_list_bindings_pages_like_list_users(store: MetadataStore) -> None:
    for i in range(6):
        assert store.create_binding(binding(f"b{i}", f"CN=User {i}", "svc-1", "h1")) == "ok"
    assert store.create_binding(binding("elsewhere", "CN=User 0", "svc-1", "h2")) == "ok"

    seen, token, pages = [], "", 0
    while True:
        page = store.list_bindings("svc-1", "h1", 2, token)
        pages += 1
        assert page.total_size == 6
        assert len(page.items) == 2
        seen += [b.name for b in page.items]
        token = page.next_page_token
        if not token:
            break
        assert pages < 3
    assert pages == 3
    assert seen == [f"b{i}" for i in range(6)]  # oldest first, each once

    # a token goes on from where its page began, on the same filters
    second = store.list_bindings("svc-1", "h1", 2, store.list_bindings("svc-1", "h1", 2, "").next_page_token)
    assert [b.name for b in second.items] == ["b2", "b3"]
    # page size 0: everything at once, no token
    everything = store.list_bindings(None, None, 0, "")
    assert ([b.name for b in everything.items], everything.next_page_token) == ([*seen, "elsewhere"], "")
    assert len(store.list_bindings(None, None, 7, "").items) == 7
    assert store.list_bindings(None, None, 7, "").next_page_token == ""
    for bad in ("garbage", "%%%", "MA==", "bm90IGEgbnVtYmVy"):  # not base64; "0"; "not a number"
        with pytest.raises(InvalidPageToken):
            store.list_bindings(None, None, 2, bad)


def test_record_binding_use_sets_last_auth_only(store: MetadataStore) -> None:
    b = binding("alice", "CN=Alice")
    assert store.create_binding(b) == "ok"
    assert store.get_binding("alice") == b
    store.record_binding_use(b.uuid, "2026-03-04T05:06:07Z")
    assert store.get_binding("alice") == dataclasses.replace(b, last_auth="2026-03-04T05:06:07Z")
    store.record_binding_use(b.uuid, "2026-03-05T00:00:00Z")
    found = store.find_binding(b.service_uuid, b.host, [b.auth_identifier])
    assert found is not None
    assert found.last_auth == "2026-03-05T00:00:00Z"
    store.record_binding_use("no-such-uuid", "2026-03-06T00:00:00Z")  # nothing, and no error
    assert store.list_bindings(None, None, 0, "").total_size == 1


DNS = [
    r"CN=Doe\, John,OU=People,O=Example\, Inc.,C=GR",  # escaped commas
    "CN=Jane Roe+UID=jroe,OU=People,O=Example,C=GR",  # a multi-valued RDN
    r"CN=Plus\+Minus,O=Example",  # an escaped plus
    "CN=Zoë Ångström,O=Példa Kft.,L=Αθήνα,C=GR",  # unicode (NFC)
    r"CN=\#hash\ ,O=\"quoted\"\;semi\<lt\>",  # the other escapes of RFC 4514
    "CN=日本語,O=例",
]


def test_dns_are_stored_and_found_byte_for_byte(store: MetadataStore) -> None:
    for i, dn in enumerate(DNS):
        assert store.create_binding(binding(f"dn-{i}", dn)) == "ok"
    for i, dn in enumerate(DNS):
        got = store.get_binding(f"dn-{i}")
        assert got is not None
        assert got.auth_identifier.encode() == dn.encode()
        found = store.find_binding("svc-1", "ams.example.org", [dn])
        assert found is not None
        assert found.name == f"dn-{i}"
    page = store.list_bindings(None, None, 0, "")
    assert [b.auth_identifier for b in page.items] == DNS
    # no folding of case, escapes or unicode normalisation: other bytes are another DN
    nfd = unicodedata.normalize("NFD", DNS[3])
    assert nfd != DNS[3]
    for other in (nfd, DNS[0].upper(), "CN=Doe, John,OU=People,O=Example, Inc.,C=GR", DNS[1].replace("+", r"\+")):
        assert store.find_binding("svc-1", "ams.example.org", [other]) is None
    assert store.create_binding(binding("dn-nfd", nfd)) == "ok"
    assert store.create_binding(binding("dn-again", DNS[3])) == "auth_identifier"
    found = store.find_binding("svc-1", "ams.example.org", [nfd])
    assert found is not None
    assert found.name == "dn-nfd"


# --- concurrency ------------------------------------------------------------------------------------
@pytest.mark.parametrize("clash", ["auth_identifier", "name"])
def test_concurrent_creates_of_one_binding_have_one_winner(store: MetadataStore, clash: BindingWrite) -> None:
    writers = 8
    barrier = threading.Barrier(writers)
    results: list[BindingWrite | BaseException] = []
    lock = threading.Lock()

    def create(i: int) -> None:
        if clash == "auth_identifier":  # same DN on the same host, each its own name
            b = binding(f"writer-{i}", "CN=Contested,O=Example")
        else:  # same name, each its own DN
            b = binding("contested", f"CN=Writer {i}")
        barrier.wait(30)
        try:
            outcome: BindingWrite | BaseException = store.create_binding(b)
        except BaseException as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, results)) == sorted(["ok"] + [clash] * (writers - 1))
    assert store.list_bindings(None, None, 0, "").total_size == 1


# --- the embedded store's schema ---------------------------------------------------------------------
def test_an_existing_embedded_database_gains_the_tables(tmp_path: Path) -> None:
    path = str(tmp_path / "metadata.db")
    SqliteMetadataStore(path).close()
    with sqlite3.connect(path) as conn:  # as a database made before AuthN (and before schema versions)
        conn.execute("DROP TABLE snapshots")  # and before snapshots
        conn.execute("DROP TABLE authn_bindings")
        conn.execute("DROP TABLE authn_service_types")
        conn.execute("DROP INDEX memberships_by_user")
        conn.execute("DROP INDEX users_by_token_hash")
        conn.execute("ALTER TABLE users DROP COLUMN token_hash")
        conn.execute("PRAGMA user_version = 0")
    conn.close()
    store = SqliteMetadataStore(path)
    try:
        assert store.list_service_types() == []
        assert store.create_binding(binding("alice", "CN=Alice")) == "ok"
    finally:
        store.close()


def test_find_binding_uses_an_index_in_the_embedded_store(tmp_path: Path) -> None:
    path = str(tmp_path / "metadata.db")
    SqliteMetadataStore(path).close()
    conn = sqlite3.connect(path)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT doc FROM authn_bindings WHERE service_uuid=? AND host=? AND auth_type=?"
            " AND auth_identifier IN (?,?) ORDER BY seq LIMIT 1",
            ["s", "h", "x509", "a", "b"],
        ).fetchall()
    finally:
        conn.close()
    details = " ".join(str(row[-1]) for row in plan)
    assert "USING INDEX" in details
    assert "(service_uuid=? AND host=? AND auth_type=? AND auth_identifier=?)" in details


def test_concurrent_updates_onto_one_dn_have_one_winner(store: MetadataStore) -> None:
    writers = 8
    for i in range(writers):
        assert store.create_binding(binding(f"writer-{i}", f"CN=Writer {i}")) == "ok"
    barrier = threading.Barrier(writers)
    results: list[BindingWrite | BaseException] = []
    lock = threading.Lock()

    def update(i: int) -> None:
        b = binding(f"writer-{i}", "CN=Contested,O=Example")
        barrier.wait(30)
        try:
            outcome: BindingWrite | BaseException = store.update_binding(f"writer-{i}", b)
        except BaseException as exc:
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=update, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(map(str, results)) == sorted(["ok"] + ["auth_identifier"] * (writers - 1))
    dns = [b.auth_identifier for b in store.list_bindings(None, None, 0, "").items]
    assert len(dns) == writers
    assert dns.count("CN=Contested,O=Example") == 1  # the others kept theirs


def test_a_taken_uuid_is_an_error_not_an_outcome(store: MetadataStore) -> None:
    b = binding("alice", "CN=Alice")
    assert store.create_binding(b) == "ok"
    with pytest.raises((sqlite3.IntegrityError, OperationFailure)):
        store.create_binding(dataclasses.replace(b, name="bob", auth_identifier="CN=Bob"))
    assert store.list_bindings(None, None, 0, "").total_size == 1


def test_mongo_writes_again_when_the_conflicting_binding_went_before_it_was_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unique index refuses; the look that names the rule comes after it (the embedded store
    makes both in one transaction). Found nothing: the binding collided with is gone, and the
    write is tried again rather than answered with a conflict that no longer is."""
    require_backend("kafka")
    with scratch_mongo_store("ams_authn_store_test") as store:
        assert store.create_binding(binding("alice", "CN=Alice")) == "ok"
        name_conflict = store._binding_conflict
        looks: list[BindingWrite | None] = []

        def gone_meanwhile(b: Binding, other_than: str | None) -> BindingWrite | None:
            if not looks:
                assert store.delete_binding("alice")
            looks.append(name_conflict(b, other_than))
            return looks[-1]

        monkeypatch.setattr(store, "_binding_conflict", gone_meanwhile)
        assert store.create_binding(binding("alice", "CN=Alice, again")) == "ok"
        assert looks == [None]
        got = store.get_binding("alice")
        assert got is not None
        assert got.auth_identifier == "CN=Alice, again"
