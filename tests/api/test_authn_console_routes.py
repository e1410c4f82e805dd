"""AuthN's management routes on ``ams serve``, under ``/authn/v1`` (ams_app/authn/manage.py), for
the web console, which may call only its own origin: over a socket, on both backends.

A service admin manages service types and bindings there as on ``ams authn``, and anyone else is
refused as there; the x509 call is not served there; bad bodies get the answers ``ams authn``
gives, in the envelope; and both processes read one store, so a binding made through ``ams serve``
is what ``ams authn`` lists and turns into a token. Every answer under ``/authn/v1`` is checked
against ams_app/authn/openapi.yaml, with its ``/v1`` read as ``/authn/v1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography.x509.oid import NameOID

from ams_app.authn.x509 import subject_dn
from tests import authn_pki as pki
from tests.api.test_authn import AuthnServer
from tests.api.test_hostile_input import BODIES, routes
from tests.helpers import AmsServer, Api, error_of, unique
from tests.openapi_check import ResponseChecker, load_document

HOSTS = ["a.example.org", "b.example.org"]
#: A binding's body whose fields have the right shape (what it names need not exist).
SHAPED = {"service_uuid": "s", "host": "h.example.org", "auth_identifier": "CN=x", "unique_key": "u"}
#: The uuid of no user.
NO_USER = "0f4d3a2e-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def authn_document() -> ResponseChecker:
    return ResponseChecker(load_document("ams_app.authn"))


@pytest.fixture(autouse=True)
def _answers_match_authns_document(authn_document: ResponseChecker) -> Iterator[None]:
    yield
    failures = authn_document.take()
    if failures:
        listed = "\n".join(f"  {failure}" for failure in failures)
        pytest.fail(f"{len(failures)} /authn/v1 answer(s), shown as /v1, contradict AuthN's:\n{listed}", pytrace=False)


def base_of(server: AmsServer) -> str:
    return server.url.removesuffix("/v1") + "/authn/v1"


def on_ams(server: AmsServer, token: str, document: ResponseChecker) -> Api:
    """A client of ``ams serve``'s /authn/v1 whose every answer is checked against AuthN's document."""
    client = Api(base_of(server), token)

    def check(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        sent = response.request
        url = (sent.url or "").replace("/authn/v1/", "/v1/", 1)  # the document's server URL is /v1
        ctype = response.headers.get("Content-Type", "")
        document.check(sent.method or "", url, response.status_code, ctype, response.content)

    client.session.hooks["response"].append(check)
    return client


@dataclass
class Robot:
    """A client certificate of a CA of its own, and the DN AuthN reads from it."""

    ca_file: str
    files: tuple[str, str]
    dn: str


@pytest.fixture(scope="module")
def robot(tmp_path_factory: pytest.TempPathFactory) -> Robot:
    root = tmp_path_factory.mktemp("console-authn-pki")
    ca = pki.new_ca("Console AuthN test CA")
    issued = pki.client_cert(ca, [(NameOID.ORGANIZATION_NAME, "Example, Inc."), (NameOID.COMMON_NAME, "robot")])
    return Robot(pki.write_bundle(root / "ca.pem", ca), issued.write(root, "robot"), subject_dn(issued.cert))


@pytest.fixture(scope="module")
def authn(
    server: AmsServer,
    tls_files: tuple[str, str, str],
    robot: Robot,
    openapi_checker: ResponseChecker,
    authn_document: ResponseChecker,
) -> Iterator[AuthnServer]:
    """``ams authn`` beside the module's ``ams serve``: the same backend, the same store."""
    srv = AuthnServer(server, (tls_files[0], tls_files[1]), robot.ca_file)
    openapi_checker.others[srv.port] = authn_document
    srv.start()
    yield srv
    srv.stop()
    openapi_checker.others.pop(srv.port, None)


def new_service_type(admin: Api, hosts: list[str]) -> dict[str, Any]:
    r = admin.post("/service-types", {"name": unique("st"), "hosts": hosts, "type": "ams"})
    assert r.status_code == 201, r.text
    return dict(r.json())


# ---------------------------------------------------------------------- management ----------
def test_a_service_admin_manages_service_types_and_bindings_through_ams_serve(
    server: AmsServer, api: Api, authn_document: ResponseChecker
) -> None:
    admin_user = api.new_user(service_roles=["service_admin"])
    admin = on_ams(server, admin_user["token"], authn_document)
    st = new_service_type(admin, HOSTS)
    name = st["name"]
    assert (st["hosts"], st["auth_types"], st["type"]) == (HOSTS, ["x509"], "ams")
    assert admin.get(f"/service-types/{name}").json() == st
    assert st in admin.get("/service-types").json()["service_types"]
    r = admin.put(f"/service-types/{name}", {"hosts": [*HOSTS, "c.example.org"]})
    assert r.status_code == 200, r.text
    assert r.json()["hosts"] == [*HOSTS, "c.example.org"]

    user, other = api.new_user(), api.new_user()
    binding = unique("bind")
    dn = "CN=one,O=Example\\, Inc."
    body = {"service_uuid": st["uuid"], "host": HOSTS[0], "auth_identifier": dn, "unique_key": user["uuid"]}
    r = admin.post(f"/bindings/{binding}", body)
    assert r.status_code == 201, r.text
    made = r.json()
    assert {k: made[k] for k in body} == body
    assert (made["name"], made["auth_type"]) == (binding, "x509")
    assert "last_auth" not in made
    assert admin.get(f"/bindings/{binding}").json() == made
    # every binding a page at a time; one host's; the one of a DN
    seen, token = [], ""
    while True:
        page = admin.get("/bindings", params={"pageSize": 2, "pageToken": token}).json()
        assert len(page["bindings"]) <= 2
        seen += page["bindings"]
        token = page["nextPageToken"]
        if not token:
            break
    assert made in seen
    assert page["totalSize"] == len(seen)
    of_host = admin.get(f"/service-types/{name}/hosts/{HOSTS[0]}/bindings").json()
    assert (of_host["bindings"], of_host["totalSize"]) == ([made], 1)
    assert admin.get(f"/service-types/{name}/hosts/{HOSTS[1]}/bindings").json()["bindings"] == []
    found = admin.get(f"/service-types/{name}/hosts/{HOSTS[0]}/bindings", params={"authID": body["auth_identifier"]})
    assert found.json() == {"bindings": [made]}
    r = admin.get(f"/service-types/{name}/hosts/{HOSTS[0]}/bindings", params={"authID": "CN=nobody"})
    assert error_of(r) == {"code": 404, "message": "Binding doesn't exist", "status": "NOT_FOUND"}
    # the console's edit: another DN, another user; the DN of another binding on the host is a 409
    r = admin.put(f"/bindings/{binding}", {"auth_identifier": "CN=two", "unique_key": other["uuid"]})
    assert r.status_code == 200, r.text
    assert (r.json()["auth_identifier"], r.json()["unique_key"]) == ("CN=two", other["uuid"])
    assert r.json()["updated_on"].endswith("Z")
    second = unique("bind")
    assert admin.post(f"/bindings/{second}", {**body, "auth_identifier": "CN=three"}).status_code == 201
    r = admin.put(f"/bindings/{second}", {"auth_identifier": "CN=two"})
    assert r.status_code == 409
    assert error_of(r)["message"] == f"The DN 'CN=two' is already bound on host '{HOSTS[0]}'"
    r = admin.put(f"/bindings/{second}", {"unique_key": NO_USER})
    assert error_of(r) == {"code": 404, "message": "User doesn't exist", "status": "NOT_FOUND"}
    # deletes: 204 with no body; a deleted service type takes its bindings along
    r = admin.delete(f"/bindings/{binding}")
    assert (r.status_code, r.content) == (204, b"")
    assert error_of(admin.get(f"/bindings/{binding}"))["code"] == 404
    assert error_of(admin.delete(f"/bindings/{binding}"))["code"] == 404
    assert admin.delete(f"/service-types/{name}").status_code == 204
    assert error_of(admin.get(f"/bindings/{second}"))["code"] == 404
    assert error_of(admin.get(f"/service-types/{name}"))["code"] == 404


def test_only_a_service_admin_may_manage_them(
    server: AmsServer, api: Api, project: str, authn_document: ResponseChecker
) -> None:
    st = new_service_type(on_ams(server, api.token, authn_document), HOSTS)  # the service token may
    unauthorized = {"code": 401, "message": "Unauthorized", "status": "UNAUTHORIZED"}
    forbidden = {"code": 403, "message": "Access to this resource is forbidden", "status": "FORBIDDEN"}
    project_admin = api.new_user(projects=[{"project": project, "roles": ["project_admin", "publisher"]}])
    viewer = api.new_user(service_roles=["admin_viewer", "metrics_viewer"])
    calls = [
        ("GET", "/service-types", None),
        ("GET", f"/service-types/{st['name']}", None),
        ("PUT", f"/service-types/{st['name']}", {"hosts": ["x.example.org"]}),
        ("GET", f"/service-types/{st['name']}/hosts/{HOSTS[0]}/bindings", None),
        ("GET", "/bindings", None),
        ("POST", f"/bindings/{unique('no')}", {**SHAPED, "service_uuid": st["uuid"], "host": HOSTS[0]}),
        ("DELETE", f"/service-types/{st['name']}", None),
    ]
    for token, expected in (("", unauthorized), ("not-a-token", unauthorized)):
        for method, path, body in calls:
            assert error_of(on_ams(server, token, authn_document).request(method, path, body)) == expected, path
    for user in (project_admin, viewer):
        for method, path, body in calls:
            r = on_ams(server, user["token"], authn_document).request(method, path, body)
            assert error_of(r) == forbidden, (user["name"], method, path)
    admin = on_ams(server, "", authn_document)
    assert admin.get(f"/service-types/{st['name']}", params={"key": api.token}).json() == st  # nothing changed
    # ?key= stands for x-api-key, as on the AMS API and ams authn
    assert admin.get("/bindings", params={"key": project_admin["token"]}).status_code == 403
    assert admin.delete(f"/service-types/{st['name']}", params={"key": api.token}).status_code == 204


def test_the_x509_call_and_authns_about_routes_are_not_served_by_ams_serve(
    server: AmsServer, api: Api, robot: Robot, authn_document: ResponseChecker
) -> None:
    admin = on_ams(server, api.token, authn_document)
    st = new_service_type(admin, [server.address])
    not_found = {"code": 404, "message": "Not Found", "status": "NOT_FOUND"}
    path = f"/service-types/{st['name']}/hosts/{server.address}:authx509"
    for token in (api.token, ""):
        assert error_of(on_ams(server, token, authn_document).get(path)) == not_found
    assert error_of(admin.get(path, cert=robot.files)) == not_found  # a client certificate changes nothing
    for about in ("/version", "/status", "/openapi.json"):  # ams serve's own are under /v1
        r = requests.get(base_of(server) + about, timeout=30)
        assert error_of(r) == not_found, about
    assert admin.delete(f"/service-types/{st['name']}").status_code == 204


def test_they_are_counted_under_their_own_route_names(
    server: AmsServer, api: Api, authn_document: ResponseChecker
) -> None:
    on_ams(server, api.token, authn_document).get("/bindings", params={"pageSize": 1})
    samples = api.scrape()
    labelled = {
        dict(labels).get("route") for (metric, labels) in samples if metric == "ams_http_request_duration_seconds_count"
    }
    assert "authn:bindings:list" in labelled
    assert not {"list_bindings", "authn_manage.authn:bindings:list"} & labelled


# ---------------------------------------------------------------------- bad requests --------
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/bindings/{new}", []),
        ("POST", "/bindings/{new}", "text"),
        ("POST", "/bindings/{new}", {**SHAPED, "service_uuid": 7}),
        ("POST", "/bindings/{new}", {**SHAPED, "host": ["h.example.org"]}),
        ("POST", "/bindings/{new}", {**SHAPED, "auth_identifier": ""}),
        ("POST", "/bindings/{new}", {**SHAPED, "auth_identifier": {"CN": "x"}}),
        ("POST", "/bindings/{new}", {**SHAPED, "auth_identifier": "CN=x\nO=y"}),
        ("POST", "/bindings/{new}", {**SHAPED, "unique_key": None}),
        ("POST", "/bindings/{new}", {**SHAPED, "auth_type": "oidc"}),
        ("POST", "/bindings/{new}", b'{"service_uuid": '),
        ("POST", "/service-types", {"name": "x", "hosts": "h.example.org"}),
        ("POST", "/service-types", {"name": "x", "hosts": []}),
        ("POST", "/service-types", {"name": "bad name", "hosts": ["h.example.org"]}),
        ("POST", "/service-types", {"name": "x", "hosts": ["h.example.org", "h.example.org"]}),
        ("POST", "/service-types", b"{not json"),
        ("PUT", "/service-types/{st}", {"type": "web-api"}),
        ("PUT", "/service-types/{st}", {"hosts": [1]}),
        ("PUT", "/service-types/{st}", b"\xff\xfe"),
        ("PUT", "/bindings/{bound}", {"auth_identifier": "CN=" + "x" * 1100}),
        ("PUT", "/bindings/{bound}", {"host": "bad host/"}),
        ("PUT", "/bindings/{bound}", b"[1, 2"),
        ("GET", "/bindings?pageSize=x", None),
        ("GET", "/bindings?pageToken=bogus", None),
    ],
)
def test_bad_requests_are_a_400_in_the_envelope_as_on_ams_authn(
    server: AmsServer,
    api: Api,
    authn: AuthnServer,
    authn_document: ResponseChecker,
    bad_request_world: dict[str, str],
    method: str,
    path: str,
    body: Any,
) -> None:
    path = path.format(new=unique("bad"), **bad_request_world)
    raw = body if isinstance(body, bytes) else None
    sent = {"raw": raw} if raw is not None else {"body": body}
    ours = on_ams(server, api.token, authn_document).request(method, path, **sent)
    theirs = authn.admin(api.token).request(method, path, **sent)
    assert ours.status_code == 400, ours.text
    assert error_of(ours) == error_of(theirs)
    assert error_of(ours)["status"] in ("BAD_REQUEST", "INVALID_ARGUMENT")


@pytest.fixture(scope="module")
def bad_request_world(server: AmsServer, authn_document: ResponseChecker) -> dict[str, str]:
    """A service type and a binding in it, for the changes that must be refused."""
    admin = on_ams(server, server.token, authn_document)
    st = new_service_type(admin, HOSTS)
    user = Api(server.url, server.token).new_user()
    bound = unique("bound")
    body = {"service_uuid": st["uuid"], "host": HOSTS[0], "auth_identifier": "CN=kept", "unique_key": user["uuid"]}
    assert admin.post(f"/bindings/{bound}", body).status_code == 201
    return {"st": st["name"], "bound": bound}


def test_oversized_bodies_and_wrong_methods_answer_as_on_ams_authn(
    server: AmsServer, api: Api, authn: AuthnServer, authn_document: ResponseChecker
) -> None:
    """A body over AuthN's 64 KB is a 413 on ams serve too, whose own limit is far larger."""
    ours, theirs = on_ams(server, api.token, authn_document), authn.admin(api.token)
    big = b'{"name": "x", "hosts": ["' + b"h" * 100_000 + b'"]}'
    json_type = {"Content-Type": "application/json"}
    for client in (ours, theirs):
        r = client.post("/service-types", raw=big, headers=json_type)
        assert error_of(r) == {"code": 413, "message": "Request body is too large", "status": "INVALID_ARGUMENT"}
    assert error_of(ours.request("PATCH", "/bindings")) == error_of(theirs.request("PATCH", "/bindings"))
    assert error_of(ours.request("PATCH", "/bindings"))["code"] == 405
    assert error_of(ours.get("/no/such/path")) == error_of(theirs.get("/no/such/path"))


def test_no_management_route_answers_5xx_to_hostile_bodies(
    server: AmsServer, api: Api, authn_document: ResponseChecker, tmp_path: Path
) -> None:
    """tests/api/test_hostile_input.py's bodies, on every route under /authn/v1 but the deletes."""
    admin = on_ams(server, api.token, authn_document)
    st = new_service_type(admin, HOSTS)
    bound = unique("hostile")
    body = {**SHAPED, "service_uuid": st["uuid"], "host": HOSTS[0], "unique_key": api.new_user()["uuid"]}
    assert admin.post(f"/bindings/{bound}", body).status_code == 201
    rules = [(method, rule) for method, rule in routes(tmp_path / "probe") if rule.startswith("/authn/v1/")]
    assert len(rules) == 11
    checked = 0
    for method, rule in rules:
        if method == "DELETE":
            continue
        path = rule.removeprefix("/authn/v1")
        path = path.replace("<service_type>", st["name"]).replace("<host>", HOSTS[0]).replace("<binding>", bound)
        for raw in BODIES:
            r = admin.request(method, path, raw=raw, params={"pageSize": "x", "authID": raw[:40].decode("latin-1")})
            assert r.status_code < 500, (method, path, raw[:80], r.status_code, r.text)
            if r.status_code >= 400:
                error_of(r)
            checked += 1
    assert checked > 250


# ---------------------------------------------------------------------- one store -----------
def test_a_binding_made_through_ams_serve_is_what_ams_authn_lists_and_serves(
    server: AmsServer, api: Api, authn: AuthnServer, robot: Robot, authn_document: ResponseChecker
) -> None:
    ours, theirs = on_ams(server, api.token, authn_document), authn.admin(api.token)
    host = "msg.example.org"
    st = new_service_type(ours, [host])
    assert theirs.get(f"/service-types/{st['name']}").json() == st
    user = api.new_user()
    name = unique("console")
    body = {"service_uuid": st["uuid"], "host": host, "auth_identifier": robot.dn, "unique_key": user["uuid"]}
    made = ours.post(f"/bindings/{name}", body).json()
    assert theirs.get(f"/service-types/{st['name']}/hosts/{host}/bindings").json()["bindings"] == [made]
    assert made in _every_binding(theirs)
    # the certificate gets the user's token from ams authn, which records its use where ams serve sees it
    r = requests.get(f"{authn.url}/service-types/{st['name']}/hosts/{host}:authx509", cert=robot.files, timeout=30)
    assert r.json() == {"token": user["token"]}
    assert ours.get(f"/bindings/{name}").json()["last_auth"].endswith("Z")
    # a change through ams authn is what ams serve shows, and a delete through ams serve ends the token
    assert theirs.put(f"/bindings/{name}", {"auth_identifier": "CN=renewed"}).status_code == 200
    assert ours.get(f"/bindings/{name}").json()["auth_identifier"] == "CN=renewed"
    assert ours.put(f"/bindings/{name}", {"auth_identifier": robot.dn}).status_code == 200
    assert ours.delete(f"/bindings/{name}").status_code == 204
    assert error_of(theirs.get(f"/bindings/{name}"))["code"] == 404
    r = requests.get(f"{authn.url}/service-types/{st['name']}/hosts/{host}:authx509", cert=robot.files, timeout=30)
    assert error_of(r)["code"] == 404
    assert theirs.delete(f"/service-types/{st['name']}").status_code == 204
    assert error_of(ours.get(f"/service-types/{st['name']}"))["code"] == 404


def _every_binding(client: Api) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    token = ""
    while True:
        page = client.get("/bindings", params={"pageSize": 100, "pageToken": token}).json()
        out += page["bindings"]
        token = page["nextPageToken"]
        if not token:
            return out
