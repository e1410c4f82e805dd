"""The in-process harness (tests/inprocess.py) is what the rules tests take it for: requests reach
the app without a socket, answers keep status, headers and body, and the OpenAPI check sees them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import jsonify

from tests.helpers import error_of
from tests.inprocess import InProcessServer
from tests.openapi_check import ResponseChecker


@pytest.fixture
def service(tmp_path: Path) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path / "data", token="harness-token")
    yield srv
    srv.stop()


def test_requests_reach_the_app_with_their_token_body_and_query(service: InProcessServer) -> None:
    api = service.api()
    assert api.get("/status").json()["status"] in ("ok", "warning")  # warning: push on, no worker here
    assert api.ok("POST", "/projects/p1", {"description": "in-process"})["description"] == "in-process"
    assert api.as_("").get("/projects/p1", params={"key": "harness-token"}).status_code == 200
    denied = api.as_("not-a-token").get("/projects/p1")
    assert denied.status_code == 401
    assert error_of(denied)["status"] == "UNAUTHORIZED"


def test_raw_bodies_pass_unchanged(service: InProcessServer) -> None:
    r = service.api().request("POST", "/projects/p2", raw=b'{"description": ')
    assert r.status_code == 400
    assert error_of(r)["status"] == "INVALID_ARGUMENT"


def test_a_response_against_the_document_is_reported(
    service: InProcessServer, openapi_checker: ResponseChecker
) -> None:
    service.app.view_functions["v1.ams:healthStatus"] = lambda: jsonify({"not": "in the document"})
    assert service.api().get("/status").status_code == 200
    failures = openapi_checker.take()
    assert len(failures) == 1, failures
    assert "/status" in str(failures[0]), failures
