"""Fixtures of the API tests: a fresh topic and a subscription on it, in the test's project."""

from __future__ import annotations

import pytest

from tests.helpers import Api, unique


@pytest.fixture
def topic(api: Api, project: str) -> str:
    name = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{name}")
    return name


@pytest.fixture
def sub(api: Api, project: str, topic: str) -> str:
    name = unique("sub")
    api.ok("PUT", f"/projects/{project}/subscriptions/{name}", {"topic": f"projects/{project}/topics/{topic}"})
    return name
