"""After every test, the topology is whole again, whatever the test did or where it failed: a killed
host is started, a stopped AMS node too, so one failure does not cascade into the tests after it.
A failed test's report carries each AMS node's recent warnings (a 503's cause is logged only
there)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import pytest
from multinode import EVERY_HOST, GROUPS, host, running, start


@pytest.fixture(autouse=True)
def whole_topology() -> Iterator[None]:
    yield
    for name in EVERY_HOST:
        if not running(name):
            start(name)
    for node in GROUPS["ams"]:
        host(node).run("systemctl start ams")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    result = outcome.get_result()
    if result.when != "call" or not result.failed:
        return
    for node in GROUPS["ams"]:
        # the service logs to stdout, which the journal keeps at priority info: pick by the text
        journal = host(node).run(
            "journalctl -u ams --since -15min --no-pager -o cat | grep -E ' (WARNING|ERROR) ' | tail -n 40"
        )
        result.sections.append((f"{node}: ams warnings of the last 15 minutes", journal.stdout or "(none)"))
