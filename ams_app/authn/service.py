"""AuthN's rules: a verified client certificate on a service host in, its AMS user's token out;
and the service types and bindings that say which certificate is whose (docs/authn.md).

Everything is read from the metadata store on each call, never cached: a token refreshed, a
user deleted or a binding removed through any node is what the next call sees."""

from __future__ import annotations

import logging
import re
import uuid as uuidlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from cryptography import x509

from ams_app.authn.x509 import CertificateRefused, TrustStore, original_dn, subject_dn
from ams_app.backends.store import BindingWrite, InvalidPageToken, MetadataStore, Page
from ams_app.errors import AmsError
from ams_app.models import Binding, ServiceType
from ams_app.service.validation import valid_name

logger = logging.getLogger("ams.authn")

#: The one authentication type this component implements.
X509 = "x509"
#: The service type kinds it hands tokens for: AMS itself.
SERVICE_KINDS = ("ams",)
#: Longest DN accepted in a binding (a certificate's subject is far shorter in practice).
MAX_DN_LENGTH = 1024
#: Longest host name (RFC 1035's 253, plus room for a port).
MAX_HOST_LENGTH = 260
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+(:[0-9]{1,5})?")
_MAX_PAGE_SIZE = 1000

_REFUSED_MESSAGES = {
    "untrusted": "The client certificate is not issued by a trusted certificate authority",
    "expired": "The client certificate has expired",
    "not yet valid": "The client certificate is not valid yet",
    "revoked": "The client certificate has been revoked",
    "invalid": "The client certificate is invalid",
}


def now_text() -> str:
    """UTC now, as AuthN's timestamps are written: YYYY-MM-DDTHH:MM:SSZ."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def unauthorized(message: str) -> AmsError:
    return AmsError(401, message, "UNAUTHORIZED")


def invalid(message: str) -> AmsError:
    return AmsError(400, message, "INVALID_ARGUMENT")


def has_control(value: str) -> bool:
    """A control character (C0 or DEL): no name, host or DN of a binding holds one."""
    return any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid(f"The {what} must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, *, required: bool, limit: int = 200) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise invalid(f"Field {key!r} is required")
        return None
    if not isinstance(value, str):
        raise invalid(f"Field {key!r} must be a string")
    value = value.strip()
    if required and not value:
        raise invalid(f"Field {key!r} must not be empty")
    if len(value) > limit:
        raise invalid(f"Field {key!r} is longer than {limit} characters")
    if has_control(value):
        raise invalid(f"Field {key!r} holds a control character")
    return value


def _host(value: str) -> str:
    if len(value) > MAX_HOST_LENGTH or not _HOST_RE.fullmatch(value):
        raise invalid(f"Invalid host name {value!r}")
    return value


def _hosts(body: dict[str, Any], *, required: bool) -> list[str] | None:
    value = body.get("hosts")
    if value is None:
        if required:
            raise invalid("Field 'hosts' is required")
        return None
    if not isinstance(value, list) or not value or not all(isinstance(h, str) for h in value):
        raise invalid("Field 'hosts' must be a non-empty list of host names")
    hosts = [_host(h.strip()) for h in value]
    if len(set(hosts)) != len(hosts):
        raise invalid("Field 'hosts' names a host twice")
    return hosts


def _auth_types(body: dict[str, Any]) -> list[str] | None:
    value = body.get("auth_types")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise invalid("Field 'auth_types' must be a list of strings")
    unknown = [t for t in value if t != X509]
    if unknown or not value:
        raise invalid(f"Field 'auth_types': only {X509!r} is supported")
    return [X509]


class AuthnService:
    """The rules of AuthN over a metadata store; the HTTP layer only parses and renders."""

    def __init__(self, store: MetadataStore, trust: TrustStore | None, service_token: str = "") -> None:
        self.store = store
        self.trust = trust
        self.service_token = service_token

    # ------------------------------------------------------------------ callers -----------
    def is_service_admin(self, token: str) -> bool | None:
        """True for a service admin's token, False for another user's, None for no user's."""
        if not token:
            return None
        if self.service_token and token == self.service_token:
            return True
        user = self.store.get_user(token=token)
        if user is None:
            return None
        return "service_admin" in user.service_roles

    # ------------------------------------------------------------------ the x509 call -----
    def token_for(self, chain: Sequence[x509.Certificate], service_type: str, host: str) -> str:
        """The token of the AMS user whose binding matches the certificate's DN on ``host``."""
        if not chain:
            raise unauthorized("No client certificate was presented")
        if self.trust is None:
            raise unauthorized(_REFUSED_MESSAGES["untrusted"])
        try:
            leaf = self.trust.verify(chain)
        except CertificateRefused as refused:
            logger.info("certificate refused: %s (%s)", refused.reason, _safe_dn(chain[0]))
            raise unauthorized(_REFUSED_MESSAGES.get(refused.reason, _REFUSED_MESSAGES["invalid"])) from None
        st = self._service_type(service_type)
        if X509 not in st.auth_types:
            raise invalid(f"Service type {st.name!r} does not accept {X509} authentication")
        if host not in st.hosts:
            raise AmsError.not_found("Host")
        names = _dn_spellings(leaf)
        lookup = [n for n in names if not has_control(n)]  # a subject no binding can match
        binding = self.store.find_binding(st.uuid, host, lookup, X509) if lookup else None
        if binding is None:
            raise AmsError(404, f"No binding for DN {names[0]!r} on host {host!r}", "NOT_FOUND")
        user = self.store.get_user(uuid=binding.unique_key)
        if user is None:
            raise AmsError(404, f"The AMS user of binding {binding.name!r} doesn't exist any more", "NOT_FOUND")
        try:
            self.store.record_binding_use(binding.uuid, now_text())
        except Exception:  # the token is what matters; last_auth is a courtesy
            logger.warning("could not record the use of binding %s", binding.name, exc_info=True)
        logger.info("token handed out: binding %s, user %s, host %s", binding.name, user.name, host)
        return user.token

    # ------------------------------------------------------------------ service types -----
    def _service_type(self, name: str) -> ServiceType:
        st = self.store.get_service_type(name=name) if valid_name(name) else None
        if st is None:
            raise AmsError.not_found("Service type")
        return st

    def service_type(self, name: str) -> ServiceType:
        return self._service_type(name)

    def service_types(self) -> list[ServiceType]:
        return self.store.list_service_types()

    def create_service_type(self, body: Any) -> ServiceType:
        body = _object(body, "service type")
        name = _text(body, "name", required=True) or ""
        if not valid_name(name):
            raise AmsError.invalid_name("service type")
        kind = _text(body, "type", required=False) or "ams"
        if kind not in SERVICE_KINDS:
            raise invalid(f"Field 'type': one of {', '.join(SERVICE_KINDS)}")
        st = ServiceType(
            uuid=str(uuidlib.uuid4()),
            name=name,
            hosts=_hosts(body, required=True) or [],
            auth_types=_auth_types(body) or [X509],
            type=kind,
            created_on=now_text(),
        )
        if not self.store.create_service_type(st):
            raise AmsError.conflict("Service type")
        return st

    def update_service_type(self, name: str, body: Any) -> ServiceType:
        st = self._service_type(name)
        body = _object(body, "service type")
        new_name = _text(body, "name", required=False)
        if new_name is not None:
            if not valid_name(new_name):
                raise AmsError.invalid_name("service type")
            st.name = new_name
        hosts = _hosts(body, required=False)
        if hosts is not None:
            st.hosts = hosts
        auth_types = _auth_types(body)
        if auth_types is not None:
            st.auth_types = auth_types
        kind = _text(body, "type", required=False)
        if kind is not None and kind != st.type:
            raise invalid("Field 'type' cannot be changed")
        st.updated_on = now_text()
        if not self.store.update_service_type(st):
            raise AmsError.conflict("Service type")
        return st

    def delete_service_type(self, name: str) -> None:
        st = self._service_type(name)
        if not self.store.delete_service_type(st.uuid):
            raise AmsError.not_found("Service type")

    # ------------------------------------------------------------------ bindings ----------
    def binding(self, name: str) -> Binding:
        found = self.store.get_binding(name) if valid_name(name) else None
        if found is None:
            raise AmsError.not_found("Binding")
        return found

    def bindings(
        self, page_size: str | None, page_token: str | None, service_type: str | None = None, host: str | None = None
    ) -> Page[Binding]:
        size = 0
        if page_size not in (None, ""):
            try:
                size = int(str(page_size))
            except ValueError as exc:
                raise invalid("Invalid page size") from exc
            if size < 0:
                raise invalid("Invalid page size")
        service_uuid = None
        if service_type is not None:
            st = self._service_type(service_type)
            if host is not None and host not in st.hosts:
                raise AmsError.not_found("Host")
            service_uuid = st.uuid
        try:
            return self.store.list_bindings(service_uuid, host, min(size, _MAX_PAGE_SIZE), page_token or "")
        except InvalidPageToken as exc:
            raise invalid("Invalid page token") from exc

    def binding_of_dn(self, service_type: str, host: str, dn: str) -> Binding:
        st = self._service_type(service_type)
        if host not in st.hosts:
            raise AmsError.not_found("Host")
        # a DN no binding can hold (bodies refuse control characters) is not looked up
        found = None if has_control(dn) else self.store.find_binding(st.uuid, host, [dn], X509)
        if found is None:
            raise AmsError.not_found("Binding")
        return found

    def _checked(self, binding: Binding) -> Binding:
        """The references of a binding exist: its service type, the host in it, its AMS user."""
        st = self.store.get_service_type(uuid=binding.service_uuid)
        if st is None:
            raise AmsError.not_found("Service type")
        if binding.host not in st.hosts:
            raise AmsError.not_found("Host")
        if binding.auth_type not in st.auth_types:
            raise invalid(f"Service type {st.name!r} does not accept {binding.auth_type} authentication")
        if self.store.get_user(uuid=binding.unique_key) is None:
            raise AmsError.not_found("User")
        return binding

    def create_binding(self, name: str, body: Any) -> Binding:
        if not valid_name(name):
            raise AmsError.invalid_name("binding")
        body = _object(body, "binding")
        auth_type = _text(body, "auth_type", required=False) or X509
        if auth_type != X509:
            raise invalid(f"Field 'auth_type': only {X509!r} is supported")
        binding = Binding(
            uuid=str(uuidlib.uuid4()),
            name=name,
            service_uuid=_text(body, "service_uuid", required=True) or "",
            host=_host(_text(body, "host", required=True) or ""),
            auth_identifier=_text(body, "auth_identifier", required=True, limit=MAX_DN_LENGTH) or "",
            unique_key=_text(body, "unique_key", required=True) or "",
            auth_type=auth_type,
            created_on=now_text(),
        )
        self._written(self.store.create_binding(self._checked(binding)), binding)
        return binding

    def update_binding(self, name: str, body: Any) -> Binding:
        binding = self.binding(name)
        body = _object(body, "binding")
        new_name = _text(body, "name", required=False)
        if new_name is not None and not valid_name(new_name):
            raise AmsError.invalid_name("binding")
        auth_type = _text(body, "auth_type", required=False)
        if auth_type is not None and auth_type != X509:
            raise invalid(f"Field 'auth_type': only {X509!r} is supported")
        host = _text(body, "host", required=False)
        changes = {
            "name": new_name,
            "service_uuid": _text(body, "service_uuid", required=False),
            "host": _host(host) if host is not None else None,
            "auth_identifier": _text(body, "auth_identifier", required=False, limit=MAX_DN_LENGTH),
            "unique_key": _text(body, "unique_key", required=False),
        }
        for key, value in changes.items():
            if value is not None:
                if not value:
                    raise invalid(f"Field {key!r} must not be empty")
                setattr(binding, key, value)
        binding.updated_on = now_text()
        self._written(self.store.update_binding(name, self._checked(binding)), binding)
        return binding

    def delete_binding(self, name: str) -> None:
        if not valid_name(name) or not self.store.delete_binding(name):
            raise AmsError.not_found("Binding")

    @staticmethod
    def _written(outcome: BindingWrite, binding: Binding) -> None:
        if outcome == "name":
            raise AmsError.conflict("Binding")
        if outcome == "auth_identifier":
            raise AmsError.generic_conflict(
                f"The DN {binding.auth_identifier!r} is already bound on host {binding.host!r}"
            )
        if outcome == "missing":
            raise AmsError.not_found("Binding")


def _dn_spellings(cert: x509.Certificate) -> list[str]:
    """The subject DN as RFC 4514 writes it, then as the original AuthN wrote it (its bindings
    keep matching); one entry when both agree."""
    names = [subject_dn(cert)]
    with_original = original_dn(cert)
    if with_original not in names:
        names.append(with_original)
    return names


def _safe_dn(cert: x509.Certificate) -> str:
    try:
        return subject_dn(cert)[:300]
    except Exception:  # a subject that does not even print
        return "<unreadable subject>"
