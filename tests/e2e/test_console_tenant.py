"""A tenant in the console: publish, pull with the lease's countdown, acknowledge, replay by time,
browse without acknowledging, and the charts and figures that follow it; and never another
tenant's project (docs/console.md)."""

from __future__ import annotations

import base64
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers import Api, unique


@pytest.fixture
def tenant(admin_api: Api) -> dict[str, Any]:
    """Project P with topic t1 (subscriptions s1 and idle) and topic quiet (subscription
    waiting), administered by a user of its own; project Q of another tenant beside it."""
    p, q = admin_api.new_project("ptenant"), admin_api.new_project("pother")
    for project, topic, subs in ((p, "t1", ("s1", "idle")), (p, "quiet", ("waiting",)), (q, "secret", ("hidden",))):
        admin_api.ok("PUT", f"/projects/{project}/topics/{topic}")
        for sub in subs:
            admin_api.ok(
                "PUT",
                f"/projects/{project}/subscriptions/{sub}",
                {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": 30},
            )
    alice = admin_api.new_user(
        unique("alice"), email="alice@example.org", projects=[{"project": p, "roles": ["project_admin"]}]
    )
    bob = admin_api.new_user(
        unique("bob"), email="bob@example.org", projects=[{"project": q, "roles": ["project_admin"]}]
    )
    return {"p": p, "q": q, "alice": alice, "bob": bob}


def _points(page: Any, chart: str) -> int:
    return int(page.get_by_test_id(f"chart-{chart}").get_attribute("data-points"))


def _wait_points_above(page: Any, chart: str, floor: int, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        points = _points(page, chart)
        if points > floor:
            return points
        page.wait_for_timeout(250)
    raise AssertionError(f"chart {chart} stayed at {floor} points")


def test_publish_pull_ack_replay_browse(open_console: Any, tenant: dict[str, Any], admin_api: Api) -> None:
    p = tenant["p"]
    tab = open_console("tenant")
    tab.sign_in(tenant["alice"]["token"])
    page = tab.page

    expect(page.get_by_role("link", name=p)).to_be_visible()
    tab.shot("projects")

    page.get_by_role("link", name=p).click()
    expect(page.get_by_role("heading", name=f"Project {p}")).to_be_visible()
    expect(page.get_by_test_id("topics")).to_contain_text("t1")
    expect(page.get_by_test_id("subscriptions")).to_contain_text("s1")
    tab.shot("project")

    # --- publish, and watch the topic's chart take samples and its count follow
    before_publish = datetime.now(UTC) - timedelta(seconds=2)
    page.get_by_role("link", name="t1", exact=True).click()
    expect(page.get_by_role("heading", name="Topic t1")).to_be_visible()
    expect(page.get_by_test_id("topic-messages")).to_have_text("0")
    points = _points(page, "Published messages per second")
    page.get_by_label("Message (text; sent base64-encoded as UTF-8)").fill("hello from the console ✓")
    page.get_by_label("Attributes").fill("source=e2e")
    page.get_by_label("Copies").fill("3")
    page.get_by_role("button", name="Publish", exact=True).click()
    expect(page.get_by_test_id("done").filter(has_text="Published 3 messages")).to_be_visible()
    expect(page.get_by_test_id("topic-messages")).to_have_text("3", timeout=15_000)
    _wait_points_above(page, "Published messages per second", points)
    tab.shot("topic")

    # what the browser published is what the API holds
    peek = admin_api.pull(p, "idle", 3)
    assert [m["message"]["attributes"] for m in peek] == [{"source": "e2e"}] * 3
    admin_api.ok(
        "POST",
        f"/projects/{p}/subscriptions/idle:modifyAckDeadline",
        {"ackIds": [m["ackId"] for m in peek], "ackDeadlineSeconds": 0},
    )

    # --- the subscription: backlog, pull with the countdown, acknowledge
    tab.goto(f"/projects/{p}/subscriptions/s1")
    expect(page.get_by_test_id("backlog")).to_have_text("3", timeout=15_000)
    backlog_points = _points(page, "Backlog")
    page.get_by_label("At most").fill("10")
    page.get_by_role("button", name="Pull", exact=True).click()
    rows = page.get_by_test_id("messages").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(page.get_by_test_id("messages")).to_contain_text("hello from the console ✓")
    expect(page.get_by_test_id("lease-left")).to_have_text(re.compile(r"Acknowledge within \d+ s"))
    first = page.get_by_test_id("lease-left").text_content()
    page.wait_for_timeout(1600)
    assert page.get_by_test_id("lease-left").text_content() != first, "the lease's countdown does not move"
    tab.shot("subscription-pulled")
    page.get_by_role("button", name="Acknowledge 3").click()
    expect(page.get_by_test_id("done").filter(has_text="Acknowledged 3 messages")).to_be_visible()
    expect(page.get_by_test_id("backlog")).to_have_text("0", timeout=15_000)
    expect(page.get_by_test_id("consumed")).to_have_text("3", timeout=15_000)
    _wait_points_above(page, "Backlog", backlog_points)

    # --- replay from a time before the publication: the three are back
    page.get_by_label("From the time (your local time)").fill(before_publish.strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_role("button", name="Replay from time").click()
    expect(page.get_by_test_id("done").filter(has_text="Replaying from")).to_be_visible()
    expect(page.get_by_test_id("backlog")).to_have_text("3", timeout=15_000)

    # --- browse: shown, and given back unacknowledged
    page.get_by_role("button", name="Browse messages").click()
    expect(page.get_by_test_id("done").filter(has_text="3 messages shown, none acknowledged")).to_be_visible()
    tab.shot("subscription-browsed")
    again = admin_api.pull(p, "s1", 10)
    assert len(again) == 3, "browsing acknowledged messages"

    # --- a long wait shows progress, an empty pull says so
    tab.goto(f"/projects/{p}/subscriptions/waiting")
    page.get_by_role("button", name="Pull", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Waiting for messages")).to_be_visible()
    expect(page.get_by_text("No messages.")).to_be_visible(timeout=15_000)

    # --- the API's own error message reaches the user
    tab.goto(f"/projects/{p}")
    page.get_by_label("New topic name").fill("bad name!")
    page.get_by_role("button", name="Create topic").click()
    expect(page.get_by_test_id("error")).to_contain_text("400")


def test_a_tenant_never_sees_another_project(open_console: Any, tenant: dict[str, Any]) -> None:
    p, q = tenant["p"], tenant["q"]
    tab = open_console("isolation")
    tab.sign_in(tenant["alice"]["token"])
    page = tab.page
    expect(page.get_by_role("link", name=p)).to_be_visible()
    expect(page.get_by_text(q)).to_have_count(0)
    # service pages are not offered to a tenant
    expect(page.get_by_role("link", name="Cluster")).to_have_count(0)
    expect(page.get_by_role("link", name="Users")).to_have_count(0)

    for path in (f"/projects/{q}", f"/projects/{q}/topics/secret", f"/projects/{q}/subscriptions/hidden"):
        tab.goto(path)
        # refused as the API refuses it (401 for a project one is not a member of, as the original)
        expect(page.get_by_test_id("error").first).to_contain_text(re.compile(r"40[13] "))
        # nothing of Q's: its topic and subscription are never listed or linked
        expect(page.get_by_role("link", name="secret")).to_have_count(0)
        expect(page.get_by_role("link", name="hidden")).to_have_count(0)
        if "subscriptions" in path:  # no figure of it either
            expect(page.get_by_test_id("backlog")).to_have_text("…")
    tab.shot("forbidden")
    tab.goto("/users")
    expect(page.get_by_test_id("error").first).to_contain_text(re.compile(r"40[13] "))


def test_the_token_stays_in_the_tab(open_console: Any, tenant: dict[str, Any], browser: Any) -> None:
    token = tenant["alice"]["token"]
    tab = open_console("session")
    tab.sign_in(token)
    page = tab.page
    assert token not in page.url
    assert page.evaluate("() => window.localStorage.length") == 0
    assert page.evaluate("() => document.cookie") == ""
    # a reload keeps the session (this tab's storage) ...
    page.reload()
    page.get_by_test_id("whoami").wait_for()
    # ... another tab of a fresh session does not have it
    other = open_console("session-other")
    other.goto("/projects")
    expect(other.page.get_by_label("Token")).to_be_visible()
    # signing out forgets it
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Token")).to_be_visible()
    assert page.evaluate("() => window.sessionStorage.length") == 0
    tab.shot("login")


def test_readable_on_a_phone(open_console: Any, tenant: dict[str, Any]) -> None:
    tab = open_console("phone", viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    tab.sign_in(tenant["alice"]["token"])
    page = tab.page
    for name, path in (
        ("project", f"/projects/{tenant['p']}"),
        ("subscription", f"/projects/{tenant['p']}/subscriptions/s1"),
    ):
        tab.goto(path)
        page.get_by_role("heading", level=1).wait_for()
        page.wait_for_timeout(500)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name}: the page is {overflow}px wider than a phone's screen"
        tab.shot(name)


def test_dead_letters_redriven(open_console: Any, tenant: dict[str, Any], admin_api: Api) -> None:
    """A message that failed its attempts is shown on the dead-letter topic and published back to
    the subscription's topic, without the dead-letter attributes."""
    p = tenant["p"]
    admin_api.ok("PUT", f"/projects/{p}/topics/work")
    admin_api.ok("PUT", f"/projects/{p}/topics/dead")
    admin_api.ok("PUT", f"/projects/{p}/subscriptions/dead-reader", {"topic": f"projects/{p}/topics/dead"})
    admin_api.ok(
        "PUT",
        f"/projects/{p}/subscriptions/worker",
        {
            "topic": f"projects/{p}/topics/work",
            "deadLetterPolicy": {"deadLetterTopic": f"projects/{p}/topics/dead", "maxDeliveryAttempts": 5},
            "retryPolicy": {"minimumBackoff": "0s", "maximumBackoff": "1s"},
        },
    )
    admin_api.publish(p, "work", "poison", attributes={"kind": "order"})
    nack = f"/projects/{p}/subscriptions/worker:modifyAckDeadline"
    deadline = time.monotonic() + 30
    while not admin_api.ok("GET", f"/projects/{p}/subscriptions/dead-reader:offsets")["max"]:
        assert time.monotonic() < deadline, "the message was never dead-lettered"
        got = admin_api.pull(p, "worker", 10)
        if got:
            admin_api.ok("POST", nack, {"ackIds": [m["ackId"] for m in got], "ackDeadlineSeconds": 0})

    tab = open_console("dead-letters")
    tab.sign_in(tenant["alice"]["token"])
    page = tab.page
    tab.goto(f"/projects/{p}/subscriptions/worker")
    page.get_by_label("Read the dead letters through").select_option("dead-reader")
    page.get_by_role("button", name="Show dead letters").click()
    expect(page.get_by_test_id("done").filter(has_text="1 dead-lettered message(s)")).to_be_visible()
    expect(page.get_by_test_id("messages")).to_contain_text("poison")
    tab.shot("dead-letters")
    page.get_by_role("button", name="Redrive to the topic").click()
    expect(page.get_by_test_id("done").filter(has_text="Redrove 1 message(s) to work")).to_be_visible()

    back = admin_api.pull(p, "worker", 10)
    assert [(base64.b64decode(m["message"]["data"]), m["message"]["attributes"]) for m in back] == [
        (b"poison", {"kind": "order"})
    ]
    assert admin_api.pull(p, "dead-reader", 10) == [], "the redriven dead letter was not acknowledged"
