"""Every route declares who may call it where it is declared (ams_app/api/<resource>.py): the
app has no route outside the role table, and the table names exactly the OpenAPI document's
operations."""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources

import pytest
import yaml
from flask import Flask

from ams_app import auth
from ams_app.api.pipeline import OPEN_ROUTES, ROUTE_ROLES, add_route, open_route
from ams_app.app import create_app
from ams_app.models import User
from ams_app.settings import Settings


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    made = create_app(Settings(data_dir=str(tmp_path_factory.mktemp("routes") / "data")))
    yield made
    made.extensions["ams"].close()


def test_every_route_of_the_api_is_in_the_role_table_or_declared_open(app: Flask) -> None:
    endpoints = {r.endpoint.removeprefix("v1.") for r in app.url_map.iter_rules() if r.rule.startswith("/v1/")}
    assert endpoints == set(ROUTE_ROLES) | set(OPEN_ROUTES)
    assert not set(ROUTE_ROLES) & set(OPEN_ROUTES)
    assert len(ROUTE_ROLES) > 50  # the table is filled by the declarations


def test_the_routes_are_the_documents_operations() -> None:
    document = yaml.safe_load(resources.files("ams_app").joinpath("openapi.yaml").read_text(encoding="utf-8"))
    operations = {
        operation["operationId"]
        for path in document["paths"].values()
        for method, operation in path.items()
        if isinstance(operation, dict) and "operationId" in operation
    }
    assert operations == set(ROUTE_ROLES) | set(OPEN_ROUTES)


def test_every_declared_role_can_be_given_to_a_user() -> None:
    assert set().union(*ROUTE_ROLES.values()) <= auth.VALID_ROLES


@pytest.mark.parametrize("roles", [(), ("no_such_role",)])
def test_a_route_without_valid_roles_cannot_be_declared(roles: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="roles must be"):
        add_route("/nowhere", "nowhere:show", "GET", roles=roles)
    assert "nowhere:show" not in ROUTE_ROLES


def test_a_route_cannot_be_declared_twice() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        add_route("/elsewhere", "topics:show", "GET", roles=(auth.SERVICE_ADMIN,))
    with pytest.raises(ValueError, match="declared twice"):
        open_route("/elsewhere", "topics:show", "GET", who="anyone")


def test_the_service_token_passes_any_route_and_users_only_their_roles() -> None:
    readers = frozenset({auth.PROJECT_ADMIN, auth.CONSUMER})
    assert auth.allowed(readers, auth.SERVICE_CALLER)
    assert auth.allowed(readers, auth.Caller(None, frozenset()))  # the configured token: no user
    user = auth.Caller(User(uuid="u", name="alice", token="t"), frozenset({auth.CONSUMER}))
    assert auth.allowed(readers, user)
    assert not auth.allowed(frozenset({auth.PUBLISHER}), user)
