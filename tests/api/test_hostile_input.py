"""Every route, every hostile body: never a 5xx, always the envelope on errors."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from ams_app.app import create_app
from ams_app.settings import Settings
from tests.conftest import BACKENDS, require_backend
from tests.helpers import AmsServer, Api, error_of

KEYS = [
    "messages", "topic", "ackIds", "offset", "maxMessages", "returnImmediately", "pushConfig",
    "authorized_users", "projects", "service_roles", "roles", "name", "description", "email",
    "schema", "ackDeadlineSeconds", "data", "attributes", "first_name", "comment", "type",
]  # fmt: skip
WRONG = [None, 0, -1, 2**70, 1.5, True, "", "x" * 300, [], [None], {}, {"k": []}]

BODIES: list[bytes] = [
    b"", b"null", b"1", b'"s"', b"[]", b"{}", b"[{}]", b'{"a":', b"\xff\xfe\x00", b"{" * 5000,
    json.dumps({k: None for k in KEYS}).encode(),
    json.dumps({"projects": [1, {"project": 5, "roles": "x"}], "messages": [{"data": {}}, None],
                "pushConfig": {"type": 1, "retryPolicy": [], "authorizationHeader": "x"},
                "authorized_users": [1], "ackIds": [None, 5]}).encode(),
]  # fmt: skip
LONE = "\ud800"  # a lone surrogate: valid in a JSON escape, not in any UTF-8 text
BODIES += [
    json.dumps(dict.fromkeys(KEYS, LONE)).encode(),
    json.dumps({LONE: 1, "projects": [{"project": LONE, "roles": [LONE]}], "authorized_users": [LONE]}).encode(),
    json.dumps({"messages": [{"data": "aGk=", "attributes": {LONE: "v", "k": LONE}}]}).encode(),
    b'{"description": "\xed\xa0\x80", "name": "\xed\xbf\xbf"}',  # surrogates as raw UTF-8-like bytes
]
_rng = random.Random(20261122)
BODIES += [json.dumps({k: _rng.choice(WRONG) for k in _rng.sample(KEYS, 6)}).encode() for _ in range(12)]


def routes(tmp: Path) -> list[tuple[str, str]]:
    app = create_app(Settings(data_dir=str(tmp)))
    out = []
    for rule in app.url_map.iter_rules():
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            out.append((method, rule.rule))
    app.extensions["ams"].close()
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def hostile_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[str, str, str]
) -> Iterator[AmsServer]:
    """A server of this module's own, with a short long-poll: a hostile body that reads as a pull
    without returnImmediately waits AMS_PULL_WAIT_SECONDS for messages that never come, and those
    waits, not the bodies, were most of this module's time on the shared server (2 s each)."""
    require_backend(request.param)
    data = tmp_path_factory.mktemp(f"hostile-{request.param}") / "data"
    env = {"AMS_PULL_WAIT_SECONDS": "0.05"}
    srv = AmsServer(data, tls=(tls_files[0], tls_files[1]), backend=request.param, env=env)
    yield srv.start()
    srv.stop()


@pytest.fixture(scope="module")
def world(hostile_server: AmsServer) -> dict[str, str]:
    api = hostile_server.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"})
    user = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    return {
        "project": project,
        "topic": "t",
        "subscription": "s",
        "user": user["name"],
        "token": user["token"],
        "uuid": user["uuid"],
    }


def test_no_route_answers_5xx_to_hostile_bodies(
    hostile_server: AmsServer, world: dict[str, str], tmp_path: Path
) -> None:
    api: Api = hostile_server.api()
    checked = 0
    for method, rule in routes(tmp_path / "probe"):
        path = rule.removeprefix("/v1")
        for var in ("project", "topic", "subscription", "user", "token", "uuid"):
            path = path.replace(f"<name:{var}>", world[var])
        if method == "DELETE":
            continue  # deleting the shared world would end the test early; deletes take no body anyway
        for body in BODIES:
            r = api.request(method, path, raw=body, params={"time": body[:40].decode("latin-1"), "pageSize": "x"})
            assert r.status_code < 500, (method, path, body[:80], r.status_code, r.text)
            if r.status_code >= 400:
                error_of(r)
            checked += 1
    assert checked > 500
    assert api.ok("GET", f"/projects/{world['project']}/subscriptions/s")["name"].endswith("/s")


def test_random_bytes_to_publish_and_pull(api: Api, project: str, topic: str, sub: str) -> None:
    rng = random.Random(7)
    for _ in range(200):
        blob = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        for path in (f"/projects/{project}/topics/{topic}:publish", f"/projects/{project}/subscriptions/{sub}:pull"):
            r = api.post(path, raw=blob)
            assert r.status_code < 500, (path, blob, r.text)
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["max"] == 0


@pytest.mark.parametrize(
    "attributes",
    [{LONE: "v"}, {"k": LONE}, {"k": "a" + LONE + "b"}, {"k": "\udfff"}],
    ids=["key", "value", "inside", "low-half"],
)
def test_a_lone_surrogate_in_a_message_is_400_and_nothing_is_published(
    api: Api, project: str, topic: str, sub: str, attributes: dict[str, str]
) -> None:
    body = json.dumps({"messages": [{"data": "aGk=", "attributes": attributes}]}).encode()
    r = api.post(f"/projects/{project}/topics/{topic}:publish", raw=body)
    assert r.status_code == 400, r.text  # once a 500 (UnicodeEncodeError while sizing the message)
    error_of(r)
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")["max"] == 0


def test_a_lone_surrogate_in_stored_text_is_400_and_a_paired_one_is_kept(api: Api, project: str) -> None:
    for body in (
        {"description": "x" + LONE},
        {"description": "\ud83d"},  # the first half of an emoji alone
    ):
        r = api.put(f"/projects/{project}", raw=json.dumps(body).encode())
        assert r.status_code == 400, r.text
        error_of(r)
    r = api.post("/users/" + "surrogate-user", raw=json.dumps({"email": LONE + "@example.org"}).encode())
    assert r.status_code == 400, r.text
    error_of(r)
    emoji = "\U0001f600"  # sent as the escaped pair \ud83d\ude00, which is one valid character
    api.ok("PUT", f"/projects/{project}", {"description": "smile " + emoji})
    assert api.ok("GET", f"/projects/{project}")["description"] == "smile " + emoji
