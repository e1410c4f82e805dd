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

#: Operations of the original's API that the app does not serve yet. Remove
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


def test_every_operation_declares_200_and_its_error_statuses_each_as_the_envelope() -> None:
    """No ``default``: the statuses an operation can answer are listed, so that an undeclared
    one fails the response check (tests/openapi_check.py) and schemathesis' status check. Every
    operation can meet the server's own limits (408 request deadlines, 413 body size, 503
    unavailable or at the connection limit), whatever its path."""
    document = load_document()
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            responses = operation["responses"]
            assert "200" in responses, (method, path)
            assert "default" not in responses, (method, path)
            errors = {code for code in responses if not code.startswith("2")}
            assert {"408", "413", "503"} <= errors, (method, path)
            if operation.get("security", document["security"]) != []:
                assert {"400", "401", "403"} <= errors, (method, path)
            if "{" in path:
                assert "404" in errors, (method, path)
            for code in errors:
                ref = responses[code]["$ref"]
                schema = document["components"]["responses"][ref.rsplit("/", 1)[1]]["content"]
                assert schema == {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}, ref


def test_app_routes_and_document_paths_are_the_same(tmp_path: Path) -> None:
    app = app_operations(tmp_path / "probe")
    documented = document_operations()
    assert not PENDING & app, f"implemented now, remove from PENDING: {sorted(PENDING & app)}"
    assert app - documented == set(), "routes of the app missing from the document"
    assert documented - PENDING - app == set(), "documented operations the app does not serve"
