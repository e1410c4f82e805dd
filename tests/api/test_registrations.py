"""User registrations: register, list, show, accept, decline, delete, and who may do what
(docs/compatibility.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.helpers import Api, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

ZULU = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

PENDING_KEYS = {
    "uuid",
    "name",
    "first_name",
    "last_name",
    "organization",
    "description",
    "email",
    "status",
    "activation_token",
    "registered_at",
}


def details(name: str | None = None) -> dict[str, str]:
    name = name or unique("reg")
    return {
        "name": name,
        "first_name": "Ada",
        "last_name": "Lovelace",
        "email": f"{name}@example.org",
        "organization": unique("org"),
        "description": "wants to publish",
    }


def register(api: Api, **overrides: str) -> dict[str, Any]:
    body = {**details(), **overrides}
    return dict(api.ok("POST", "/registrations", body))


def expect(r: Any, code: int, message: str, status: str) -> None:
    assert error_of(r) == {"code": code, "message": message, "status": status}, r.text


def service_admin(api: Api) -> tuple[str, Api]:
    user = api.new_user(service_roles=["service_admin"])
    return user["name"], api.as_(user["token"])


# ------------------------------------------------------------------ register ----------------
def test_register(api: Api) -> None:
    sent = details()
    r = api.post("/registrations", sent)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == PENDING_KEYS
    assert UUID.match(body["uuid"])
    assert {k: body[k] for k in sent} == sent
    assert body["status"] == "pending"
    assert HEX64.match(body["activation_token"])
    assert ZULU.match(body["registered_at"])
    assert "modified_by" not in body
    assert "modified_at" not in body
    assert api.ok("GET", f"/registrations/{body['uuid']}") == body
    # registering does not create a user
    assert api.get(f"/users/{sent['name']}").status_code == 404


def test_register_with_only_a_name(api: Api) -> None:
    name = unique("reg")
    body = api.ok("POST", "/registrations", {"name": name})
    assert body["name"] == name
    assert body["status"] == "pending"
    assert HEX64.match(body["activation_token"])


def test_activation_tokens_and_uuids_differ(api: Api) -> None:
    first, second = register(api), register(api)
    assert first["uuid"] != second["uuid"]
    assert first["activation_token"] != second["activation_token"]


def test_register_existing_user_name_conflicts(api: Api) -> None:
    user = api.new_user()
    r = api.post("/registrations", details(user["name"]))
    assert r.status_code == 409
    expect(r, 409, "User already exists", "ALREADY_EXISTS")
    assert api.ok("GET", "/registrations", params={"name": user["name"]}) == {"user_registrations": []}


def test_duplicate_pending_registrations_are_allowed(api: Api) -> None:
    name = unique("reg")
    first = register(api, name=name)
    second = register(api, name=name)
    assert first["uuid"] != second["uuid"]
    listed = api.ok("GET", "/registrations", params={"name": name})["user_registrations"]
    assert {r["uuid"] for r in listed} == {first["uuid"], second["uuid"]}


@pytest.mark.parametrize("name", ["bad name", "a/b", "x.y", "ünï", ""])
def test_register_invalid_name(api: Api, name: str) -> None:
    r = api.post("/registrations", {**details(), "name": name})
    assert r.status_code == 400
    expect(r, 400, "Invalid user name", "INVALID_ARGUMENT")


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[]", b'{"name": 5}', b'{"name": "ok-name", "email": ["x"]}'],
    ids=["malformed", "array", "name-number", "email-list"],
)
def test_register_invalid_arguments(api: Api, raw: bytes) -> None:
    r = api.post("/registrations", raw=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    expect(r, 400, "Invalid User Arguments", "INVALID_ARGUMENT")


# ------------------------------------------------------------------ show / list -------------
def test_show_unknown_registration(api: Api) -> None:
    r = api.get("/registrations/00000000-0000-4000-8000-000000000000")
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")


def test_list_registrations_with_filters(api: Api) -> None:
    org = unique("org")
    first = register(api, organization=org)
    second = register(api, organization=org)
    third = register(api, organization=org)
    api.ok("POST", f"/registrations/{second['uuid']}:accept")
    api.ok("POST", f"/registrations/{third['uuid']}:decline", {"comment": "no"})

    everything = api.ok("GET", "/registrations")
    assert set(everything) == {"user_registrations"}
    uuids = {r["uuid"] for r in everything["user_registrations"]}
    assert {first["uuid"], second["uuid"], third["uuid"]} <= uuids

    def listed(**params: str) -> list[str]:
        body = api.ok("GET", "/registrations", params=params)
        assert set(body) == {"user_registrations"}
        return sorted(r["uuid"] for r in body["user_registrations"])

    assert listed(organization=org) == sorted([first["uuid"], second["uuid"], third["uuid"]])
    assert listed(organization=org, status="pending") == [first["uuid"]]
    assert listed(organization=org, status="accepted") == [second["uuid"]]
    assert listed(organization=org, status="declined") == [third["uuid"]]
    assert listed(name=first["name"]) == [first["uuid"]]
    assert listed(email=third["email"]) == [third["uuid"]]
    assert listed(activation_token=first["activation_token"]) == [first["uuid"]]
    assert listed(organization=org, name=first["name"]) == [first["uuid"]]
    assert listed(organization=org, name=second["name"], status="pending") == []
    assert listed(organization=unique("none")) == []

    shown = api.ok("GET", "/registrations", params={"name": first["name"]})["user_registrations"]
    assert shown == [api.ok("GET", f"/registrations/{first['uuid']}")]


def test_empty_list_is_an_array(api: Api) -> None:
    assert api.ok("GET", "/registrations", params={"email": unique("nobody")}) == {"user_registrations": []}


# ------------------------------------------------------------------ accept ------------------
def test_accept_with_the_service_token(api: Api) -> None:
    reg = register(api)
    r = api.post(f"/registrations/{reg['uuid']}:accept")
    assert r.status_code == 200, r.text
    user = r.json()
    assert set(user) == {
        "uuid",
        "name",
        "first_name",
        "last_name",
        "organization",
        "description",
        "token",
        "email",
        "service_roles",
        "created_on",
        "modified_on",
    }
    assert UUID.match(user["uuid"])
    assert user["uuid"] != reg["uuid"]
    for key in ("name", "first_name", "last_name", "organization", "description", "email"):
        assert user[key] == reg[key], key
    assert HEX64.match(user["token"])
    assert user["token"] != reg["activation_token"]
    assert user["service_roles"] == []
    assert "projects" not in user
    assert ZULU.match(user["created_on"])
    assert ZULU.match(user["modified_on"])

    # the user exists and its token works
    assert api.ok("GET", f"/users/{reg['name']}") == user
    assert api.as_(user["token"]).ok("GET", "/users/profile")["name"] == reg["name"]

    accepted = api.ok("GET", f"/registrations/{reg['uuid']}")
    assert accepted["status"] == "accepted"
    assert "activation_token" not in accepted
    assert "decline_comment" not in accepted
    assert ZULU.match(accepted["modified_at"])
    assert "modified_by" not in accepted  # the service token is no user
    assert {k: accepted[k] for k in ("uuid", "name", "email", "registered_at")} == {
        k: reg[k] for k in ("uuid", "name", "email", "registered_at")
    }


def test_accept_by_a_service_admin_user_records_who(api: Api) -> None:
    admin_name, admin = service_admin(api)
    reg = register(api)
    user = admin.ok("POST", f"/registrations/{reg['uuid']}:accept")
    assert user["name"] == reg["name"]
    assert user["created_by"] == admin_name
    assert "projects" not in user
    assert user["service_roles"] == []
    accepted = api.ok("GET", f"/registrations/{reg['uuid']}")
    assert accepted["status"] == "accepted"
    assert accepted["modified_by"] == admin_name
    assert ZULU.match(accepted["modified_at"])
    assert "activation_token" not in accepted


def test_accept_twice(api: Api) -> None:
    reg = register(api)
    api.ok("POST", f"/registrations/{reg['uuid']}:accept")
    r = api.post(f"/registrations/{reg['uuid']}:accept")
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")
    r = api.post(f"/registrations/{reg['uuid']}:decline", {"comment": "late"})
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")
    assert api.ok("GET", f"/registrations/{reg['uuid']}")["status"] == "accepted"


def test_accept_unknown(api: Api) -> None:
    r = api.post("/registrations/00000000-0000-4000-8000-000000000000:accept")
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")


def test_accept_when_the_name_was_taken_meanwhile(api: Api) -> None:
    reg = register(api)
    api.new_user(reg["name"])
    r = api.post(f"/registrations/{reg['uuid']}:accept")
    assert r.status_code == 409
    expect(r, 409, "User already exists", "ALREADY_EXISTS")
    assert api.ok("GET", f"/registrations/{reg['uuid']}")["status"] == "pending"


def test_second_registration_of_an_accepted_name(api: Api) -> None:
    name = unique("reg")
    first, second = register(api, name=name), register(api, name=name)
    api.ok("POST", f"/registrations/{first['uuid']}:accept")
    r = api.post(f"/registrations/{second['uuid']}:accept")
    assert r.status_code == 409
    expect(r, 409, "User already exists", "ALREADY_EXISTS")
    r = api.post("/registrations", details(name))
    expect(r, 409, "User already exists", "ALREADY_EXISTS")


# ------------------------------------------------------------------ decline -----------------
def test_decline_with_comment(api: Api) -> None:
    admin_name, admin = service_admin(api)
    reg = register(api)
    r = admin.post(f"/registrations/{reg['uuid']}:decline", {"comment": "x"})
    assert r.status_code == 200, r.text
    assert r.json() == {}
    declined = api.ok("GET", f"/registrations/{reg['uuid']}")
    assert set(declined) == (PENDING_KEYS - {"activation_token"}) | {"decline_comment", "modified_by", "modified_at"}
    assert declined["status"] == "declined"
    assert declined["decline_comment"] == "x"
    assert declined["modified_by"] == admin_name
    assert ZULU.match(declined["modified_at"])
    assert api.get(f"/users/{reg['name']}").status_code == 404
    r = api.post(f"/registrations/{reg['uuid']}:accept")
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")


def test_decline_with_empty_object(api: Api) -> None:
    reg = register(api)
    assert api.ok("POST", f"/registrations/{reg['uuid']}:decline", {}) == {}
    declined = api.ok("GET", f"/registrations/{reg['uuid']}")
    assert declined["status"] == "declined"
    assert "activation_token" not in declined
    assert ZULU.match(declined["modified_at"])


@pytest.mark.parametrize("raw", [b"", b"{oops", b"[]"], ids=["empty", "malformed", "array"])
def test_decline_needs_a_json_body(api: Api, raw: bytes) -> None:
    reg = register(api)
    r = api.post(f"/registrations/{reg['uuid']}:decline", raw=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    expect(r, 400, "Invalid Request Body", "BAD_REQUEST")
    assert api.ok("GET", f"/registrations/{reg['uuid']}")["status"] == "pending"


def test_decline_unknown(api: Api) -> None:
    r = api.post("/registrations/00000000-0000-4000-8000-000000000000:decline", {"comment": "x"})
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")


# ------------------------------------------------------------------ delete ------------------
@pytest.mark.parametrize("state", ["pending", "accepted", "declined"])
def test_delete_registration(api: Api, state: str) -> None:
    reg = register(api)
    if state == "accepted":
        api.ok("POST", f"/registrations/{reg['uuid']}:accept")
    elif state == "declined":
        api.ok("POST", f"/registrations/{reg['uuid']}:decline", {})
    r = api.delete(f"/registrations/{reg['uuid']}")
    assert (r.status_code, r.content) == (200, b"")
    r = api.get(f"/registrations/{reg['uuid']}")
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")
    r = api.delete(f"/registrations/{reg['uuid']}")
    assert r.status_code == 404
    expect(r, 404, "User registration doesn't exist", "NOT_FOUND")
    assert api.ok("GET", "/registrations", params={"name": reg["name"]}) == {"user_registrations": []}
    if state == "accepted":  # the user stays
        assert api.ok("GET", f"/users/{reg['name']}")["name"] == reg["name"]


# ------------------------------------------------------------------ who may do what ---------
def test_bad_uuid_in_path(api: Api) -> None:
    r = api.get("/registrations/not.a.uuid")
    assert r.status_code == 400
    expect(r, 400, "Invalid uuid name", "INVALID_ARGUMENT")


def test_no_or_unknown_token(api: Api) -> None:
    reg = register(api)
    for token in ("", "unknown-token"):
        anon = api.as_(token)
        for method, path, payload in [
            ("POST", "/registrations", details()),
            ("GET", "/registrations", None),
            ("GET", f"/registrations/{reg['uuid']}", None),
        ]:
            r = anon.request(method, path, payload)
            assert r.status_code == 401, (token, method, path, r.text)
            expect(r, 401, "Unauthorized", "UNAUTHORIZED")


def test_plain_user_is_unauthorized(api: Api, project: str) -> None:
    reg = register(api)
    plain = api.as_(api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])["token"])
    attempts = [
        ("POST", "/registrations", details()),
        ("GET", "/registrations", None),
        ("GET", f"/registrations/{reg['uuid']}", None),
        ("POST", f"/registrations/{reg['uuid']}:accept", None),
        ("POST", f"/registrations/{reg['uuid']}:decline", {"comment": "x"}),
        ("DELETE", f"/registrations/{reg['uuid']}", None),
    ]
    for method, path, payload in attempts:
        r = plain.request(method, path, payload)
        assert r.status_code == 401, (method, path, r.status_code, r.text)
        expect(r, 401, "Unauthorized", "UNAUTHORIZED")
    assert api.ok("GET", f"/registrations/{reg['uuid']}")["status"] == "pending"


def test_register_admin_creates_but_cannot_accept(api: Api) -> None:
    helper = api.as_(api.new_user(service_roles=["register_admin"])["token"])
    sent = details()
    created = helper.ok("POST", "/registrations", sent)
    assert set(created) == PENDING_KEYS
    assert created["status"] == "pending"
    assert {k: created[k] for k in sent} == sent
    assert "modified_by" not in created

    uuid = created["uuid"]
    for method, path, payload in [
        ("POST", f"/registrations/{uuid}:accept", None),
        ("POST", f"/registrations/{uuid}:decline", {"comment": "x"}),
        ("GET", "/registrations", None),
        ("GET", f"/registrations/{uuid}", None),
        ("DELETE", f"/registrations/{uuid}", None),
    ]:
        r = helper.request(method, path, payload)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        expect(r, 403, "Access to this resource is forbidden", "FORBIDDEN")
    assert api.ok("GET", f"/registrations/{uuid}") == created
    assert api.get(f"/users/{sent['name']}").status_code == 404
