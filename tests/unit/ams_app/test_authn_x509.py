"""ams_app.authn.x509: the two DN spellings of a client certificate, and TrustStore's verdicts
(CA bundle, IGTF directory, intermediates, dates, CRLs, reloads)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from ams_app.authn.x509 import CertificateRefused, TrustStore, original_dn, subject_dn
from tests.authn_pki import (
    Issued,
    Subject,
    client_cert,
    crl,
    new_ca,
    now,
    subject_hash,
    write_bundle,
    write_igtf_dir,
)

DC, C, ORG, OU, CN = (
    NameOID.DOMAIN_COMPONENT,
    NameOID.COUNTRY_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.COMMON_NAME,
)
L, ST, UID, EMAIL = NameOID.LOCALITY_NAME, NameOID.STATE_OR_PROVINCE_NAME, NameOID.USER_ID, NameOID.EMAIL_ADDRESS
USER: Subject = [(ORG, "AMS tests"), (CN, "user")]


@pytest.fixture(scope="module")
def ca() -> Issued:
    return new_ca("Test CA")


@pytest.fixture(scope="module")
def other_ca() -> Issued:
    return new_ca("Unrelated CA")


@pytest.fixture(scope="module")
def store(ca: Issued, tmp_path_factory: pytest.TempPathFactory) -> TrustStore:
    return TrustStore(write_bundle(tmp_path_factory.mktemp("bundle") / "ca.pem", ca))


def refusal(store: TrustStore, *chain: x509.Certificate) -> CertificateRefused:
    with pytest.raises(CertificateRefused) as refused:
        store.verify(chain)
    assert "BEGIN" not in refused.value.message
    return refused.value


# ---------------------------------------------------------------------- DN spellings ------------
def dns(ca: Issued, subject: Subject) -> tuple[str, str]:
    cert = client_cert(ca, subject).cert
    return subject_dn(cert), original_dn(cert)


def test_grid_host_subject(ca: Issued) -> None:
    subject: Subject = [
        (DC, "org"),
        (DC, "terena"),
        (DC, "tcs"),
        (C, "DE"),
        (ORG, "hosts"),
        (ORG, "GermanGrid"),
        (OU, "DESY"),
        (CN, "host/example.com"),
    ]
    rfc, original = dns(ca, subject)
    assert rfc == "CN=host/example.com,OU=DESY,O=GermanGrid,O=hosts,C=DE,DC=tcs,DC=terena,DC=org"
    assert original == "CN=host/example.com,OU=DESY,O=hosts+O=GermanGrid,C=DE,DC=org+DC=terena+DC=tcs"


def test_fixed_order_last_cn_email_first_and_dropped_attributes(ca: Issued) -> None:
    subject: Subject = [
        (CN, "first"),
        (L, "Athens, GR"),
        (C, "GR"),
        (ORG, "A+B"),
        (UID, "u123"),
        (CN, "second"),
        (EMAIL, "a@b.c"),
    ]
    rfc, original = dns(ca, subject)
    assert original == r"E=a@b.c,CN=second,O=A\+B,L=Athens\, GR,C=GR"
    assert rfc == r"emailAddress=a@b.c,CN=second,UID=u123,O=A\+B,C=GR,L=Athens\, GR,CN=first"


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ("Doe, John", r"Doe\, John"),
        ('say "hi" <now>; a\\b', r"say \"hi\" \<now\>\; a\\b"),
        (" padded ", r"\ padded\ "),
        ("in ner", "in ner"),
        ("#first", r"\#first"),
        ("not#first", "not#first"),
        ("Δοκιμή Χρήστης", "Δοκιμή Χρήστης"),
    ],
)
def test_escaping(ca: Issued, value: str, escaped: str) -> None:
    assert dns(ca, [(OU, value), (CN, "x")])[1] == f"CN=x,OU={escaped}"


def test_unicode_cn(ca: Issued) -> None:
    rfc, original = dns(ca, [(C, "GR"), (CN, "Γιώργος Παπαδόπουλος")])
    assert original == "CN=Γιώργος Παπαδόπουλος,C=GR"
    assert rfc == original


def test_all_kept_types_in_order_several_emails_and_dc_unescaped(ca: Issued) -> None:
    subject: Subject = [
        (DC, "a,b"),
        (C, "GR"),
        (ST, "Attica"),
        (L, "Athens"),
        (NameOID.STREET_ADDRESS, "Main 1"),
        (NameOID.POSTAL_CODE, "11111"),
        (ORG, "Org"),
        (OU, "u1"),
        (OU, "u2"),
        (NameOID.TITLE, "Dr"),
        (CN, "name"),
        (NameOID.SERIAL_NUMBER, "1"),
        (NameOID.SERIAL_NUMBER, "2"),
        (EMAIL, "x@y.z"),
        (EMAIL, "p+q@y.z"),
    ]
    assert dns(ca, subject)[1] == (
        "E=x@y.z+E=p+q@y.z,SERIALNUMBER=2,CN=name,OU=u1+OU=u2,O=Org,POSTALCODE=11111,STREET=Main 1,"
        "L=Athens,ST=Attica,C=GR,DC=a,b"
    )


def test_only_dropped_attributes_and_dc(ca: Issued) -> None:
    assert dns(ca, [(DC, "org"), (UID, "u1"), (CN, "c")])[1] == "CN=c,DC=org"
    assert dns(ca, [(UID, "u1")])[1] == ""


# ---------------------------------------------------------------------- TrustStore ------------
def test_good_leaf(store: TrustStore, ca: Issued) -> None:
    leaf = client_cert(ca, USER).cert
    assert store.verify([leaf]) is leaf
    assert store.ca_count == 1


def test_expired(store: TrustStore, ca: Issued) -> None:
    old = client_cert(ca, USER, not_before=now() - dt.timedelta(days=10), not_after=now() - dt.timedelta(days=1))
    refused = refusal(store, old.cert)
    assert refused.reason == "expired"
    assert "CN=user" in refused.message


def test_not_yet_valid(store: TrustStore, ca: Issued) -> None:
    early = client_cert(ca, USER, not_before=now() + dt.timedelta(days=1), not_after=now() + dt.timedelta(days=10))
    assert refusal(store, early.cert).reason == "not yet valid"


def test_other_ca_and_self_signed_are_untrusted(store: TrustStore, other_ca: Issued) -> None:
    assert refusal(store, client_cert(other_ca, USER).cert).reason == "untrusted"
    assert refusal(store, other_ca.cert).reason == "untrusted"


def test_intermediate_sent_or_not(store: TrustStore, ca: Issued) -> None:
    sub = new_ca("Sub CA", ca)
    leaf = client_cert(sub, USER).cert
    assert store.verify([leaf, sub.cert]) is leaf
    assert refusal(store, leaf).reason == "untrusted"


def test_intermediate_from_the_store(ca: Issued, tmp_path: Path) -> None:
    sub = new_ca("Sub CA", ca)
    store = TrustStore(write_bundle(tmp_path / "cas.pem", ca, sub))
    leaf = client_cert(sub, USER).cert
    assert store.verify([leaf]) is leaf


def test_empty_chain_and_empty_store(store: TrustStore, ca: Issued) -> None:
    with pytest.raises(ValueError, match="no certificate"):
        store.verify([])
    assert refusal(TrustStore(), client_cert(ca, USER).cert).reason == "untrusted"


def test_missing_paths_are_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        TrustStore(str(tmp_path / "nope.pem"))
    with pytest.raises(NotADirectoryError):
        TrustStore(ca_dir=str(tmp_path / "nope"))


def test_igtf_directory_loads_each_ca_once(ca: Issued, other_ca: Issued, tmp_path: Path) -> None:
    directory = write_igtf_dir(tmp_path / "certificates", {"TestCA": ca, "OtherCA": other_ca})
    (tmp_path / "certificates" / "TestCA-copy.pem").symlink_to("TestCA.pem")
    (tmp_path / "certificates" / "broken.pem").write_text("not a certificate")
    bundle = write_bundle(tmp_path / "bundle.pem", ca)
    store = TrustStore(bundle, directory)
    assert store.ca_count == 2
    for issuer in (ca, other_ca):
        leaf = client_cert(issuer, USER).cert
        assert store.verify([leaf]) is leaf
    assert refusal(store, client_cert(new_ca("Third CA"), USER).cert).reason == "untrusted"


def test_crl_revocation(ca: Issued, other_ca: Issued, tmp_path: Path) -> None:
    revoked, fine = client_cert(ca, USER), client_cert(ca, USER)
    other_revoked = client_cert(other_ca, USER)
    third = new_ca("Third CA")
    directory = tmp_path / "certificates"
    write_igtf_dir(
        directory, {"TestCA": ca, "OtherCA": other_ca, "ThirdCA": third}, {"TestCA": crl(ca, [revoked.cert])}
    )
    (directory / "other.crl.pem").write_bytes(crl(other_ca, [other_revoked.cert]))
    assert (directory / f"{subject_hash(ca.cert)}.r0").is_file()

    without = TrustStore(ca_dir=str(directory))
    assert without.verify([revoked.cert]) is revoked.cert

    store = TrustStore(ca_dir=str(directory), check_crls=True)
    assert store.verify([fine.cert]) is fine.cert
    assert refusal(store, revoked.cert).reason == "revoked"
    assert refusal(store, other_revoked.cert).reason == "revoked"
    # a CA without a CRL: fail closed
    assert refusal(store, client_cert(third, USER).cert).reason == "invalid"


def test_outdated_crl_refuses(ca: Issued, tmp_path: Path) -> None:
    outdated = crl(ca, next_update=now() - dt.timedelta(minutes=1))
    directory = write_igtf_dir(tmp_path / "certificates", {"TestCA": ca}, {"TestCA": outdated})
    refused = refusal(TrustStore(ca_dir=directory, check_crls=True), client_cert(ca, USER).cert)
    assert refused.reason == "invalid"
    assert "CRL" in refused.message


def replace_file(path: Path, data: bytes) -> None:
    """As packages and fetch-crl do: a new file renamed over the old one."""
    fresh = path.with_suffix(".tmp")
    fresh.write_bytes(data)
    os.replace(fresh, path)


def test_changed_ca_file_is_picked_up(ca: Issued, other_ca: Issued, tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    store = TrustStore(write_bundle(path, ca))
    leaf = client_cert(other_ca, USER).cert
    assert refusal(store, leaf).reason == "untrusted"
    replace_file(path, other_ca.cert_pem())
    assert refusal(store, leaf).reason == "untrusted"  # not looked at again before check_interval
    assert store.reload() is True
    assert store.verify([leaf]) is leaf
    assert store.reload() is False  # nothing changed since


def test_changed_directory_is_picked_up_when_due(ca: Issued, other_ca: Issued, tmp_path: Path) -> None:
    directory = tmp_path / "certificates"
    store = TrustStore(ca_dir=write_igtf_dir(directory, {"TestCA": ca}), check_interval=0)
    leaf = client_cert(other_ca, USER).cert
    assert refusal(store, leaf).reason == "untrusted"
    replace_file(directory / "OtherCA.pem", other_ca.cert_pem())
    assert store.verify([leaf]) is leaf
    (directory / "OtherCA.pem").unlink()
    assert refusal(store, leaf).reason == "untrusted"


def test_unreadable_update_keeps_the_previous_ca(ca: Issued, tmp_path: Path) -> None:
    path = tmp_path / "ca.pem"
    store = TrustStore(write_bundle(path, ca), check_interval=0)
    replace_file(path, b"-----BEGIN CERTIFICATE-----\ntruncated")
    leaf = client_cert(ca, USER).cert
    assert store.verify([leaf]) is leaf
