"""An acknowledge is judged by when its request reached the node, not by when it was served: a
request that waited for a subscription's new owner (ams_app/api/forward.py) is still in time if it
came in time (ams_app/api/pipeline.py ``received_ns``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ams_app.errors import AmsError
from ams_app.service.core import AmsService
from ams_app.timeutil import now_ns
from tests.helpers import b64
from tests.inprocess import InProcessServer

SECOND = 1_000_000_000


@pytest.fixture
def service(tmp_path: Path) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path / "data", token="t")
    api = srv.api()
    api.ok("POST", "/projects/p", {})
    api.ok("PUT", "/projects/p/topics/t")
    api.ok("PUT", "/projects/p/subscriptions/s", {"topic": "projects/p/topics/t", "ackDeadlineSeconds": 1})
    api.ok("POST", "/projects/p/topics/t:publish", {"messages": [{"data": b64("one")}]})
    yield srv
    srv.stop()


def _pull(srv: InProcessServer) -> int:
    got = srv.api().ok("POST", "/projects/p/subscriptions/s:pull", {"returnImmediately": True})["receivedMessages"]
    assert len(got) == 1
    return int(got[0]["ackId"].rsplit(":", 1)[1])


def test_the_time_the_ack_came_in_decides_whether_it_is_late(service: InProcessServer) -> None:
    svc: AmsService = service.app.extensions["ams"]
    project = svc.project("p")
    offset = _pull(service)
    sub = svc.subscription(project, "s")
    with pytest.raises(AmsError) as late:  # served now, but came in after the 1 s deadline
        svc.acknowledge(project, sub, [(offset, None)], now_ns() + 3 * SECOND)
    assert late.value.code == 408
    offset = _pull(service)  # the late ack gave the message back: it comes again
    came_in = now_ns()
    svc.acknowledge(project, svc.subscription(project, "s"), [(offset, None)], came_in)  # in time
    assert svc.offsets(project, "s")["current"] == offset + 1
