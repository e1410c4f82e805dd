"""A service admin in the console: every page of theirs, and the cluster view, where a node that
dies is shown down (docs/console.md)."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import expect

from tests.e2e.conftest import new_service_admin
from tests.helpers import AmsServer, Api, unique


def test_every_admin_page(open_console: Any, console_server: AmsServer, admin_api: Api) -> None:
    project = admin_api.new_project("padmin")
    admin_api.ok("PUT", f"/projects/{project}/topics/orders")
    admin_api.ok("PUT", f"/projects/{project}/subscriptions/audit", {"topic": f"projects/{project}/topics/orders"})
    member = admin_api.new_user(
        unique("carol"), email="carol@example.org", projects=[{"project": project, "roles": ["consumer"]}]
    )
    registration = admin_api.ok(
        "POST",
        "/registrations",
        {
            "name": unique("dave"),
            "email": "dave@example.org",
            "first_name": "Dave",
            "last_name": "D",
            "organization": "Org",
            "description": "wants in",
        },
    )

    tab = open_console("admin")
    tab.sign_in(new_service_admin(admin_api))
    page = tab.page

    tab.goto("/projects")
    expect(page.get_by_role("link", name=project)).to_be_visible()
    tab.shot("projects")

    # --- schemas: create, validate a message, attach to the topic
    tab.goto(f"/projects/{project}/schemas")
    page.get_by_label("Name").fill("order")
    page.get_by_label("Schema", exact=True).fill(
        '{"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}}'
    )
    page.get_by_role("button", name="Create schema").click()
    expect(page.get_by_test_id("done").filter(has_text="Schema order created")).to_be_visible()
    page.get_by_role("link", name="order").click()
    page.get_by_label("Message (a JSON document)").fill('{"id": "not a number"}')
    page.get_by_role("button", name="Validate").click()
    expect(page.get_by_test_id("error")).to_contain_text("400")
    page.get_by_label("Message (a JSON document)").fill('{"id": 7}')
    page.get_by_role("button", name="Validate").click()
    expect(page.get_by_test_id("done").filter(has_text="Message validated successfully")).to_be_visible()
    tab.shot("schema")
    tab.goto(f"/projects/{project}/topics/orders")
    page.get_by_label("Schema to attach").select_option("order")
    page.get_by_role("button", name="Attach").click()
    expect(page.get_by_test_id("done").filter(has_text="attached")).to_be_visible()
    assert admin_api.ok("GET", f"/projects/{project}/topics/orders")["schema"] == f"projects/{project}/schemas/order"
    # the topic's ACL
    page.get_by_label("Users who may use this topic").fill(member["name"])
    page.get_by_role("button", name="Save access list").click()
    expect(page.get_by_test_id("done").filter(has_text="access list")).to_contain_text("now has 1 user")
    assert admin_api.ok("GET", f"/projects/{project}/topics/orders:acl")["authorized_users"] == [member["name"]]
    tab.shot("topic")

    # --- members
    tab.goto(f"/projects/{project}/members")
    expect(page.get_by_role("cell", name=member["name"])).to_be_visible()
    tab.shot("members")

    # --- users, one user's page, registrations, profile
    tab.goto("/users")
    expect(page.get_by_role("heading", name="Users")).to_be_visible()
    tab.shot("users")
    tab.goto(f"/users/{member['name']}")
    expect(page.get_by_test_id("user-token")).to_have_text("••••••••")
    page.get_by_role("button", name="Show").click()
    expect(page.get_by_test_id("user-token")).to_have_text(member["token"])
    tab.shot("user")
    tab.goto("/registrations")
    expect(page.get_by_role("cell", name=registration["email"])).to_be_visible()
    tab.shot("registrations")
    row = page.get_by_role("row").filter(has_text=registration["email"])
    row.get_by_role("button", name="Accept").click()
    expect(page.get_by_test_id("done").filter(has_text="accepted")).to_be_visible()
    assert admin_api.ok("GET", f"/users/{registration['name']}")["email"] == "dave@example.org"
    tab.goto("/profile")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    tab.shot("profile")

    # --- the subscription's push settings and health, as an admin sees them
    tab.goto(f"/projects/{project}/subscriptions/audit")
    expect(page.get_by_test_id("backlog")).to_have_text("0")
    tab.shot("subscription")


def test_cluster_view(open_console: Any, console_server: AmsServer, admin_api: Api) -> None:
    tab = open_console("cluster")
    tab.sign_in(new_service_admin(admin_api))
    page = tab.page
    page.get_by_role("link", name="Cluster").click()
    expect(page.get_by_test_id("service-status")).to_have_text("ok")
    node = page.locator(f'[data-node="console-{console_server.backend}-a"]')
    expect(node).to_have_attribute("data-state", "up")
    expect(page.get_by_test_id("backends-ok")).to_be_visible()
    tab.shot("cluster")


def test_authn_bindings(open_console: Any, console_server: AmsServer, admin_api: Api) -> None:
    """A certificate's DN bound to a user from the browser is what AuthN's own API then holds."""
    user = admin_api.new_user(unique("erin"), email="erin@example.org")
    service_type, binding = unique("st"), unique("bind")
    dn = f"CN={user['name']},O=Example,C=GR"
    tab = open_console("authn")
    tab.sign_in(new_service_admin(admin_api))
    page = tab.page
    page.get_by_role("link", name="AuthN").click()
    page.get_by_label("Service type name").fill(service_type)
    page.get_by_label("Hosts").fill("msg.example.org")
    page.get_by_role("button", name="Create service type").click()
    expect(page.get_by_test_id("done").filter(has_text=f"Service type {service_type} created")).to_be_visible()
    page.get_by_label("Binding name").fill(binding)
    page.get_by_label("AMS user").fill(user["name"])
    page.get_by_role("combobox", name=re.compile(r"^Service type")).select_option(service_type)
    page.get_by_label("Certificate DN").fill(dn)
    page.get_by_role("button", name="Create binding").click()
    expect(page.get_by_test_id("done").filter(has_text=f"Binding {binding} created")).to_be_visible()
    tab.shot("authn")

    authn = Api(console_server.url.rsplit("/v1", 1)[0] + "/authn/v1", admin_api.token)
    try:
        held = authn.ok("GET", f"/bindings/{binding}")
    finally:
        authn.close()
    assert (held["auth_identifier"], held["unique_key"], held["host"]) == (dn, user["uuid"], "msg.example.org")
