"""roles/internal_pki for real, on this machine: the CA and each host's certificates made on the
controller by ansible-playbook, what they hold, and a second run that changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.static.test_roles import ROOT, _tool

INVENTORY = {
    "all": {
        "children": {
            "zookeeper": {"hosts": {"kafka1": {"ansible_host": "10.0.0.21"}}},
            "kafka": {"hosts": {"kafka1": {}}},
            "ams": {"hosts": {"ams1": {"ansible_host": "ams1.example.org"}}},
            "haproxy": {"hosts": {"lb1": {}}},
        }
    }
}


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    inventory = tmp_path / "hosts.json"
    inventory.write_text(json.dumps(INVENTORY))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOCALHOST_WARNING": "false",
    }
    argv = [
        _tool("ansible-playbook"),
        "-i",
        str(inventory),
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-e",
        "internal_tls_enabled=true",
        "-e",
        f"internal_pki_dir={tmp_path / 'pki'}",
        str(ROOT / "playbooks" / "internal_pki.yml"),
    ]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)


def _changed(done: subprocess.CompletedProcess[str]) -> dict[str, int]:
    return {host: stats["changed"] for host, stats in json.loads(done.stdout)["stats"].items()}


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("pki")
    first = _run(tmp)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    return tmp / "pki", _run(tmp)


def test_each_host_gets_one_certificate_per_identity(issued: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    pki, _ = issued
    hosts = pki / "hosts"
    assert sorted(p.name for p in (hosts / "kafka1").glob("*.pem")) == ["kafka.pem", "zookeeper.pem"]
    assert sorted(p.name for p in (hosts / "ams1").glob("*.pem")) == ["ams.pem"]
    assert not list((hosts / "lb1").glob("*.pem")), "haproxy's group has no identity"


def test_certificates_name_their_identity_and_host(issued: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    pki, _ = issued
    ca = _cert(pki / "ca.pem")
    for host, identity, names in (
        ("kafka1", "kafka", [x509.DNSName("kafka1"), x509.IPAddress(__import__("ipaddress").ip_address("10.0.0.21"))]),
        ("ams1", "ams", [x509.DNSName("ams1"), x509.DNSName("ams1.example.org")]),
    ):
        cert = _cert(pki / "hosts" / host / f"{identity}.pem")
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == identity
        assert cert.issuer == ca.subject
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert list(sans) == names
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_keys_are_private_and_a_second_run_changes_nothing(
    issued: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    pki, again = issued
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr[-4000:]
    assert set(_changed(again).values()) == {0}, _changed(again)
    for key in [pki / "ca.key", *pki.glob("hosts/*/*.key")]:
        assert key.stat().st_mode & 0o077 == 0, key
    for key in pki.glob("hosts/*/*.key"):  # PKCS#8: what ZooKeeper's and Kafka's PEM key stores read
        assert key.read_text().startswith("-----BEGIN PRIVATE KEY-----"), key
