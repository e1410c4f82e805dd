"""``ams authn`` over real mutual TLS, next to a real AMS server, on both backends (docs/authn.md).

A test CA issues the client certificates: a good one (a DN with an escaped comma and unicode), an
expired one, one not valid yet, one with a DN nobody bound, and one from another CA. Every
outcome of the x509 call and of the management API is checked over a socket, and every answer
against ams_app/authn/openapi.yaml (the ``openapi_checker`` routes AuthN's port to it).
argo-ams-library's certificate mode runs unchanged against AMS on 127.0.0.2:443.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import trustme
from cryptography.x509.oid import NameOID

from tests import authn_pki as pki
from tests.helpers import ROOT, AmsServer, Api, error_of, free_port, unique
from tests.openapi_check import ResponseChecker, load_document

GOOD_SUBJECT = [
    (NameOID.COUNTRY_NAME, "GR"),
    (NameOID.ORGANIZATION_NAME, "Example, Inc."),
    (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
    (NameOID.COMMON_NAME, "robot-ünïcode.example.org"),
]
GOOD_DN = "CN=robot-ünïcode.example.org,OU=ops,O=Example\\, Inc.,C=GR"
HOST = "127.0.0.1"


@dataclass
class Pki:
    ca_file: str
    good: tuple[str, str]
    good_again: tuple[str, str]  # the same DN, another key: what a renewed certificate is
    expired: tuple[str, str]
    not_yet_valid: tuple[str, str]
    unbound: tuple[str, str]
    other_ca: tuple[str, str]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("authn-pki")
    ca, stranger = pki.new_ca("AuthN test CA"), pki.new_ca("Somebody else's CA")
    past, future = pki.now() - dt.timedelta(days=30), pki.now() + dt.timedelta(days=30)
    return Pki(
        ca_file=pki.write_bundle(root / "ca.pem", ca),
        good=pki.client_cert(ca, GOOD_SUBJECT).write(root, "good"),
        good_again=pki.client_cert(ca, GOOD_SUBJECT).write(root, "good-again"),
        expired=pki.client_cert(ca, GOOD_SUBJECT, not_before=past, not_after=past + dt.timedelta(days=1)).write(
            root, "expired"
        ),
        not_yet_valid=pki.client_cert(ca, GOOD_SUBJECT, not_before=future).write(root, "future"),
        unbound=pki.client_cert(ca, [(NameOID.COMMON_NAME, "nobody.example.org")]).write(root, "unbound"),
        other_ca=pki.client_cert(stranger, GOOD_SUBJECT).write(root, "stranger"),
    )


class AuthnServer:
    """``ams authn`` beside an AMS server: the same backend, the same database or data directory."""

    def __init__(self, ams: AmsServer, tls: tuple[str, str], ca_file: str, address: str = HOST) -> None:
        self.ams = ams
        self.address = address
        self.port = free_port()
        self.env = {
            **os.environ,
            "AMS_SERVICE_TOKEN": ams.token,
            **ams.env,
            "AMS_AUTHN_HOST": address,
            "AMS_AUTHN_PORT": str(self.port),
            "AMS_AUTHN_TLS_CERT": tls[0],
            "AMS_AUTHN_TLS_KEY": tls[1],
            "AMS_AUTHN_CA_FILE": ca_file,
            "AMS_REQUEST_HEAD_TIMEOUT": "3",
        }
        self.log_path = ams.data_dir.parent / f"{ams.data_dir.name}-authn-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}/v1"

    def start(self) -> AuthnServer:
        cmd = [sys.executable, "-m", "ams_app", "authn", "--data-dir", str(self.ams.data_dir)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ams authn exited with {self.proc.returncode}: {self.log()}")
            try:
                if requests.get(f"{self.url}/status", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"ams authn did not answer in time: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def admin(self, token: str) -> Api:
        return Api(self.url, token)

    def x509(self, cert: tuple[str, str] | None, host: str = HOST, service_type: str = "ams", **kw: Any) -> Any:
        url = f"{self.url}/service-types/{service_type}/hosts/{host}:authx509"
        return requests.get(url, cert=cert, timeout=30, **kw)


@pytest.fixture(scope="module")
def authn_checker(openapi_checker: ResponseChecker) -> ResponseChecker:
    return ResponseChecker(load_document("ams_app.authn"))


@pytest.fixture(scope="module")
def authn(
    server: AmsServer,
    tls_files: tuple[str, str, str],
    certs: Pki,
    openapi_checker: ResponseChecker,
    authn_checker: ResponseChecker,
) -> Iterator[AuthnServer]:
    srv = AuthnServer(server, (tls_files[0], tls_files[1]), certs.ca_file)
    openapi_checker.others[srv.port] = authn_checker
    srv.start()
    yield srv
    srv.stop()
    openapi_checker.others.pop(srv.port, None)


@dataclass
class Bound:
    """A user whose token the good certificate gets, through a binding of its DN on HOST."""

    user: dict[str, Any]
    binding: dict[str, Any]
    service_type: str


def ensure_service_type(admin: Api, name: str, *hosts: str) -> dict[str, Any]:
    r = admin.post("/service-types", {"name": name, "hosts": list(hosts), "type": "ams"})
    if r.status_code == 409:  # there: with these hosts too
        known = admin.get(f"/service-types/{name}").json()
        hosts = [*known["hosts"], *(h for h in hosts if h not in known["hosts"])]
        r = admin.put(f"/service-types/{name}", {"hosts": hosts})
        assert r.status_code == 200, r.text
        return dict(r.json())
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture
def bound(authn: AuthnServer, api: Api) -> Iterator[Bound]:
    admin = authn.admin(api.token)
    st = ensure_service_type(admin, "ams", HOST, "msg.example.org")
    user = api.new_user()
    name = unique("bind")
    r = admin.post(
        f"/bindings/{name}",
        {"service_uuid": st["uuid"], "host": HOST, "auth_identifier": GOOD_DN, "unique_key": user["uuid"]},
    )
    assert r.status_code == 201, r.text
    yield Bound(user, r.json(), "ams")
    admin.delete(f"/bindings/{name}")


# ---------------------------------------------------------------------- the x509 call -------
def test_a_bound_certificate_gets_its_users_current_token(authn: AuthnServer, api: Api, bound: Bound, certs: Pki):
    r = authn.x509(certs.good)
    assert r.status_code == 200, r.text
    assert r.json() == {"token": bound.user["token"]}
    assert authn.x509(certs.good_again).json() == {"token": bound.user["token"]}  # any key, the same DN
    refreshed = api.ok("POST", f"/users/{bound.user['name']}:refreshToken")["token"]
    assert refreshed != bound.user["token"]
    assert authn.x509(certs.good).json() == {"token": refreshed}  # nothing cached
    shown = authn.admin(api.token).get(f"/bindings/{bound.binding['name']}").json()
    assert shown["last_auth"].endswith("Z")
    assert refreshed not in authn.log()  # tokens are never logged


@pytest.mark.parametrize(
    ("which", "message"),
    [
        (None, "No client certificate was presented"),
        ("expired", "The client certificate has expired"),
        ("not_yet_valid", "The client certificate is not valid yet"),
        ("other_ca", "The client certificate is not issued by a trusted certificate authority"),
    ],
)
def test_no_untrusted_or_out_of_date_certificate_is_a_401(
    authn: AuthnServer, bound: Bound, certs: Pki, which: str | None, message: str
):
    r = authn.x509(getattr(certs, which) if which else None)
    assert r.status_code == 401, r.text
    assert error_of(r) == {"code": 401, "message": message, "status": "UNAUTHORIZED"}


def test_an_unbound_dn_an_unknown_host_or_service_type_is_a_404(authn: AuthnServer, bound: Bound, certs: Pki):
    r = authn.x509(certs.unbound)
    assert r.status_code == 404
    assert error_of(r)["message"] == f"No binding for DN 'CN=nobody.example.org' on host '{HOST}'"
    assert error_of(authn.x509(certs.good, host="elsewhere.example.org"))["message"] == "Host doesn't exist"
    assert error_of(authn.x509(certs.good, service_type="nope"))["message"] == "Service type doesn't exist"
    # the DN is bound on HOST only, not on the service type's other host
    r = authn.x509(certs.good, host="msg.example.org")
    assert r.status_code == 404
    assert "No binding for DN" in error_of(r)["message"]


def test_a_binding_whose_user_is_gone_is_a_404_that_says_so(authn: AuthnServer, api: Api, bound: Bound, certs: Pki):
    assert api.delete(f"/users/{bound.user['name']}").status_code == 200
    r = authn.x509(certs.good)
    assert r.status_code == 404
    assert error_of(r)["message"] == f"The AMS user of binding '{bound.binding['name']}' doesn't exist any more"


@pytest.mark.parametrize(
    "headers",
    [
        {"X-SSL-Client-DN": GOOD_DN},
        {"SSL_CLIENT_S_DN": GOOD_DN, "X-Client-Verify": "SUCCESS"},
        {"X-Forwarded-Client-Cert": f'Subject="{GOOD_DN}"', "X-SSL-Client-Verify": "0"},
    ],
)
def test_headers_that_claim_a_dn_are_ignored(authn: AuthnServer, bound: Bound, certs: Pki, headers: dict[str, str]):
    assert authn.x509(None, headers=headers).status_code == 401
    r = authn.x509(certs.unbound, headers=headers)
    assert r.status_code == 404
    assert "CN=nobody.example.org" in error_of(r)["message"]


# ---------------------------------------------------------------------- management ----------
def test_management_needs_a_service_admin(authn: AuthnServer, api: Api):
    assert error_of(authn.admin("").get("/bindings"))["code"] == 401
    assert error_of(authn.admin("not-a-token").get("/service-types"))["code"] == 401
    user = api.new_user()
    assert error_of(authn.admin(user["token"]).get("/bindings"))["code"] == 403
    admin_user = api.new_user(service_roles=["service_admin"])
    assert authn.admin(admin_user["token"]).get("/bindings").status_code == 200
    # ?key= works as on the AMS API, and the version and status need no token
    assert requests.get(f"{authn.url}/bindings", params={"key": api.token}, timeout=10).status_code == 200
    assert requests.get(f"{authn.url}/version", timeout=10).json()["component"] == "authn"


def test_bindings_are_created_listed_changed_and_deleted(authn: AuthnServer, api: Api, certs: Pki):
    admin = authn.admin(api.token)
    st_name = unique("st")
    st = ensure_service_type(admin, st_name, "a.example.org", "b.example.org")
    assert st["auth_types"] == ["x509"]
    user, other = api.new_user(), api.new_user()
    base = {"service_uuid": st["uuid"], "auth_identifier": "CN=one,O=Example\\, Inc.", "unique_key": user["uuid"]}
    names = [unique("b") for _ in range(3)]
    assert admin.post(f"/bindings/{names[0]}", {**base, "host": "a.example.org"}).status_code == 201
    # the same DN on the same host: 409, whatever the binding is called
    r = admin.post(f"/bindings/{names[1]}", {**base, "host": "a.example.org", "unique_key": other["uuid"]})
    assert r.status_code == 409
    assert "already bound on host 'a.example.org'" in error_of(r)["message"]
    assert admin.post(f"/bindings/{names[1]}", {**base, "host": "b.example.org"}).status_code == 201
    assert error_of(admin.post(f"/bindings/{names[0]}", {**base, "host": "b.example.org"}))["code"] == 409
    r = admin.post(f"/bindings/{names[2]}", {**base, "host": "a.example.org", "auth_identifier": "CN=two"})
    assert r.status_code == 201
    # one host's bindings, and the one of a DN
    listed = admin.get(f"/service-types/{st_name}/hosts/a.example.org/bindings").json()
    assert [b["name"] for b in listed["bindings"]] == [names[0], names[2]]
    found = admin.get(f"/service-types/{st_name}/hosts/a.example.org/bindings", params={"authID": "CN=two"}).json()
    assert [b["name"] for b in found["bindings"]] == [names[2]]
    r = admin.get(f"/service-types/{st_name}/hosts/a.example.org/bindings", params={"authID": "CN=three"})
    assert error_of(r)["code"] == 404
    # pages of two, over every binding there is
    seen: list[str] = []
    token = ""
    while True:
        page = admin.get("/bindings", params={"pageSize": 2, "pageToken": token}).json()
        assert len(page["bindings"]) <= 2
        seen += [b["name"] for b in page["bindings"]]
        token = page["nextPageToken"]
        if not token:
            break
    assert set(names) <= set(seen)
    assert page["totalSize"] == len(seen)
    assert error_of(admin.get("/bindings", params={"pageToken": "bogus"}))["code"] == 400
    # change: a rename, another DN; onto a taken DN: 409
    renamed = unique("renamed")
    r = admin.put(f"/bindings/{names[2]}", {"name": renamed, "auth_identifier": "CN=three"})
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["auth_identifier"]) == (renamed, "CN=three")
    assert r.json()["updated_on"].endswith("Z")
    assert error_of(admin.get(f"/bindings/{names[2]}"))["code"] == 404
    r = admin.put(f"/bindings/{renamed}", {"auth_identifier": base["auth_identifier"]})
    assert error_of(r)["code"] == 409
    assert error_of(admin.put(f"/bindings/{renamed}", {"name": names[0]}))["code"] == 409
    # references must exist
    r = admin.put(f"/bindings/{renamed}", {"unique_key": "0f4d3a2e-0000-4000-8000-000000000000"})
    assert error_of(r)["message"] == "User doesn't exist"
    assert error_of(admin.put(f"/bindings/{renamed}", {"host": "c.example.org"}))["message"] == "Host doesn't exist"
    # delete; a deleted service type takes its bindings along
    r = admin.delete(f"/bindings/{renamed}")
    assert (r.status_code, r.content) == (204, b"")
    assert error_of(admin.delete(f"/bindings/{renamed}"))["code"] == 404
    assert admin.delete(f"/service-types/{st_name}").status_code == 204
    assert error_of(admin.get(f"/bindings/{names[0]}"))["code"] == 404


def test_service_types_are_created_changed_and_conflict(authn: AuthnServer, api: Api):
    admin = authn.admin(api.token)
    name = unique("st")
    assert ensure_service_type(admin, name, "x.example.org")["hosts"] == ["x.example.org"]
    assert error_of(admin.post("/service-types", {"name": name, "hosts": ["y.example.org"]}))["code"] == 409
    r = admin.put(f"/service-types/{name}", {"hosts": ["x.example.org", "y.example.org"]})
    assert r.json()["hosts"] == ["x.example.org", "y.example.org"]
    assert name in [st["name"] for st in admin.get("/service-types").json()["service_types"]]
    assert error_of(admin.put(f"/service-types/{name}", {"type": "web-api"}))["code"] == 400
    assert error_of(admin.get(f"/service-types/{unique('none')}"))["code"] == 404
    assert admin.delete(f"/service-types/{name}").status_code == 204


@pytest.mark.parametrize(
    "body",
    [
        [],
        "text",
        {"service_uuid": 7, "host": HOST, "auth_identifier": "CN=x", "unique_key": "u"},
        {"service_uuid": "s", "host": ["h"], "auth_identifier": "CN=x", "unique_key": "u"},
        {"service_uuid": "s", "host": HOST, "auth_identifier": {"CN": "x"}, "unique_key": "u"},
        {"service_uuid": "s", "host": HOST, "auth_identifier": "CN=x", "unique_key": None},
        {"service_uuid": "s", "host": HOST, "auth_identifier": "", "unique_key": "u"},
        {"service_uuid": "s", "host": HOST, "auth_identifier": "CN=x\nO=y", "unique_key": "u"},
        {"service_uuid": "s", "host": HOST, "auth_identifier": "CN=" + "x" * 1100, "unique_key": "u"},
        {"service_uuid": "s", "host": "bad host/", "auth_identifier": "CN=x", "unique_key": "u"},
        {"service_uuid": "s", "host": HOST, "auth_identifier": "CN=x", "unique_key": "u", "auth_type": "oidc"},
    ],
)
def test_binding_bodies_of_the_wrong_shape_are_a_400(authn: AuthnServer, api: Api, body: Any):
    r = authn.admin(api.token).post(f"/bindings/{unique('bad')}", body)
    assert error_of(r)["code"] == 400, r.text


@pytest.mark.parametrize(
    "body",
    [
        {"name": "x", "hosts": "h.example.org"},
        {"name": "x", "hosts": []},
        {"name": "x", "hosts": [1]},
        {"name": "bad name", "hosts": ["h.example.org"]},
        {"name": "x", "hosts": ["h.example.org"], "auth_types": ["oidc"]},
        {"name": "x", "hosts": ["h.example.org", "h.example.org"]},
    ],
)
def test_service_type_bodies_of_the_wrong_shape_are_a_400(authn: AuthnServer, api: Api, body: Any):
    assert error_of(authn.admin(api.token).post("/service-types", body))["code"] == 400


def test_malformed_and_oversized_bodies_are_refused(authn: AuthnServer, api: Api):
    admin = authn.admin(api.token)
    assert error_of(admin.post("/service-types", raw=b"{not json"))["code"] == 400
    big = b'{"name": "x", "hosts": ["' + b"h" * 100_000 + b'"]}'
    assert error_of(admin.post("/service-types", raw=big, headers={"Content-Type": "application/json"}))["code"] == 413
    assert error_of(admin.get("/no/such/path"))["code"] == 404
    assert error_of(admin.request("PATCH", "/bindings"))["code"] == 405


def test_ams_admin_bind_dn_binds_a_certificate_from_the_shell(authn: AuthnServer, api: Api, certs: Pki):
    user = api.new_user()
    name = unique("cli")
    env = {**authn.env, "AMS_DATA_DIR": str(authn.ams.data_dir)}
    cmd = [sys.executable, "-m", "ams_app", "admin", "bind-dn", name, "--user", user["name"], "--host", HOST]
    done = subprocess.run([*cmd, "--cert", certs.unbound[0]], env=env, cwd=ROOT, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert authn.x509(certs.unbound).json() == {"token": user["token"]}
    again = [sys.executable, "-m", "ams_app", "admin", "bind-dn", unique("cli"), "--user", user["name"]]
    again += ["--host", HOST, "--dn", "CN=nobody.example.org"]
    refused = subprocess.run(again, env=env, cwd=ROOT, capture_output=True, timeout=60)
    assert refused.returncode == 1
    assert b"already bound on host" in refused.stderr
    assert authn.admin(api.token).delete(f"/bindings/{name}").status_code == 204


# ---------------------------------------------------------------------- argo-ams-library ----
@pytest.fixture(scope="module")
def on_443(
    server: AmsServer,
    test_ca: trustme.CA,
    tmp_path_factory: pytest.TempPathFactory,
    certs: Pki,
    openapi_checker: ResponseChecker,
    authn_checker: ResponseChecker,
) -> Iterator[tuple[AmsServer, AuthnServer]]:
    """AMS on 127.0.0.2:443, where the library looks for it, and AuthN on 127.0.0.2 beside it."""
    root = tmp_path_factory.mktemp("on-443")
    issued = test_ca.issue_cert("127.0.0.2", "127.0.0.1", "localhost")
    cert, key = root / "cert.pem", root / "key.pem"
    issued.private_key_and_cert_chain_pem.write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ams = AmsServer(root / "data", tls=(str(cert), str(key)), backend=server.backend, listen=("127.0.0.2", 443))
    ams.start()
    srv = AuthnServer(ams, (str(cert), str(key)), certs.ca_file, address="127.0.0.2")
    openapi_checker.others[srv.port] = authn_checker
    srv.start()
    yield ams, srv
    srv.stop()
    ams.stop()
    openapi_checker.others.pop(srv.port, None)


def test_argo_ams_library_gets_a_token_with_a_certificate_and_uses_it(on_443: tuple[AmsServer, AuthnServer], certs):
    from argo_ams_library import AmsMessage, ArgoMessagingService

    ams, authn = on_443
    api = ams.api()
    project = api.new_project()
    user = api.new_user(projects=[{"project": project, "roles": ["publisher", "consumer"]}])
    api.ok("PUT", f"/projects/{project}/topics/t")
    api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"})
    for kind, name in (("topics", "t"), ("subscriptions", "s")):
        api.ok("POST", f"/projects/{project}/{kind}/{name}:modifyAcl", {"authorized_users": [user["name"]]})
    admin = authn.admin(ams.token)
    st = ensure_service_type(admin, "ams", "127.0.0.2")
    body = {"service_uuid": st["uuid"], "host": "127.0.0.2", "auth_identifier": GOOD_DN, "unique_key": user["uuid"]}
    assert admin.post(f"/bindings/{unique('lib')}", body).status_code == 201

    client = ArgoMessagingService(
        endpoint="127.0.0.2", project=project, cert=certs.good[0], key=certs.good[1], authn_port=authn.port
    )
    assert client.token == user["token"]
    ids = client.publish("t", [AmsMessage(data="from a certificate", attributes={"via": "authn"})])
    assert len(ids["messageIds"]) == 1
    pulled = client.pull_sub("s", num=1, return_immediately=True)
    assert [(m.get_data(), m.get_attr()) for _, m in pulled] == [(b"from a certificate", {"via": "authn"})]
    assert client.ack_sub("s", [ack for ack, _ in pulled])


def test_ams_admin_authn_hosts_sets_a_service_types_hosts_and_says_if_it_changed(authn: AuthnServer, api: Api):
    env = {**authn.env, "AMS_DATA_DIR": str(authn.ams.data_dir)}
    name = unique("st")

    def hosts(*names: str) -> str:
        cmd = [sys.executable, "-m", "ams_app", "admin", "authn-hosts", "--service-type", name, *names]
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert hosts("a.example.org", "b.example.org").startswith("changed: service type")
    assert hosts("a.example.org", "b.example.org").startswith("unchanged:")
    assert hosts("b.example.org").startswith("changed:")
    shown = authn.admin(api.token).get(f"/service-types/{name}").json()
    assert shown["hosts"] == ["b.example.org"]
    assert authn.admin(api.token).delete(f"/service-types/{name}").status_code == 204


def test_ams_authn_refuses_to_start_without_what_it_needs(tmp_path: Path) -> None:
    """Exit 2 with the reason (systemd does not restart it: RestartPreventExitStatus=2)."""
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    cases = [
        ({}, "needs authn_tls_cert and authn_tls_key"),
        ({"AMS_AUTHN_TLS_CERT": str(bad), "AMS_AUTHN_TLS_KEY": str(bad)}, "needs authn_ca_file or authn_ca_dir"),
        (
            {"AMS_AUTHN_TLS_CERT": str(bad), "AMS_AUTHN_TLS_KEY": str(bad), "AMS_AUTHN_CA_FILE": "/nonexistent"},
            "CA file /nonexistent does not exist",
        ),
        (
            {"AMS_AUTHN_TLS_CERT": str(bad), "AMS_AUTHN_TLS_KEY": str(bad), "AMS_AUTHN_CA_FILE": str(bad)},
            "cannot start",
        ),
    ]
    for env, message in cases:
        cmd = [sys.executable, "-m", "ams_app", "authn", "--data-dir", str(tmp_path / "data")]
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AMS_")}
        done = subprocess.run(cmd, env={**clean, **env}, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (env, done.stdout, done.stderr)
        assert message in done.stdout + done.stderr, (env, done.stdout, done.stderr)
