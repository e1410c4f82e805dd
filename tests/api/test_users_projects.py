"""Users, projects and project members (docs/compatibility.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.helpers import Api, error_of, unique

pytestmark = pytest.mark.inprocess  # the rules: in-process on the embedded backend (tests/inprocess.py)

TOKEN_RE = re.compile(r"^[0-9a-f]{64}$")
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

NOT_MEMBER = "Access to this resource is forbidden. User is not a member of the project"


def assert_error(response: Any, code: int, message: str, status: str) -> None:
    assert response.status_code == code, response.text
    assert error_of(response) == {"code": code, "message": message, "status": status}


def membership(project: str, roles: list[str], topics: list[str] | None = None, subs: list[str] | None = None) -> Any:
    return {"project": project, "roles": roles, "topics": topics or [], "subscriptions": subs or []}


def new_member(api: Api, project: str, roles: list[str], **body: Any) -> dict[str, Any]:
    return api.new_user(projects=[{"project": project, "roles": roles}], **body)


def service_admin_api(api: Api) -> tuple[dict[str, Any], Api]:
    admin = api.new_user(service_roles=["service_admin"])
    return admin, api.as_(admin["token"])


# ==================================================================== users: create ==========
def test_create_user_returns_the_privileged_view(api: Api, project: str) -> None:
    name = unique("user")
    body = {
        "email": "alice@example.org",
        "first_name": "Alice",
        "last_name": "Doe",
        "organization": "ACME",
        "description": "a user",
        "projects": [{"project": project, "roles": ["publisher", "consumer"]}],
        "service_roles": ["metrics_viewer"],
    }
    user = api.ok("POST", f"/users/{name}", body)
    assert list(user) == [
        "uuid",
        "projects",
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
    ]
    assert UUID_RE.match(user["uuid"])
    assert TOKEN_RE.match(user["token"])
    assert TS_RE.match(user["created_on"])
    assert TS_RE.match(user["modified_on"])
    assert user["name"] == name
    assert user["projects"] == [membership(project, ["publisher", "consumer"])]
    assert (user["first_name"], user["last_name"]) == ("Alice", "Doe")
    assert (user["organization"], user["description"]) == ("ACME", "a user")
    assert user["email"] == "alice@example.org"
    assert user["service_roles"] == ["metrics_viewer"]


def test_create_user_with_empty_body_has_no_projects_and_no_optional_fields(api: Api) -> None:
    name = unique("user")
    user = api.ok("POST", f"/users/{name}", {})
    assert set(user) == {"uuid", "name", "token", "email", "service_roles", "created_on", "modified_on"}
    assert user["email"] == ""
    assert user["service_roles"] == []


def test_create_user_gives_every_user_a_distinct_token_and_uuid(api: Api) -> None:
    first, second = api.new_user(), api.new_user()
    assert first["token"] != second["token"]
    assert first["uuid"] != second["uuid"]


def test_create_user_skips_project_entries_without_a_project(api: Api) -> None:
    user = api.new_user(projects=[{"project": "", "roles": ["publisher"]}])
    assert "projects" not in user


def test_created_by_is_the_creating_users_name(api: Api) -> None:
    admin, as_admin = service_admin_api(api)
    user = as_admin.ok("POST", f"/users/{unique('user')}", {})
    assert user["created_by"] == admin["name"]
    assert api.ok("GET", f"/users/{user['name']}")["created_by"] == admin["name"]


def test_created_by_is_absent_for_the_service_token(api: Api) -> None:
    user = api.new_user()
    assert "created_by" not in user
    assert "created_by" not in api.ok("GET", f"/users/{user['name']}")


def test_create_existing_user_is_a_conflict(api: Api) -> None:
    user = api.new_user()
    assert_error(api.post(f"/users/{user['name']}", {}), 409, "User already exists", "ALREADY_EXISTS")


VALID_ROLES = [
    "service_admin",
    "metrics_viewer",
    "project_admin",
    "argo_api_authn",
    "push_worker",
    "register_admin",
    "consumer",
    "publisher",
    "admin_viewer",
]


@pytest.mark.parametrize("role", VALID_ROLES)
def test_create_user_accepts_every_role_name(api: Api, project: str, role: str) -> None:
    user = api.new_user(service_roles=[role], projects=[{"project": project, "roles": [role]}])
    assert user["service_roles"] == [role]
    assert user["projects"] == [membership(project, [role])]


@pytest.mark.parametrize("field", ["service_roles", "project_roles"])
def test_create_user_with_unknown_role_is_rejected(api: Api, project: str, field: str) -> None:
    body: dict[str, Any] = (
        {"service_roles": ["superuser"]}
        if field == "service_roles"
        else {"projects": [{"project": project, "roles": ["publisher", "superuser"]}]}
    )
    name = unique("user")
    assert_error(api.post(f"/users/{name}", body), 400, "invalid role: superuser", "INVALID_ARGUMENT")
    assert api.get(f"/users/{name}").status_code == 404


def test_create_user_with_unknown_project_is_rejected(api: Api) -> None:
    missing = unique("nope")
    r = api.post(f"/users/{unique('user')}", {"projects": [{"project": missing, "roles": []}]})
    assert_error(r, 400, f"invalid project: {missing}", "INVALID_ARGUMENT")


def test_create_user_with_duplicate_project_is_rejected(api: Api, project: str) -> None:
    body = {"projects": [{"project": project, "roles": ["publisher"]}, {"project": project, "roles": ["consumer"]}]}
    r = api.post(f"/users/{unique('user')}", body)
    assert_error(r, 400, f"duplicate reference of project {project}", "INVALID_ARGUMENT")


BAD_USER_BODIES = [
    pytest.param(None, "{not json", id="malformed-json"),
    pytest.param(None, "[]", id="array"),
    pytest.param({"email": 5}, None, id="email-number"),
    pytest.param({"projects": "ARGO"}, None, id="projects-string"),
    pytest.param({"projects": ["ARGO"]}, None, id="projects-item-string"),
    pytest.param({"service_roles": "service_admin"}, None, id="service-roles-string"),
    pytest.param({"service_roles": [1]}, None, id="service-roles-number"),
]


@pytest.mark.parametrize(("body", "raw"), BAD_USER_BODIES)
def test_create_user_with_malformed_body_is_invalid_user_arguments(api: Api, body: Any, raw: str | None) -> None:
    name = unique("user")
    r = api.post(f"/users/{name}", body, raw=raw)
    assert_error(r, 400, "Invalid User Arguments", "INVALID_ARGUMENT")
    assert api.get(f"/users/{name}").status_code == 404


def test_create_user_with_roles_not_a_list_is_invalid_user_arguments(api: Api, project: str) -> None:
    r = api.post(f"/users/{unique('user')}", {"projects": [{"project": project, "roles": "publisher"}]})
    assert_error(r, 400, "Invalid User Arguments", "INVALID_ARGUMENT")


# ==================================================================== users: show ============
def test_show_user_returns_the_privileged_view(api: Api, project: str) -> None:
    created = new_member(api, project, ["consumer"], email="bob@example.org", service_roles=["admin_viewer"])
    assert api.ok("GET", f"/users/{created['name']}") == created


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("PUT", ""), ("POST", ":refreshToken"), ("DELETE", "")],
    ids=["show", "update", "refreshToken", "delete"],
)
def test_unknown_user_is_not_found(api: Api, method: str, suffix: str) -> None:
    body = {"email": "x@example.org"} if method == "PUT" else None
    r = api.request(method, f"/users/{unique('ghost')}{suffix}", body)
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


def test_by_token_returns_the_user_with_its_token(api: Api) -> None:
    user = api.new_user()
    assert api.ok("GET", f"/users:byToken/{user['token']}") == user


def test_by_token_unknown_is_not_found(api: Api) -> None:
    assert_error(api.get(f"/users:byToken/{'0' * 64}"), 404, "User doesn't exist", "NOT_FOUND")


def test_by_uuid_returns_the_user(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"])
    assert api.ok("GET", f"/users:byUUID/{user['uuid']}") == user


def test_by_uuid_unknown_is_not_found(api: Api) -> None:
    r = api.get("/users:byUUID/00000000-0000-4000-8000-000000000000")
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


# ==================================================================== users: profile =========
def test_profile_returns_the_callers_privileged_view(api: Api, project: str) -> None:
    user = new_member(api, project, ["consumer"], service_roles=["metrics_viewer"])
    assert api.as_(user["token"]).ok("GET", "/users/profile") == user


def test_profile_accepts_the_key_query_parameter(api: Api) -> None:
    user = api.new_user()
    r = api.as_("").get("/users/profile", params={"key": user["token"]})
    assert r.status_code == 200, r.text
    assert r.json()["name"] == user["name"]


@pytest.mark.parametrize("token", ["", "unknown-token"], ids=["missing", "unknown"])
def test_profile_without_a_user_token_is_unauthorized(api: Api, token: str) -> None:
    assert_error(api.as_(token).get("/users/profile"), 401, "Unauthorized", "UNAUTHORIZED")


def test_profile_with_the_service_token_is_unauthorized(api: Api) -> None:
    assert_error(api.get("/users/profile"), 401, "Unauthorized", "UNAUTHORIZED")


# ==================================================================== users: list ============
def test_list_users_has_the_paginated_shape(api: Api) -> None:
    user = api.new_user()
    body = api.ok("GET", "/users")
    assert set(body) == {"users", "nextPageToken", "totalSize"}
    assert body["nextPageToken"] == ""
    assert body["totalSize"] == len(body["users"])
    assert user["name"] in [u["name"] for u in body["users"]]


def test_list_users_is_newest_first(api: Api, project: str) -> None:
    names = [new_member(api, project, ["consumer"])["name"] for _ in range(3)]
    body = api.ok("GET", "/users", params={"project": project})
    assert [u["name"] for u in body["users"]] == names[::-1]
    assert body["totalSize"] == 3
    assert body["nextPageToken"] == ""


def test_list_users_without_details_omits_projects(api: Api, project: str) -> None:
    user = new_member(api, project, ["consumer"])
    body = api.ok("GET", "/users", params={"project": project})
    (listed,) = body["users"]
    assert "projects" not in listed
    expected = {k: v for k, v in user.items() if k != "projects"}
    assert listed == expected


@pytest.mark.parametrize("details", ["true", "True"])
def test_list_users_with_details_includes_projects(api: Api, project: str, details: str) -> None:
    user = new_member(api, project, ["consumer"])
    body = api.ok("GET", "/users", params={"project": project, "details": details})
    assert body["users"] == [user]
    assert body["users"][0]["projects"] == [membership(project, ["consumer"])]


def test_list_users_project_filter_only_lists_members(api: Api, project: str) -> None:
    member = new_member(api, project, ["publisher"])
    api.new_user()
    other = api.new_project()
    new_member(api, other, ["publisher"])
    body = api.ok("GET", "/users", params={"project": project})
    assert [u["name"] for u in body["users"]] == [member["name"]]
    assert body["totalSize"] == 1


def test_list_users_unknown_project_is_not_found(api: Api) -> None:
    r = api.get("/users", params={"project": unique("nope")})
    assert_error(r, 404, "ProjectUUID doesn't exist", "NOT_FOUND")


@pytest.mark.parametrize("token_param", ["pageToken", "nextPageToken"])
def test_list_users_pages_walk_every_user_once(api: Api, project: str, token_param: str) -> None:
    names = [new_member(api, project, ["consumer"])["name"] for _ in range(5)]
    seen: list[str] = []
    sizes: list[int] = []
    params: dict[str, Any] = {"project": project, "pageSize": 2}
    for _ in range(10):
        body = api.ok("GET", "/users", params=params)
        assert body["totalSize"] == 5
        sizes.append(len(body["users"]))
        seen += [u["name"] for u in body["users"]]
        if not body["nextPageToken"]:
            break
        params[token_param] = body["nextPageToken"]
    assert sizes == [2, 2, 1]
    assert seen == names[::-1]


def test_list_users_page_size_zero_means_all(api: Api, project: str) -> None:
    names = [new_member(api, project, ["consumer"])["name"] for _ in range(3)]
    body = api.ok("GET", "/users", params={"project": project, "pageSize": 0})
    assert [u["name"] for u in body["users"]] == names[::-1]
    assert body["nextPageToken"] == ""


def test_list_users_invalid_page_size(api: Api) -> None:
    assert_error(api.get("/users", params={"pageSize": "two"}), 400, "Invalid page size", "INVALID_ARGUMENT")


def test_list_users_invalid_page_token(api: Api) -> None:
    r = api.get("/users", params={"pageToken": "%%%not-a-token"})
    assert_error(r, 400, "Invalid page token", "INVALID_ARGUMENT")


# ==================================================================== users: update ==========
def test_update_user_changes_only_non_empty_strings(api: Api) -> None:
    user = api.new_user(email="old@example.org", first_name="Old", organization="Org")
    updated = api.ok(
        "PUT", f"/users/{user['name']}", {"email": "new@example.org", "first_name": "", "last_name": "Last"}
    )
    assert updated["email"] == "new@example.org"
    assert updated["first_name"] == "Old"
    assert updated["last_name"] == "Last"
    assert updated["organization"] == "Org"
    assert updated["token"] == user["token"]
    assert updated["uuid"] == user["uuid"]
    assert updated["created_on"] == user["created_on"]
    assert TS_RE.match(updated["modified_on"])
    assert api.ok("GET", f"/users/{user['name']}") == updated


def test_update_user_replaces_projects_and_service_roles(api: Api, project: str) -> None:
    other = api.new_project()
    user = new_member(api, project, ["publisher"], service_roles=["metrics_viewer"])
    body = {
        "projects": [{"project": other, "roles": ["consumer", "project_admin"]}],
        "service_roles": ["admin_viewer"],
    }
    updated = api.ok("PUT", f"/users/{user['name']}", body)
    assert updated["projects"] == [membership(other, ["consumer", "project_admin"])]
    assert updated["service_roles"] == ["admin_viewer"]


def test_update_user_with_empty_lists_clears_projects_and_service_roles(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"], service_roles=["metrics_viewer"])
    updated = api.ok("PUT", f"/users/{user['name']}", {"projects": [], "service_roles": []})
    assert "projects" not in updated
    assert updated["service_roles"] == []
    assert api.ok("GET", "/users", params={"project": project})["users"] == []


def test_update_user_without_the_lists_keeps_them(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"], service_roles=["metrics_viewer"])
    updated = api.ok("PUT", f"/users/{user['name']}", {"description": "now described"})
    assert updated["projects"] == user["projects"]
    assert updated["service_roles"] == ["metrics_viewer"]
    assert updated["description"] == "now described"


def test_update_user_renames(api: Api) -> None:
    user = api.new_user()
    new_name = unique("renamed")
    updated = api.ok("PUT", f"/users/{user['name']}", {"name": new_name})
    assert updated["name"] == new_name
    assert updated["uuid"] == user["uuid"]
    assert api.get(f"/users/{user['name']}").status_code == 404
    assert api.ok("GET", f"/users/{new_name}")["uuid"] == user["uuid"]
    assert api.as_(user["token"]).ok("GET", "/users/profile")["name"] == new_name


def test_update_user_rename_to_existing_name_is_rejected(api: Api) -> None:
    user, other = api.new_user(), api.new_user()
    r = api.put(f"/users/{user['name']}", {"name": other["name"]})
    assert_error(r, 400, "invalid user name change, name already exists", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/users/{user['name']}")["uuid"] == user["uuid"]


@pytest.mark.parametrize("bad", ["with space", "dot.ted", "slash/ed", "ünï"])
def test_update_user_rename_to_invalid_name_is_rejected(api: Api, bad: str) -> None:
    user = api.new_user()
    assert_error(api.put(f"/users/{user['name']}", {"name": bad}), 400, "Invalid user name", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/users/{user['name']}")["name"] == user["name"]


def test_update_user_unknown_role_is_rejected(api: Api) -> None:
    user = api.new_user()
    r = api.put(f"/users/{user['name']}", {"service_roles": ["root"]})
    assert_error(r, 400, "invalid role: root", "INVALID_ARGUMENT")


def test_update_user_unknown_project_is_rejected(api: Api) -> None:
    user = api.new_user()
    missing = unique("nope")
    r = api.put(f"/users/{user['name']}", {"projects": [{"project": missing, "roles": ["publisher"]}]})
    assert_error(r, 400, f"invalid project: {missing}", "INVALID_ARGUMENT")


def test_update_user_duplicate_project_is_rejected(api: Api, project: str) -> None:
    user = api.new_user()
    body = {"projects": [{"project": project, "roles": []}, {"project": project, "roles": ["publisher"]}]}
    r = api.put(f"/users/{user['name']}", body)
    assert_error(r, 400, f"duplicate reference of project {project}", "INVALID_ARGUMENT")


@pytest.mark.parametrize(("body", "raw"), [*BAD_USER_BODIES, pytest.param({"name": 7}, None, id="name-number")])
def test_update_user_with_malformed_body_is_invalid_user_arguments(api: Api, body: Any, raw: str | None) -> None:
    user = api.new_user()
    r = api.put(f"/users/{user['name']}", body, raw=raw)
    assert_error(r, 400, "Invalid User Arguments", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/users/{user['name']}") == user


# ==================================================================== users: token, delete ===
def test_refresh_token_replaces_the_token(api: Api) -> None:
    user = api.new_user()
    refreshed = api.ok("POST", f"/users/{user['name']}:refreshToken")
    assert TOKEN_RE.match(refreshed["token"])
    assert refreshed["token"] != user["token"]
    assert refreshed["uuid"] == user["uuid"]
    assert api.ok("GET", f"/users/{user['name']}")["token"] == refreshed["token"]


def test_refresh_token_old_token_stops_working(api: Api, project: str) -> None:
    user = new_member(api, project, ["project_admin"])
    api.ok("POST", f"/users/{user['name']}:refreshToken")
    old = api.as_(user["token"])
    assert_error(old.get("/users/profile"), 401, "Unauthorized", "UNAUTHORIZED")
    assert_error(old.get(f"/projects/{project}"), 401, "Unauthorized", "UNAUTHORIZED")


def test_refresh_token_new_token_works(api: Api, project: str) -> None:
    user = new_member(api, project, ["project_admin"])
    token = api.ok("POST", f"/users/{user['name']}:refreshToken")["token"]
    assert api.as_(token).ok("GET", f"/projects/{project}")["name"] == project


def test_delete_user(api: Api) -> None:
    user = api.new_user()
    r = api.delete(f"/users/{user['name']}")
    assert r.status_code == 200, r.text
    assert r.content == b""
    assert_error(api.get(f"/users/{user['name']}"), 404, "User doesn't exist", "NOT_FOUND")
    assert_error(api.as_(user["token"]).get("/users/profile"), 401, "Unauthorized", "UNAUTHORIZED")


def test_deleted_user_leaves_the_member_lists(api: Api, project: str) -> None:
    user = new_member(api, project, ["consumer"])
    api.ok("DELETE", f"/users/{user['name']}")
    assert api.ok("GET", f"/projects/{project}/members")["users"] == []


def test_deleted_user_name_can_be_reused(api: Api) -> None:
    user = api.new_user()
    api.ok("DELETE", f"/users/{user['name']}")
    again = api.new_user(user["name"])
    assert again["uuid"] != user["uuid"]
    assert again["token"] != user["token"]


# ==================================================================== projects ===============
def test_create_project_returns_the_project(api: Api) -> None:
    name = unique("proj")
    created = api.ok("POST", f"/projects/{name}", {"description": "my project"})
    assert list(created) == ["name", "created_on", "modified_on", "description"]
    assert created["name"] == name
    assert created["description"] == "my project"
    assert TS_RE.match(created["created_on"])
    assert TS_RE.match(created["modified_on"])


def test_create_project_with_empty_object(api: Api) -> None:
    name = unique("proj")
    created = api.ok("POST", f"/projects/{name}", {})
    assert set(created) == {"name", "created_on", "modified_on"}
    assert created["name"] == name


@pytest.mark.parametrize(
    ("body", "raw"),
    [
        pytest.param(None, None, id="no-body"),
        pytest.param(None, "{oops", id="malformed"),
        pytest.param({"description": 3}, None, id="description-number"),
        pytest.param(None, "[]", id="array"),
    ],
)
def test_create_project_with_bad_body_is_invalid_project_arguments(api: Api, body: Any, raw: str | None) -> None:
    name = unique("proj")
    r = api.post(f"/projects/{name}", body, raw=raw)
    assert_error(r, 400, "Invalid Project Arguments", "INVALID_ARGUMENT")
    assert_error(api.get(f"/projects/{name}"), 404, "project doesn't exist", "NOT_FOUND")


def test_create_existing_project_is_a_conflict(api: Api, project: str) -> None:
    assert_error(api.post(f"/projects/{project}", {}), 409, "Project already exists", "ALREADY_EXISTS")


def test_create_project_created_by_a_user(api: Api) -> None:
    admin, as_admin = service_admin_api(api)
    name = unique("proj")
    created = as_admin.ok("POST", f"/projects/{name}", {"description": "d"})
    assert created["created_by"] == admin["name"]
    assert api.ok("GET", f"/projects/{name}")["created_by"] == admin["name"]


def test_show_project(api: Api) -> None:
    name = unique("proj")
    created = api.ok("POST", f"/projects/{name}", {"description": "shown"})
    assert api.ok("GET", f"/projects/{name}") == created


def test_list_projects_contains_the_project(api: Api) -> None:
    name = unique("proj")
    created = api.ok("POST", f"/projects/{name}", {"description": "listed"})
    body = api.ok("GET", "/projects")
    assert set(body) == {"projects"}
    assert created in body["projects"]


def test_update_project_description(api: Api, project: str) -> None:
    updated = api.ok("PUT", f"/projects/{project}", {"description": "changed"})
    assert updated["name"] == project
    assert updated["description"] == "changed"
    assert api.ok("GET", f"/projects/{project}") == updated


def test_update_project_empty_strings_change_nothing(api: Api, project: str) -> None:
    before = api.ok("GET", f"/projects/{project}")
    updated = api.ok("PUT", f"/projects/{project}", {"name": "", "description": ""})
    assert updated["name"] == project
    assert updated["description"] == before["description"]
    assert updated["created_on"] == before["created_on"]


def test_update_project_renames(api: Api, project: str) -> None:
    member = new_member(api, project, ["publisher"])
    new_name = unique("renamed")
    updated = api.ok("PUT", f"/projects/{project}", {"name": new_name})
    assert updated["name"] == new_name
    assert_error(api.get(f"/projects/{project}"), 404, "project doesn't exist", "NOT_FOUND")
    assert api.ok("GET", f"/projects/{new_name}") == updated
    assert api.ok("GET", f"/users/{member['name']}")["projects"] == [membership(new_name, ["publisher"])]


def test_update_project_rename_to_existing_name_is_rejected(api: Api, project: str) -> None:
    other = api.new_project()
    r = api.put(f"/projects/{project}", {"name": other})
    assert_error(r, 400, "invalid project name change, name already exists", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/projects/{project}")["name"] == project


@pytest.mark.parametrize("bad", ["with space", "dot.ted", "a/b"])
def test_update_project_rename_to_invalid_name_is_rejected(api: Api, project: str, bad: str) -> None:
    assert_error(api.put(f"/projects/{project}", {"name": bad}), 400, "Invalid project name", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/projects/{project}")["name"] == project


@pytest.mark.parametrize(
    ("body", "raw"),
    [pytest.param(None, "{oops", id="malformed"), pytest.param({"name": 1}, None, id="name-number")],
)
def test_update_project_with_bad_body_is_invalid_request_body(
    api: Api, project: str, body: Any, raw: str | None
) -> None:
    r = api.put(f"/projects/{project}", body, raw=raw)
    assert_error(r, 400, "Invalid Request Body", "BAD_REQUEST")


def test_delete_project(api: Api, project: str) -> None:
    r = api.delete(f"/projects/{project}")
    assert r.status_code == 200, r.text
    assert r.content == b""
    assert_error(api.get(f"/projects/{project}"), 404, "project doesn't exist", "NOT_FOUND")
    assert project not in [p["name"] for p in api.ok("GET", "/projects").get("projects", [])]


def test_delete_project_removes_its_topics_and_subscriptions(api: Api, project: str) -> None:
    api.ok("PUT", f"/projects/{project}/topics/t1")
    api.ok("PUT", f"/projects/{project}/subscriptions/s1", {"topic": f"projects/{project}/topics/t1"})
    api.ok("DELETE", f"/projects/{project}")
    api.ok("POST", f"/projects/{project}", {})
    assert_error(api.get(f"/projects/{project}/topics/t1"), 404, "Topic doesn't exist", "NOT_FOUND")
    assert_error(api.get(f"/projects/{project}/subscriptions/s1"), 404, "Subscription doesn't exist", "NOT_FOUND")
    assert api.ok("GET", f"/projects/{project}/topics")["topics"] == []
    assert api.ok("GET", f"/projects/{project}/subscriptions")["subscriptions"] == []


def test_delete_project_removes_memberships(api: Api, project: str) -> None:
    other = api.new_project()
    user = api.new_user(projects=[{"project": project, "roles": ["publisher"]}, {"project": other, "roles": []}])
    api.ok("DELETE", f"/projects/{project}")
    assert api.ok("GET", f"/users/{user['name']}")["projects"] == [membership(other, [])]
    api.ok("POST", f"/projects/{project}", {})
    assert api.ok("GET", f"/projects/{project}/members")["users"] == []


PROJECT_ROUTES = [
    ("GET", ""),
    ("PUT", ""),
    ("DELETE", ""),
    ("GET", "/members"),
    ("GET", "/members/someone"),
    ("POST", "/members/someone"),
    ("PUT", "/members/someone"),
    ("POST", "/members/someone:add"),
    ("POST", "/members/someone:remove"),
    ("GET", "/topics"),
    ("GET", "/topics/t"),
    ("PUT", "/topics/t"),
    ("DELETE", "/topics/t"),
    ("POST", "/topics/t:publish"),
    ("GET", "/topics/t:acl"),
    ("POST", "/topics/t:modifyAcl"),
    ("GET", "/topics/t/subscriptions"),
    ("GET", "/subscriptions"),
    ("GET", "/subscriptions/s"),
    ("PUT", "/subscriptions/s"),
    ("DELETE", "/subscriptions/s"),
    ("POST", "/subscriptions/s:pull"),
    ("POST", "/subscriptions/s:acknowledge"),
    ("GET", "/subscriptions/s:offsets"),
    ("GET", "/subscriptions/s:acl"),
    ("POST", "/subscriptions/s:modifyAcl"),
]


@pytest.mark.parametrize(("method", "suffix"), PROJECT_ROUTES, ids=[f"{m} {s or '/'}" for m, s in PROJECT_ROUTES])
def test_unknown_project_is_not_found_on_every_project_route(api: Api, method: str, suffix: str) -> None:
    r = api.request(method, f"/projects/{unique('nope')}{suffix}", {} if method in ("POST", "PUT") else None)
    assert_error(r, 404, "project doesn't exist", "NOT_FOUND")


# ==================================================================== members ================
def test_create_member_returns_privileged_view_and_joins_the_project(api: Api, project: str) -> None:
    name = unique("member")
    body = {
        "email": "m@example.org",
        "projects": [{"project": project, "roles": ["consumer", "publisher"]}],
        "service_roles": ["service_admin"],
        "first_name": "Ignored",
        "organization": "Ignored",
    }
    user = api.ok("POST", f"/projects/{project}/members/{name}", body)
    assert set(user) == {
        "uuid",
        "projects",
        "name",
        "token",
        "email",
        "service_roles",
        "created_on",
        "modified_on",
    }
    assert UUID_RE.match(user["uuid"])
    assert TOKEN_RE.match(user["token"])
    assert user["name"] == name
    assert user["email"] == "m@example.org"
    assert user["projects"] == [membership(project, ["consumer", "publisher"])]
    assert user["service_roles"] == []
    assert api.as_(user["token"]).ok("GET", "/users/profile") == user


def test_create_member_without_roles_has_empty_roles(api: Api, project: str) -> None:
    user = api.ok("POST", f"/projects/{project}/members/{unique('member')}", {})
    assert user["projects"] == [membership(project, [])]


def test_create_member_uses_only_the_entry_for_the_url_project(api: Api, project: str) -> None:
    other = api.new_project()
    body = {"projects": [{"project": other, "roles": ["project_admin"]}, {"project": project, "roles": ["consumer"]}]}
    user = api.ok("POST", f"/projects/{project}/members/{unique('member')}", body)
    assert user["projects"] == [membership(project, ["consumer"])]


def test_create_member_created_by_the_requester(api: Api, project: str) -> None:
    admin = new_member(api, project, ["project_admin"])
    user = api.as_(admin["token"]).ok("POST", f"/projects/{project}/members/{unique('member')}", {})
    assert user["created_by"] == admin["name"]
    assert TOKEN_RE.match(user["token"])


def test_create_member_existing_user_is_a_conflict(api: Api, project: str) -> None:
    user = api.new_user()
    r = api.post(f"/projects/{project}/members/{user['name']}", {})
    assert_error(r, 409, "User already exists", "ALREADY_EXISTS")


def test_create_member_unknown_role_is_rejected(api: Api, project: str) -> None:
    body = {"projects": [{"project": project, "roles": ["boss"]}]}
    r = api.post(f"/projects/{project}/members/{unique('member')}", body)
    assert_error(r, 400, "invalid role: boss", "INVALID_ARGUMENT")


def test_show_member_is_a_single_user(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"])
    assert api.ok("GET", f"/projects/{project}/members/{user['name']}") == user


def test_show_member_not_a_member_is_not_found(api: Api, project: str) -> None:
    user = api.new_user()
    r = api.get(f"/projects/{project}/members/{user['name']}")
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


def test_show_member_unknown_user_is_not_found(api: Api, project: str) -> None:
    r = api.get(f"/projects/{project}/members/{unique('ghost')}")
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


def test_list_members_lists_only_members_newest_first(api: Api, project: str) -> None:
    first = new_member(api, project, ["publisher"])
    api.new_user()
    second = api.ok("POST", f"/projects/{project}/members/{unique('member')}", {})
    body = api.ok("GET", f"/projects/{project}/members")
    assert set(body) == {"users", "nextPageToken", "totalSize"}
    assert [u["name"] for u in body["users"]] == [second["name"], first["name"]]
    assert body["totalSize"] == 2
    assert body["nextPageToken"] == ""
    assert all("projects" not in u for u in body["users"])


def test_list_members_with_details_and_pages(api: Api, project: str) -> None:
    names = [new_member(api, project, ["consumer"])["name"] for _ in range(3)]
    page1 = api.ok("GET", f"/projects/{project}/members", params={"pageSize": 2, "details": "true"})
    assert [u["name"] for u in page1["users"]] == names[:0:-1]
    assert page1["totalSize"] == 3
    assert all(u["projects"] == [membership(project, ["consumer"])] for u in page1["users"])
    params = {"pageSize": 2, "pageToken": page1["nextPageToken"]}
    page2 = api.ok("GET", f"/projects/{project}/members", params=params)
    assert [u["name"] for u in page2["users"]] == names[:1]
    assert page2["nextPageToken"] == ""


def test_update_member_replaces_the_roles_in_the_project(api: Api, project: str) -> None:
    other = api.new_project()
    user = api.new_user(
        projects=[{"project": project, "roles": ["publisher"]}, {"project": other, "roles": ["consumer"]}]
    )
    body = {"projects": [{"project": project, "roles": ["consumer", "project_admin"]}]}
    updated = api.ok("PUT", f"/projects/{project}/members/{user['name']}", body)
    expected = [membership(project, ["consumer", "project_admin"]), membership(other, ["consumer"])]
    assert updated["projects"] == expected
    assert api.ok("GET", f"/users/{user['name']}")["projects"] == expected


def test_update_member_not_a_member_is_forbidden(api: Api, project: str) -> None:
    user = api.new_user()
    body = {"projects": [{"project": project, "roles": ["consumer"]}]}
    r = api.put(f"/projects/{project}/members/{user['name']}", body)
    assert_error(r, 403, NOT_MEMBER, "FORBIDDEN")
    assert "projects" not in api.ok("GET", f"/users/{user['name']}")


def test_update_member_without_an_entry_for_the_project_is_invalid(api: Api, project: str) -> None:
    other = api.new_project()
    user = new_member(api, project, ["publisher"])
    body = {"projects": [{"project": other, "roles": ["consumer"]}]}
    r = api.put(f"/projects/{project}/members/{user['name']}", body)
    assert_error(r, 400, "Invalid User Arguments", "INVALID_ARGUMENT")
    assert api.ok("GET", f"/users/{user['name']}")["projects"] == [membership(project, ["publisher"])]


def test_update_member_unknown_role_is_rejected(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"])
    body = {"projects": [{"project": project, "roles": ["nobody"]}]}
    r = api.put(f"/projects/{project}/members/{user['name']}", body)
    assert_error(r, 400, "invalid role: nobody", "INVALID_ARGUMENT")


def test_update_member_unknown_user_is_not_found(api: Api, project: str) -> None:
    body = {"projects": [{"project": project, "roles": ["consumer"]}]}
    r = api.put(f"/projects/{project}/members/{unique('ghost')}", body)
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


def test_add_member(api: Api, project: str) -> None:
    user = api.new_user()
    added = api.ok("POST", f"/projects/{project}/members/{user['name']}:add", {"roles": ["publisher"]})
    assert added["name"] == user["name"]
    assert added["projects"] == [membership(project, ["publisher"])]
    assert api.ok("GET", f"/projects/{project}/members/{user['name']}")["projects"] == added["projects"]


def test_add_member_without_roles(api: Api, project: str) -> None:
    user = api.new_user()
    added = api.ok("POST", f"/projects/{project}/members/{user['name']}:add", {})
    assert added["projects"] == [membership(project, [])]


def test_add_member_keeps_other_memberships(api: Api, project: str) -> None:
    other = api.new_project()
    user = new_member(api, other, ["consumer"])
    api.ok("POST", f"/projects/{project}/members/{user['name']}:add", {"roles": ["publisher"]})
    projects = api.ok("GET", f"/users/{user['name']}")["projects"]
    assert sorted(projects, key=lambda p: p["project"]) == sorted(
        [membership(other, ["consumer"]), membership(project, ["publisher"])], key=lambda p: p["project"]
    )


def test_add_member_already_a_member_is_a_conflict(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"])
    r = api.post(f"/projects/{project}/members/{user['name']}:add", {"roles": ["consumer"]})
    assert_error(r, 409, "User is already a member of the project", "CONFLICT")
    assert api.ok("GET", f"/users/{user['name']}")["projects"] == [membership(project, ["publisher"])]


def test_add_member_unknown_user_is_not_found(api: Api, project: str) -> None:
    r = api.post(f"/projects/{project}/members/{unique('ghost')}:add", {"roles": ["consumer"]})
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


def test_add_member_unknown_role_is_rejected(api: Api, project: str) -> None:
    user = api.new_user()
    r = api.post(f"/projects/{project}/members/{user['name']}:add", {"roles": ["chief"]})
    assert_error(r, 400, "invalid role: chief", "INVALID_ARGUMENT")


def test_add_member_malformed_body_is_invalid_request_body(api: Api, project: str) -> None:
    user = api.new_user()
    r = api.post(f"/projects/{project}/members/{user['name']}:add", raw="{roles")
    assert_error(r, 400, "Invalid Request Body", "BAD_REQUEST")


def test_remove_member(api: Api, project: str) -> None:
    user = new_member(api, project, ["publisher"])
    r = api.post(f"/projects/{project}/members/{user['name']}:remove")
    assert r.status_code == 200, r.text
    assert r.json() == {}
    assert_error(api.get(f"/projects/{project}/members/{user['name']}"), 404, "User doesn't exist", "NOT_FOUND")
    assert "projects" not in api.ok("GET", f"/users/{user['name']}")
    assert_error(api.as_(user["token"]).get(f"/projects/{project}/topics"), 401, "Unauthorized", "UNAUTHORIZED")


def test_remove_member_not_a_member_is_forbidden(api: Api, project: str) -> None:
    user = api.new_user()
    r = api.post(f"/projects/{project}/members/{user['name']}:remove")
    assert_error(r, 403, NOT_MEMBER, "FORBIDDEN")


def test_remove_member_unknown_user_is_not_found(api: Api, project: str) -> None:
    r = api.post(f"/projects/{project}/members/{unique('ghost')}:remove")
    assert_error(r, 404, "User doesn't exist", "NOT_FOUND")


# ==================================================================== project_admin ==========
@pytest.fixture
def project_admin(api: Api, project: str) -> Api:
    admin = new_member(api, project, ["project_admin"])
    return api.as_(admin["token"])


def test_project_admin_manages_members_of_its_project(api: Api, project: str, project_admin: Api) -> None:
    created = project_admin.ok(
        "POST",
        f"/projects/{project}/members/{unique('member')}",
        {"projects": [{"project": project, "roles": ["consumer"]}]},
    )
    assert TOKEN_RE.match(created["token"])
    name = created["name"]
    updated = project_admin.ok(
        "PUT", f"/projects/{project}/members/{name}", {"projects": [{"project": project, "roles": ["publisher"]}]}
    )
    assert updated["projects"] == [membership(project, ["publisher"])]
    assert project_admin.ok("POST", f"/projects/{project}/members/{name}:remove") == {}
    added = project_admin.ok("POST", f"/projects/{project}/members/{name}:add", {"roles": ["consumer"]})
    assert added["projects"] == [membership(project, ["consumer"])]
    assert name in [u["name"] for u in project_admin.ok("GET", f"/projects/{project}/members")["users"]]


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("GET", "/members", None),
        ("GET", "/members/{user}", None),
        ("POST", "/members/{new}", {}),
        ("PUT", "/members/{user}", {"projects": [{"project": "{project}", "roles": ["consumer"]}]}),
        ("POST", "/members/{user}:add", {"roles": []}),
        ("POST", "/members/{user}:remove", None),
        ("GET", "", None),
        ("PUT", "", {"description": "x"}),
    ],
)
def test_project_admin_is_unauthorized_on_another_project(
    api: Api, project_admin: Api, method: str, suffix: str, body: Any
) -> None:
    other = api.new_project()
    user = new_member(api, other, ["consumer"])
    path = f"/projects/{other}" + suffix.format(user=user["name"], new=unique("member"))
    if body and "projects" in body:
        body = {"projects": [{"project": other, "roles": ["consumer"]}]}
    assert_error(project_admin.request(method, path, body), 401, "Unauthorized", "UNAUTHORIZED")


def _non_privileged_member(api: Api, project: str) -> dict[str, Any]:
    other = api.new_project()
    return api.new_user(
        projects=[{"project": project, "roles": ["consumer"]}, {"project": other, "roles": ["publisher"]}],
        service_roles=["metrics_viewer"],
        email="np@example.org",
    )


def _assert_non_privileged(view: dict[str, Any], user: dict[str, Any], project: str, roles: list[str]) -> None:
    assert "token" not in view
    assert "created_by" not in view
    assert view["service_roles"] == []
    assert view["projects"] == [membership(project, roles)]
    assert (view["uuid"], view["name"], view["email"]) == (user["uuid"], user["name"], user["email"])


def test_project_admin_sees_non_privileged_member_view(api: Api, project: str, project_admin: Api) -> None:
    user = _non_privileged_member(api, project)
    view = project_admin.ok("GET", f"/projects/{project}/members/{user['name']}")
    _assert_non_privileged(view, user, project, ["consumer"])


def test_project_admin_sees_non_privileged_member_list(api: Api, project: str, project_admin: Api) -> None:
    user = _non_privileged_member(api, project)
    body = project_admin.ok("GET", f"/projects/{project}/members", params={"details": "true"})
    (view,) = [u for u in body["users"] if u["name"] == user["name"]]
    _assert_non_privileged(view, user, project, ["consumer"])
    assert all("token" not in u for u in body["users"])


def test_project_admin_sees_non_privileged_views_on_update_and_add(api: Api, project: str, project_admin: Api) -> None:
    user = _non_privileged_member(api, project)
    body = {"projects": [{"project": project, "roles": ["consumer", "publisher"]}]}
    view = project_admin.ok("PUT", f"/projects/{project}/members/{user['name']}", body)
    _assert_non_privileged(view, user, project, ["consumer", "publisher"])
    project_admin.ok("POST", f"/projects/{project}/members/{user['name']}:remove")
    view = project_admin.ok("POST", f"/projects/{project}/members/{user['name']}:add", {"roles": ["consumer"]})
    _assert_non_privileged(view, user, project, ["consumer"])


def test_service_token_sees_privileged_member_views(api: Api, project: str) -> None:
    user = _non_privileged_member(api, project)
    view = api.ok("GET", f"/projects/{project}/members/{user['name']}")
    assert view == user
    listed = api.ok("GET", f"/projects/{project}/members", params={"details": "true"})["users"]
    assert listed == [user]
