"""After every test, the topology is whole again, whatever the test did or where it failed: a killed
host is started, a stopped AMS node too, a node left drained in haproxy is taken back, so one
failure does not cascade into the tests after it. A failed test's report carries each AMS node's
recent warnings (a 503's cause is logged only there), and goes to the log at once, before the
tests after it run (should the scenario be stopped at its time limit, the cause is still there)."""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from multinode import EVERY_HOST, GROUPS, haproxy_ready_again, host, running, start


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
    try:  # a failure here must not end the session: the report matters more
        taken = ", ".join(haproxy_ready_again()) or "(none)"
    except Exception as exc:
        taken = f"could not ask haproxy: {exc!r}"
    result.sections.append(("haproxy: taken back from drain or maintenance", taken))
    for node in GROUPS["ams"]:
        # the service logs to stdout, which the journal keeps at priority info: pick by the text
        journal = host(node).run(
            "journalctl -u ams --since -15min --no-pager -o cat | grep -E ' (WARNING|ERROR) ' | tail -n 40"
        )
        result.sections.append((f"{node}: ams warnings of the last 15 minutes", journal.stdout or "(none)"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.failed:
        return
    stream = sys.__stderr__ or sys.stderr
    sections = "".join(f"\n--- {title}\n{text}" for title, text in report.sections)
    stream.write(f"\n[multinode] FAILED {report.nodeid} ({report.when}):\n{report.longreprtext}{sections}\n")
    stream.flush()
