"""Schemathesis hooks for tests/api/test_fuzz.py (loaded by ``st`` through SCHEMATHESIS_HOOKS).

The fuzzer works as the service admin, so it may delete or rename the objects its path
parameters are drawn from (project ``fuzz``, topic ``t``, ...). After every call that changed
something, the fixtures are put back, so that later cases still reach real objects instead of
answering 404 for the rest of the run. The server and token come from the environment that the
test sets: AMS_FUZZ_URL, AMS_FUZZ_TOKEN, AMS_FUZZ_CA.
"""

from __future__ import annotations

import os
from typing import Any

import requests
import schemathesis

PROJECT = "fuzz"
TOPIC = "t"
SCHEMA_TOPIC = "ts"
SUBSCRIPTION = "s"
MEMBER = "fuzzer"
SCHEMA = "sch"
JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


class Fixtures:
    """The objects the fuzzer's path parameters point at, and how to put them back."""

    def __init__(self, base: str, token: str, ca: str | bool) -> None:
        self.base = base
        self.session = requests.Session()
        self.session.headers["x-api-key"] = token
        self.session.verify = ca
        self.session.trust_env = False

    def _call(self, method: str, path: str, body: Any = None) -> requests.Response:
        return self.session.request(method, self.base + path, json=body, timeout=30)

    def _missing(self, path: str) -> bool:
        return self._call("GET", path).status_code == 404

    def ensure(self) -> dict[str, str]:
        """Create whatever is missing; returns the identifiers the fuzzer may use."""
        p = f"/projects/{PROJECT}"
        if self._missing(p):
            self._call("POST", p, {"description": "fuzzing fixtures"})
        if self._missing(f"{p}/schemas/{SCHEMA}"):
            self._call("POST", f"{p}/schemas/{SCHEMA}", {"type": "json", "schema": JSON_SCHEMA})
        for topic, body in ((TOPIC, None), (SCHEMA_TOPIC, {"schema": f"projects/{PROJECT}/schemas/{SCHEMA}"})):
            if self._missing(f"{p}/topics/{topic}"):
                self._call("PUT", f"{p}/topics/{topic}", body)
        if self._missing(f"{p}/subscriptions/{SUBSCRIPTION}"):
            self._call("PUT", f"{p}/subscriptions/{SUBSCRIPTION}", {"topic": f"projects/{PROJECT}/topics/{TOPIC}"})
        member = self._call("GET", f"{p}/members/{MEMBER}")
        if member.status_code == 404:
            body = {"projects": [{"project": PROJECT, "roles": ["consumer", "publisher"]}]}
            member = self._call("POST", f"{p}/members/{MEMBER}", body)
        ids = {"member_uuid": "", "member_token": ""}
        if member.ok:
            ids = {"member_uuid": member.json()["uuid"], "member_token": member.json()["token"]}
        return ids


_FIXTURES: Fixtures | None = None


def fixtures() -> Fixtures:
    global _FIXTURES
    if _FIXTURES is None:
        ca = os.environ.get("AMS_FUZZ_CA") or True
        _FIXTURES = Fixtures(os.environ["AMS_FUZZ_URL"], os.environ["AMS_FUZZ_TOKEN"], ca)
    return _FIXTURES


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """Put the fixtures back after any call that may have changed them."""
    if case.method.upper() != "GET" and 200 <= response.status_code < 300:
        fixtures().ensure()
