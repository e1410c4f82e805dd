"""AuthN's OpenAPI document (ams_app/authn/openapi.yaml): valid, and describing exactly the routes of
its app. Every answer of the AuthN tests is also checked against it (tests/openapi_check.py)."""

from __future__ import annotations

import re

from openapi_spec_validator import validate

from ams_app.authn.app import create_authn_app
from ams_app.authn.service import AuthnService
from tests.openapi_check import PREFIX, load_document

METHODS = ("get", "put", "post", "delete", "patch")


def test_the_document_is_valid_openapi() -> None:
    validate(load_document("ams_app.authn"))


def test_the_document_describes_exactly_the_routes_of_the_app() -> None:
    app = create_authn_app(AuthnService(store=None, trust=None))  # type: ignore[arg-type]
    served = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith(PREFIX + "/"):
            template = re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", rule.rule.removeprefix(PREFIX))
            served |= {(m, template) for m in rule.methods or () if m.lower() in METHODS}
    paths = load_document("ams_app.authn")["paths"]
    documented = {(m.upper(), path) for path, item in paths.items() for m in item if m in METHODS}
    assert served == documented
