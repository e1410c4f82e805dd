"""Client certificates for ``ams authn``: their subject DN in the two spellings bindings use, and
their verification against the configured CAs (OpenSSL through pyOpenSSL)."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID
from OpenSSL import crypto

log = logging.getLogger("ams.authn")

Reason = Literal["untrusted", "expired", "not yet valid", "revoked", "invalid"]


class CertificateRefused(Exception):
    """A client certificate that does not pass: ``reason`` is one of "untrusted", "expired",
    "not yet valid", "revoked" or "invalid"; the message says what OpenSSL found (and names
    the certificate by its subject, never with its PEM)."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.message = message


# ---------------------------------------------------------------------- DN spellings ------------
#: Attribute names OpenSSL prints where cryptography would print the bare OID.
_OPENSSL_NAMES = {NameOID.EMAIL_ADDRESS: "emailAddress"}


def subject_dn(cert: x509.Certificate) -> str:
    """The subject in RFC 4514 form (most significant RDN last), with the attribute names of
    ``openssl x509 -subject -nameopt RFC2253`` (``emailAddress=``, not its OID)."""
    return cert.subject.rfc4514_string(_OPENSSL_NAMES)


#: The attributes original_dn keeps, in its order; True: only the last value counts.
_ORIGINAL_ORDER: tuple[tuple[x509.ObjectIdentifier, str, bool], ...] = (
    (NameOID.SERIAL_NUMBER, "SERIALNUMBER", True),
    (NameOID.COMMON_NAME, "CN", True),
    (NameOID.ORGANIZATIONAL_UNIT_NAME, "OU", False),
    (NameOID.ORGANIZATION_NAME, "O", False),
    (NameOID.POSTAL_CODE, "POSTALCODE", False),
    (NameOID.STREET_ADDRESS, "STREET", False),
    (NameOID.LOCALITY_NAME, "L", False),
    (NameOID.STATE_OR_PROVINCE_NAME, "ST", False),
    (NameOID.COUNTRY_NAME, "C", False),
)
_ALWAYS_ESCAPED = frozenset(',+"\\<>;')


def _escape(value: str) -> str:
    out = []
    last = len(value) - 1
    for index, char in enumerate(value):
        if char in _ALWAYS_ESCAPED or (char == " " and index in (0, last)) or (char == "#" and index == 0):
            out.append("\\")
        out.append(char)
    return "".join(out)


def original_dn(cert: x509.Certificate) -> str:
    """The subject as the original ARGO AuthN (written in Go) spells it, so that bindings made
    for that service keep matching. That service rebuilt the name from its well-known fields
    and printed it the way Go's ``pkix.Name.String()`` does, with e-mail and DC around it:

    1. emailAddress values, when there are any, come first as ``E=v1+E=v2,`` (certificate
       order, unescaped);
    2. then, joined with ``,`` and in this fixed order whatever the certificate's order:
       SERIALNUMBER, CN, OU, O, POSTALCODE, STREET, L, ST, C. Several values of one type make
       one ``+``-joined RDN in certificate order (``O=hosts+O=GermanGrid``), except CN and
       SERIALNUMBER, of which only the last (non-empty) value counts. Values are escaped the
       RFC 2253 way: ``, + " \\ < > ;`` always get a backslash, a space only at the start or
       end, ``#`` only at the start;
    3. DC values, when there are any, are appended as ``,DC=a+DC=b`` (certificate order,
       unescaped);
    4. every other attribute (UID, title, ...) is left out.

    ``/DC=org/DC=terena/DC=tcs/C=DE/O=hosts/O=GermanGrid/OU=DESY/CN=host/example.com`` is thus
    ``CN=host/example.com,OU=DESY,O=hosts+O=GermanGrid,C=DE,DC=org+DC=terena+DC=tcs``."""
    values: dict[x509.ObjectIdentifier, list[str]] = {}
    for attribute in cert.subject:  # in certificate order, multi-valued RDNs flattened
        if isinstance(attribute.value, str):
            values.setdefault(attribute.oid, []).append(attribute.value)
    rdns = []
    for oid, label, single in _ORIGINAL_ORDER:
        found = values.get(oid, [])
        if single:
            found = found[-1:] if found and found[-1] else []
        if found:
            rdns.append("+".join(f"{label}={_escape(value)}" for value in found))
    text = ",".join(rdns)
    emails = values.get(NameOID.EMAIL_ADDRESS)
    if emails:
        text = "E=" + "+E=".join(emails) + "," + text
    components = values.get(NameOID.DOMAIN_COMPONENT)
    if components:
        text += ",DC=" + "+DC=".join(components)
    return text


# ---------------------------------------------------------------------- verification ----------
#: OpenSSL's X509_V_ERR_* codes by the reason they are reported with; any other is "invalid".
_REASONS: dict[int, Reason] = {
    2: "untrusted",  # unable to get issuer certificate
    18: "untrusted",  # self-signed certificate
    19: "untrusted",  # self-signed certificate in chain
    20: "untrusted",  # unable to get local issuer certificate
    21: "untrusted",  # unable to verify the first certificate
    27: "untrusted",  # certificate not trusted
    28: "untrusted",  # certificate rejected
    29: "untrusted",  # subject issuer mismatch
    30: "untrusted",  # authority and subject key identifier mismatch
    31: "untrusted",  # authority and issuer serial number mismatch
    9: "not yet valid",  # certificate is not yet valid
    10: "expired",  # certificate has expired
    23: "revoked",  # certificate revoked
}

_CRL_NAME = re.compile(r"\.r\d+$|\.crl\.pem$")
_FileKey = tuple[int, int, int]  # mtime_ns, size, inode: a file changed when it changes
_SHA256 = hashes.SHA256()  # one CA once: by fingerprint


class TrustStore:
    """The CAs client certificates must chain to: those of the PEM bundle ``ca_file`` and/or of
    every ``*.pem`` file of ``ca_dir`` (the IGTF layout of /etc/grid-security/certificates:
    ``*.pem`` CA files, hash symlinks ``*.0`` to them, CRLs in ``*.r0``), each CA once. With
    ``check_crls``, the CRLs of ``ca_dir`` (``*.r0``, ``*.r1``, ... and ``*.crl.pem``) are
    loaded and the leaf is checked against them: it is then refused ("invalid") when its
    issuer has no CRL, or only an outdated one (fail closed).

    The files are read again when they change (their mtimes, sizes and inodes, looked at no
    more often than every ``check_interval`` seconds); a file that cannot be read or parsed
    keeps what it held before (a CA being rewritten is not lost meanwhile), or is left out.
    With no CA at all every certificate is refused as untrusted."""

    def __init__(
        self, ca_file: str = "", ca_dir: str = "", check_crls: bool = False, *, check_interval: float = 60.0
    ) -> None:
        if ca_file and not os.path.isfile(ca_file):
            raise FileNotFoundError(f"CA file {ca_file} does not exist")
        if ca_dir and not os.path.isdir(ca_dir):
            raise NotADirectoryError(f"CA directory {ca_dir} does not exist")
        self.ca_file = ca_file
        self.ca_dir = ca_dir
        self.check_crls = check_crls
        self.check_interval = check_interval
        self._seen: dict[str, _FileKey] = {}
        self._parsed: dict[str, tuple[_FileKey, list[x509.Certificate] | list[x509.CertificateRevocationList]]] = {}
        self._store = crypto.X509Store()
        self._ca_count = 0
        self._checked = 0.0
        self.reload()

    @property
    def ca_count(self) -> int:
        """How many distinct CAs the store holds."""
        return self._ca_count

    # ------------------------------------------------------------------ loading ---------------
    def _files(self) -> dict[str, _FileKey]:
        """The files to read (CAs and, with check_crls, CRLs) and their current keys."""
        paths = [self.ca_file] if self.ca_file else []
        if self.ca_dir:
            try:
                names = sorted(os.listdir(self.ca_dir))
            except OSError as error:
                log.warning("cannot list the CA directory %s: %s", self.ca_dir, error)
                names = []
            for name in names:
                is_crl = bool(_CRL_NAME.search(name))
                if (is_crl and self.check_crls) or (not is_crl and name.endswith(".pem")):
                    paths.append(os.path.join(self.ca_dir, name))
        files = {}
        for path in paths:
            try:
                st = os.stat(path)  # through symlinks
            except OSError:
                continue  # a dangling link, or gone meanwhile
            files[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return files

    def _is_crl_file(self, path: str) -> bool:
        return path != self.ca_file and bool(_CRL_NAME.search(os.path.basename(path)))

    @staticmethod
    def _parse(path: str, crl: bool) -> list[x509.Certificate] | list[x509.CertificateRevocationList]:
        with open(path, "rb") as handle:
            data = handle.read()
        if crl:
            if b"-----BEGIN" in data:
                return [x509.load_pem_x509_crl(data)]
            return [x509.load_der_x509_crl(data)]
        return x509.load_pem_x509_certificates(data)

    def reload(self) -> bool:
        """Read what changed on disk now; True when the store was rebuilt."""
        self._checked = time.monotonic()
        files = self._files()
        if files == self._seen:
            return False
        parsed: dict[str, tuple[_FileKey, list[x509.Certificate] | list[x509.CertificateRevocationList]]] = {}
        for path, key in files.items():
            previous = self._parsed.get(path)
            if previous is not None and previous[0] == key:
                parsed[path] = previous
                continue
            try:
                parsed[path] = (key, self._parse(path, self._is_crl_file(path)))
            except (OSError, ValueError) as error:
                log.warning("cannot load %s (%s): %s", path, type(error).__name__, error)
                if previous is not None:
                    parsed[path] = previous  # keep what it held; try again when it changes
        store = crypto.X509Store()
        cas: dict[bytes, x509.Certificate] = {}
        crls = 0
        for _key, items in parsed.values():
            for item in items:
                if isinstance(item, x509.Certificate):
                    cas.setdefault(item.fingerprint(_SHA256), item)
                else:
                    store.add_crl(item)
                    crls += 1
        for ca in cas.values():
            store.add_cert(crypto.X509.from_cryptography(ca))
        if self.check_crls:
            store.set_flags(crypto.X509StoreFlags.CRL_CHECK)
        self._store, self._ca_count = store, len(cas)
        self._seen, self._parsed = files, parsed
        log.info("trust store loaded: %d CAs, %d CRLs", len(cas), crls)
        return True

    def _reload_if_due(self) -> None:
        if time.monotonic() - self._checked >= self.check_interval:
            self.reload()

    # ------------------------------------------------------------------ verification ----------
    def verify(self, chain: Sequence[x509.Certificate]) -> x509.Certificate:
        """The leaf (``chain[0]``) when it chains to a CA of the store through the rest of
        ``chain`` (untrusted intermediates) and the store's own CAs, is within its validity
        dates (and, with check_crls, not revoked); else CertificateRefused. An empty chain is
        a ValueError: no certificate is for the caller to answer."""
        if not chain:
            raise ValueError("no certificate to verify")
        self._reload_if_due()
        leaf = chain[0]
        if not self._ca_count:
            raise CertificateRefused("untrusted", f"no trusted CA is configured (certificate {_name(leaf)})")
        try:
            context = crypto.X509StoreContext(
                self._store,
                crypto.X509.from_cryptography(leaf),
                [crypto.X509.from_cryptography(cert) for cert in chain[1:]],
            )
            context.verify_certificate()
        except crypto.X509StoreContextError as error:
            code, depth = [*error.errors, -1, -1][:2]
            reason = _REASONS.get(code, "invalid") if isinstance(code, int) else "invalid"
            which = _name(leaf) if depth == 0 else f"{_name(error.certificate)} (its issuer at depth {depth})"
            raise CertificateRefused(reason, f"{error}: {which}") from None
        except crypto.Error as error:  # OpenSSL could not even take it in
            raise CertificateRefused("invalid", f"unusable certificate {_name(leaf)}: {error}") from None
        return leaf


def _name(cert: x509.Certificate | crypto.X509) -> str:
    """A certificate's subject for messages; never its PEM."""
    try:
        if isinstance(cert, crypto.X509):
            cert = cert.to_cryptography()
        return subject_dn(cert) or "an empty subject"
    except ValueError:
        return "a certificate with an unreadable subject"
