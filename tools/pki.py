"""A small PKI for AuthN's tests and its demo (tools/authn_demo.py), built with ``cryptography``
(no network): CAs, intermediate CAs, server and client certificates with chosen subjects and
dates, CRLs, and the PEM files a server and a trust store read (a bundle, or a CA directory in
the IGTF layout). Never for production certificates."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import crypto

Subject = Sequence[tuple[x509.ObjectIdentifier, str]]


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Issued:
    """A certificate, its private key, and the certificates between it and its root (issuer
    first; empty for a root)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    parents: tuple[x509.Certificate, ...] = ()

    def cert_pem(self, with_chain: bool = False) -> bytes:
        certs = [self.cert, *(self.parents[:-1] if with_chain else ())]  # the root is not sent
        return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def write(self, directory: Path, stem: str, with_chain: bool = False) -> tuple[str, str]:
        """``<stem>.pem`` (the certificate, with its intermediates when asked) and
        ``<stem>.key``; their paths."""
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem(with_chain))
        key_path.write_bytes(self.key_pem())
        return str(cert_path), str(key_path)


def name(subject: Subject) -> x509.Name:
    """A name with one attribute per RDN, in certificate order (most significant first)."""
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in subject])


def _issue(
    subject: x509.Name,
    issuer: Issued | None,
    *,
    ca: bool,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    extensions: Iterable[x509.ExtensionType] = (),
) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or now() - dt.timedelta(hours=1)
    end = not_after or max(now(), start) + dt.timedelta(days=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer:
        ski = issuer.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    if ca:
        usage = x509.KeyUsage(False, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    cert = builder.sign(issuer.key if issuer else key, hashes.SHA256())
    parents = (issuer.cert, *issuer.parents) if issuer else ()
    return Issued(cert, key, parents)


def new_ca(common_name: str, issuer: Issued | None = None) -> Issued:
    """A root CA, or an intermediate one under ``issuer``."""
    return _issue(name([(NameOID.ORGANIZATION_NAME, "AMS tests"), (NameOID.COMMON_NAME, common_name)]), issuer, ca=True)


def server_cert(ca: Issued, *names: str) -> Issued:
    """A TLS server certificate for DNS names and IP addresses (``"127.0.0.1"``, ``"localhost"``)."""
    sans = [_general_name(item) for item in names]
    return _issue(
        name([(NameOID.COMMON_NAME, names[0])]),
        ca,
        ca=False,
        extensions=[x509.SubjectAlternativeName(sans), x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])],
    )


def service_cert(ca: Issued, common_name: str, *names: str) -> Issued:
    """A certificate for a service that is both a TLS server (at ``names``: DNS names and IP
    addresses) and a client known by its subject ``CN=common_name`` (a Kafka broker, which is the
    other brokers' and ZooKeeper's client; an AMS node, ZooKeeper's client)."""
    return _issue(
        name([(NameOID.COMMON_NAME, common_name)]),
        ca,
        ca=False,
        extensions=[
            x509.SubjectAlternativeName([_general_name(item) for item in names]),
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
        ],
    )


def _general_name(item: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(item))
    except ValueError:
        return x509.DNSName(item)


def client_cert(
    ca: Issued,
    subject: Subject,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> Issued:
    """A client certificate with ``subject`` ((OID, value) pairs in certificate order)."""
    return _issue(
        name(subject),
        ca,
        ca=False,
        not_before=not_before,
        not_after=not_after,
        extensions=[x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])],
    )


def crl(ca: Issued, revoked: Sequence[x509.Certificate] = (), *, next_update: dt.datetime | None = None) -> bytes:
    """A PEM CRL of ``ca`` that revokes ``revoked``."""
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca.cert.subject)
        .last_update(now() - dt.timedelta(hours=1))
        .next_update(next_update or now() + dt.timedelta(days=1))
    )
    for cert in revoked:
        entry = (
            x509.RevokedCertificateBuilder()
            .serial_number(cert.serial_number)
            .revocation_date(now() - dt.timedelta(minutes=30))
            .build()
        )
        builder = builder.add_revoked_certificate(entry)
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def subject_hash(cert: x509.Certificate) -> str:
    """OpenSSL's subject hash, the name of a CA's ``<hash>.0`` link and ``<hash>.r0`` CRL."""
    return f"{crypto.X509.from_cryptography(cert).subject_name_hash():08x}"


def write_bundle(path: Path, *cas: Issued) -> str:
    path.write_bytes(b"".join(ca.cert_pem() for ca in cas))
    return str(path)


def write_igtf_dir(directory: Path, cas: dict[str, Issued], crls: dict[str, bytes] | None = None) -> str:
    """The layout of /etc/grid-security/certificates: ``<name>.pem`` per CA, a ``<hash>.0``
    symlink to it, and ``<hash>.r0`` for the CRLs given by CA name."""
    directory.mkdir(parents=True, exist_ok=True)
    for ca_name, ca in cas.items():
        (directory / f"{ca_name}.pem").write_bytes(ca.cert_pem())
        (directory / f"{subject_hash(ca.cert)}.0").symlink_to(f"{ca_name}.pem")
        (directory / f"{ca_name}.info").write_text(f"alias = {ca_name}\n")
    for ca_name, pem in (crls or {}).items():
        (directory / f"{subject_hash(cas[ca_name].cert)}.r0").write_bytes(pem)
    return str(directory)
