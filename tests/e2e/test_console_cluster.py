"""The cluster view with two nodes on the Kafka backend: a node that is killed is shown down, with
when it was last seen, while the other serves on (docs/console.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.conftest import require_backend
from tests.e2e.conftest import AXE, Console, new_service_admin
from tests.helpers import AmsServer, backend_env


@pytest.fixture
def two_nodes(tmp_path: Path) -> Iterator[tuple[AmsServer, AmsServer]]:
    """Two nodes of one cluster: the same Kafka, MongoDB database and ZooKeeper paths."""
    require_backend("kafka")
    shared = backend_env("kafka")
    nodes = tuple(
        AmsServer(tmp_path / name, backend="kafka", env={**shared, "AMS_NODE_NAME": f"console-{name}"})
        for name in ("first", "second")
    )
    for node in nodes:
        node.start()
    yield nodes  # type: ignore[misc]
    for node in nodes:
        if node.proc is not None and node.proc.poll() is None:
            node.stop()


def test_a_killed_node_is_shown_down(browser: Any, two_nodes: tuple[AmsServer, AmsServer]) -> None:
    first, second = two_nodes
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(path=str(AXE))
    try:
        tab = Console(context, first, "cluster-two-nodes")
        api = first.api()
        tab.sign_in(new_service_admin(api))
        api.close()
        page = tab.page
        tab.goto("/cluster")
        first_row = page.locator('[data-node="console-first"]')
        second_row = page.locator('[data-node="console-second"]')
        expect(first_row).to_have_attribute("data-state", "up", timeout=20_000)
        expect(second_row).to_have_attribute("data-state", "up", timeout=20_000)
        expect(page.get_by_test_id("live-nodes")).to_have_text("2 / 2")
        tab.shot("both-up")

        second.kill()  # SIGKILL: no goodbye; its ZooKeeper session expires (push_session_seconds)
        expect(second_row).to_have_attribute("data-state", "down", timeout=30_000)
        expect(second_row).to_contain_text("down (last seen")
        expect(first_row).to_have_attribute("data-state", "up")
        expect(page.get_by_test_id("live-nodes")).to_have_text("1 / 2")
        tab.shot("node-down")
        tab.assert_clean()
    finally:
        context.close()
