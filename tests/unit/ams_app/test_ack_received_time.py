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
        svc.acknowledge(project, sub, [(offset, None)], now_ns() + 3 * SECOND, cumulative=True)
    assert late.value.code == 408
    offset = _pull(service)  # the late ack gave the message back: it comes again
    came_in = now_ns()
    svc.acknowledge(project, svc.subscription(project, "s"), [(offset, None)], came_in, cumulative=True)  # in time
    assert svc.offsets(project, "s")["current"] == offset + 1


def test_the_service_acknowledges_each_id_alone_unless_the_ams_edge_asks_for_its_pull(tmp_path: Path) -> None:
    """The service's acknowledge is per id (what Pub/Sub's clients send, docs/delivery.md); the AMS
    API's cumulative meaning on a plain subscription is the edge's translation."""
    srv = InProcessServer(tmp_path / "data", token="t")
    try:
        api = srv.api()
        api.ok("POST", "/projects/p", {})
        api.ok("PUT", "/projects/p/topics/t")
        api.ok("PUT", "/projects/p/subscriptions/s", {"topic": "projects/p/topics/t"})
        api.ok("POST", "/projects/p/topics/t:publish", {"messages": [{"data": b64(x)} for x in "abcd"]})
        api.ok("POST", "/projects/p/subscriptions/s:pull", {"maxMessages": 4, "returnImmediately": True})
        svc: AmsService = srv.app.extensions["ams"]
        project = svc.project("p")
        sub = svc.subscription(project, "s")
        assert svc.acknowledge(project, sub, [(2, None)], now_ns(), cumulative=False) == {}
        assert svc.offsets(project, "s")["current"] == 0  # 0 and 1 are still out
        assert svc.acknowledge(project, sub, [(3, None)], now_ns(), cumulative=True) == {}
        assert svc.offsets(project, "s")["current"] == 4  # the AMS meaning: its pull up to it
    finally:
        srv.stop()
