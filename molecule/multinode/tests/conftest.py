"""After every test, the topology is whole again, whatever the test did or where it failed: a killed
host is started, a stopped AMS node too, so one failure does not cascade into the tests after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from multinode import GROUPS, host, running, start


@pytest.fixture(autouse=True)
def whole_topology() -> Iterator[None]:
    yield
    for name in sorted({h for hosts in GROUPS.values() for h in hosts}):
        if not running(name):
            start(name)
    for node in GROUPS["ams"]:
        host(node).run("systemctl start ams")
