"""AuthN's rules: a verified client certificate on a service host in, its AMS user's token out;
and the service types and bindings that say which certificate is whose (docs/authn.md).

Everything is read from the metadata store on each call, never cached: a token refreshed, a
user deleted or a binding removed through any node is what the next call sees."""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Sequence
from datetime import UTC, datetime

from cryptography import x509

from ams_app.authn.requests import (
    X509,
    NewBinding,
    NewServiceType,
    ServiceTypeUpdate,
    has_control,
    invalid,
)
from ams_app.authn.x509 import CertificateRefused, TrustStore, original_dn, subject_dn
from ams_app.backends.store import BindingWrite, InvalidPageToken, MetadataStore, Page
from ams_app.errors import AmsError
from ams_app.models import Binding, ServiceType
from ams_app.service.validation import valid_name

logger = logging.getLogger("ams.authn")

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

    def create_service_type(self, request: NewServiceType) -> ServiceType:
        st = ServiceType(
            uuid=str(uuidlib.uuid4()),
            name=request.name,
            hosts=request.hosts,
            auth_types=request.auth_types,
            type=request.type,
            created_on=now_text(),
        )
        if not self.store.create_service_type(st):
            raise AmsError.conflict("Service type")
        return st

    def update_service_type(self, st: ServiceType, request: ServiceTypeUpdate) -> ServiceType:
        if request.type is not None and request.type != st.type:
            raise invalid("Field 'type' cannot be changed")
        if request.name is not None:
            st.name = request.name
        if request.hosts is not None:
            st.hosts = request.hosts
        if request.auth_types is not None:
            st.auth_types = request.auth_types
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

    def create_binding(self, request: NewBinding) -> Binding:
        binding = Binding(
            uuid=str(uuidlib.uuid4()),
            name=request.name,
            service_uuid=request.service_uuid,
            host=request.host,
            auth_identifier=request.auth_identifier,
            unique_key=request.unique_key,
            auth_type=request.auth_type,
            created_on=now_text(),
        )
        self._written(self.store.create_binding(self._checked(binding)), binding)
        return binding

    def update_binding(self, binding: Binding, changes: dict[str, str]) -> Binding:
        """Apply ``changes`` (ams_app/authn/requests.py ``binding_changes``) to a binding found."""
        name = binding.name
        for key, value in changes.items():
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
