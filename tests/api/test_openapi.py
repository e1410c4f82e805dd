"""The OpenAPI document: served, valid, and describing exactly the routes of the app.

Every response of the whole suite is also checked against it (tests/openapi_check.py,
wired in tests/conftest.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import requests
from openapi_spec_validator import validate

from tests.api.test_hostile_input import routes
from tests.helpers import AmsServer
from tests.openapi_check import PREFIX, load_document

#: Operations of the contract (ams-api.md §2.3) that the app does not serve yet. Remove
#: entries, then the whole set, as they land: this test fails on an entry the app serves.
PENDING: set[tuple[str, str]] = set()

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def app_operations(tmp: Path) -> set[tuple[str, str]]:
    """(METHOD, template) of every API route of the Flask app, in the document's notation.
    Rules outside ``/v1`` (Flask's ``/static``, the Prometheus ``/metrics``) are no part of it."""
    out = set()
    for method, rule in routes(tmp):
        if not rule.startswith(PREFIX + "/"):
            continue
        template = re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", rule.removeprefix(PREFIX))
        out.add((method, template))
    return out


def document_operations() -> set[tuple[str, str]]:
    paths = load_document()["paths"]
    return {(m.upper(), path) for path, item in paths.items() for m in item if m in HTTP_METHODS}


def test_document_is_served_without_a_token(server: AmsServer) -> None:
    r = requests.get(f"{server.url}/openapi.json", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json() == load_document()


def test_document_is_valid_openapi_3_1() -> None:
    document = load_document()
    assert document["openapi"].startswith("3.1.")
    assert document["servers"] == [{"url": PREFIX}]
    validate(document)


def test_every_operation_answers_200_and_the_error_envelope() -> None:
    paths = load_document()["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation["responses"]
            assert "200" in responses, (method, path)
            assert responses["default"] == {"$ref": "#/components/responses/Error"}, (method, path)


def test_app_routes_and_document_paths_are_the_same(tmp_path: Path) -> None:
    app = app_operations(tmp_path / "probe")
    documented = document_operations()
    assert not PENDING & app, f"implemented now, remove from PENDING: {sorted(PENDING & app)}"
    assert app - documented == set(), "routes of the app missing from the document"
    assert documented - PENDING - app == set(), "documented operations the app does not serve"
