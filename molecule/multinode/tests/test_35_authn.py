"""AuthN in the production topology (docs/authn.md): ``ams authn`` on every AMS node, haproxy
passing TLS through on 8443. argo-ams-library, unchanged, gets a token with a client certificate
from lb1:8443 and publishes and pulls through lb1:443; every node's ``ams authn`` answers; the
refusals arrive through haproxy as the AMS error envelope."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID
from multinode import ADDRESS, CA, GROUPS, LB, PROJECT, ROOT, Api, haproxy_servers, report, unique, wait_until

sys.path.insert(0, str(ROOT))  # the repository's tools package: testinfra runs from the scenario
from tools import pki

AUTHN_CA = ROOT / ".cache" / "artifacts" / "tls" / "authn-ca"
PUBLIC = ADDRESS[LB]  # a name of ams_authn_hosts, and in the certificate haproxy and the nodes present
AUTHN = f"https://{PUBLIC}:8443/v1"


def authn_ca() -> pki.Issued:
    cert = x509.load_pem_x509_certificate(Path(f"{AUTHN_CA}.pem").read_bytes())
    key = serialization.load_pem_private_key(Path(f"{AUTHN_CA}.key").read_bytes(), password=None)
    return pki.Issued(cert, key)


def x509_call(cert: tuple[str, str] | None) -> requests.Response:
    url = f"{AUTHN}/service-types/ams/hosts/{PUBLIC}:authx509"
    return requests.get(url, cert=cert, verify=str(CA), timeout=30)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    root = tmp_path_factory.mktemp("authn")
    ca, stranger = authn_ca(), pki.new_ca("not the scenario's CA")
    subject = [(NameOID.ORGANIZATION_NAME, "multinode"), (NameOID.COMMON_NAME, unique("robot") + ".example.org")]
    past = pki.now() - dt.timedelta(days=10)
    return {
        "good": pki.client_cert(ca, subject).write(root, "good"),
        "expired": pki.client_cert(ca, subject, not_before=past, not_after=past + dt.timedelta(days=1)).write(
            root, "expired"
        ),
        "stranger": pki.client_cert(stranger, subject).write(root, "stranger"),
        "unbound": pki.client_cert(ca, [(NameOID.COMMON_NAME, "unbound.example.org")]).write(root, "unbound"),
    }


def test_every_node_serves_authn_behind_haproxy() -> None:
    wait_until(lambda: haproxy_servers(authn=True) == dict.fromkeys(GROUPS["ams"], "UP"), "every ams authn UP")
    shown = Api(AUTHN).call("GET", "/service-types/ams")
    assert set(shown["hosts"]) == {LB, PUBLIC}  # ams_authn_hosts, set by the role


def test_argo_ams_library_gets_a_token_with_a_certificate_through_haproxy(certs: dict[str, tuple[str, str]]) -> None:
    from argo_ams_library import AmsMessage, ArgoMessagingService

    api = Api()
    api.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    user = api.call(
        "POST", f"/users/{unique('robot')}", {"projects": [{"project": PROJECT, "roles": ["publisher", "consumer"]}]}
    )
    topic, sub = unique("at"), unique("as")
    api.topic(topic)
    api.subscription(sub, topic)
    for kind, name in (("topics", topic), ("subscriptions", sub)):
        api.call("POST", f"/projects/{PROJECT}/{kind}/{name}:modifyAcl", {"authorized_users": [user["name"]]})
    admin = Api(AUTHN)
    service_type = admin.call("GET", "/service-types/ams")
    dn = x509.load_pem_x509_certificate(Path(certs["good"][0]).read_bytes()).subject.rfc4514_string()
    binding = unique("robot")
    body = {"service_uuid": service_type["uuid"], "host": PUBLIC, "auth_identifier": dn, "unique_key": user["uuid"]}
    assert admin.request("POST", f"/bindings/{binding}", body).status_code == 201
    try:
        # round robin over the nodes: each one's ams authn hands out the same token
        tokens = {x509_call(certs["good"]).json()["token"] for _ in range(2 * len(GROUPS["ams"]))}
        assert tokens == {user["token"]}
        old = os.environ.get("REQUESTS_CA_BUNDLE")
        os.environ["REQUESTS_CA_BUNDLE"] = str(CA)  # how the library verifies haproxy and the nodes
        try:
            client = ArgoMessagingService(endpoint=PUBLIC, project=PROJECT, cert=certs["good"][0], key=certs["good"][1])
            assert client.token == user["token"]
            client.publish(topic, [AmsMessage(data="via a certificate", attributes={"host": LB})])
            pulled = wait_until(lambda: client.pull_sub(sub, num=1, return_immediately=True), "the message pulled")
            assert [m.get_data() for _, m in pulled] == [b"via a certificate"]
            assert client.ack_sub(sub, [ack for ack, _ in pulled])
        finally:
            if old is None:
                os.environ.pop("REQUESTS_CA_BUNDLE", None)
            else:
                os.environ["REQUESTS_CA_BUNDLE"] = old
        # what is refused, through haproxy as from one node
        outcomes = {
            "none": x509_call(None),
            "expired": x509_call(certs["expired"]),
            "stranger": x509_call(certs["stranger"]),
            "unbound": x509_call(certs["unbound"]),
            "forged_header": requests.get(
                f"{AUTHN}/service-types/ams/hosts/{PUBLIC}:authx509",
                headers={"X-SSL-Client-DN": dn},
                verify=str(CA),
                timeout=30,
            ),
        }
        statuses = {name: r.status_code for name, r in outcomes.items()}
        assert statuses == {"none": 401, "expired": 401, "stranger": 401, "unbound": 404, "forged_header": 401}
        assert all(set(r.json()) == {"error"} for r in outcomes.values())
        report("authn_through_haproxy", {"nodes_answering": len(GROUPS["ams"]), "refusals": statuses})
    finally:
        admin.request("DELETE", f"/bindings/{binding}")
