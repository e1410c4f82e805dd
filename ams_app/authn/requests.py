"""AuthN's typed requests: the JSON bodies of the service type and binding routes, parsed at the
HTTP edge (ams_app/authn/manage.py, ams_app/authn/admin.py) into values AuthnService takes
(docs/authn.md). A parser checks shape only (types, required fields, names and hosts that are
well formed, no control characters) and looks nothing up; what a body names is looked up by the
service."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ams_app.errors import AmsError
from ams_app.service.validation import valid_name

#: The one authentication type this component implements.
X509 = "x509"
#: The service type kinds it hands tokens for: AMS itself.
SERVICE_KINDS = ("ams",)
#: Longest DN accepted in a binding (a certificate's subject is far shorter in practice).
MAX_DN_LENGTH = 1024
#: Longest host name (RFC 1035's 253, plus room for a port).
MAX_HOST_LENGTH = 260
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+(:[0-9]{1,5})?")


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


@dataclass(frozen=True)
class NewServiceType:
    name: str
    hosts: list[str]
    auth_types: list[str]
    type: str


def new_service_type(raw: Any) -> NewServiceType:
    body = _object(raw, "service type")
    name = _text(body, "name", required=True) or ""
    if not valid_name(name):
        raise AmsError.invalid_name("service type")
    kind = _text(body, "type", required=False) or "ams"
    if kind not in SERVICE_KINDS:
        raise invalid(f"Field 'type': one of {', '.join(SERVICE_KINDS)}")
    return NewServiceType(name, _hosts(body, required=True) or [], _auth_types(body) or [X509], kind)


@dataclass(frozen=True)
class ServiceTypeUpdate:
    """What changes; None keeps a field. ``type`` is only compared (it cannot change)."""

    name: str | None = None
    hosts: list[str] | None = None
    auth_types: list[str] | None = None
    type: str | None = None


def service_type_update(raw: Any) -> ServiceTypeUpdate:
    body = _object(raw, "service type")
    name = _text(body, "name", required=False)
    if name is not None and not valid_name(name):
        raise AmsError.invalid_name("service type")
    hosts = _hosts(body, required=False)
    auth_types = _auth_types(body)
    return ServiceTypeUpdate(name, hosts, auth_types, _text(body, "type", required=False))


@dataclass(frozen=True)
class NewBinding:
    name: str
    service_uuid: str
    host: str
    auth_identifier: str  # the DN
    unique_key: str  # the AMS user's uuid
    auth_type: str


def new_binding(name: str, raw: Any) -> NewBinding:
    """A binding to create under ``name`` (the URL's)."""
    if not valid_name(name):
        raise AmsError.invalid_name("binding")
    body = _object(raw, "binding")
    auth_type = _text(body, "auth_type", required=False) or X509
    if auth_type != X509:
        raise invalid(f"Field 'auth_type': only {X509!r} is supported")
    return NewBinding(
        name=name,
        service_uuid=_text(body, "service_uuid", required=True) or "",
        host=_host(_text(body, "host", required=True) or ""),
        auth_identifier=_text(body, "auth_identifier", required=True, limit=MAX_DN_LENGTH) or "",
        unique_key=_text(body, "unique_key", required=True) or "",
        auth_type=auth_type,
    )


def binding_changes(raw: Any) -> dict[str, str]:
    """A binding's update: the fields it changes (name, service_uuid, host, auth_identifier,
    unique_key), none of them empty."""
    body = _object(raw, "binding")
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
        if value is not None and not value:
            raise invalid(f"Field {key!r} must not be empty")
    return {key: value for key, value in changes.items() if value is not None}
