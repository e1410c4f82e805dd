"""``ams admin bind-dn``: a binding from the shell, through the same rules as the API."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cryptography import x509

from ams_app.authn import requests
from ams_app.authn.manage import binding_view
from ams_app.authn.service import AuthnService
from ams_app.authn.x509 import subject_dn
from ams_app.backends.store import MetadataStore
from ams_app.errors import AmsError


def dn_of_certificate(path: str) -> str:
    """The subject DN of the first certificate of a PEM file, as AuthN matches it."""
    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except ValueError as exc:
        raise AmsError.invalid_data(f"{path}: not a PEM certificate ({exc})") from None
    return subject_dn(cert)


def set_hosts(store: MetadataStore, service_type: str, hosts: list[str]) -> str:
    """Make ``hosts`` the hosts of ``service_type`` (created when missing); what was done."""
    svc = AuthnService(store, None)
    st = store.get_service_type(name=service_type)
    if st is None:
        svc.create_service_type(requests.new_service_type({"name": service_type, "hosts": hosts, "type": "ams"}))
        return f"changed: service type {service_type!r} created with hosts {', '.join(hosts)}"
    if st.hosts == hosts:
        return f"unchanged: service type {service_type!r} has hosts {', '.join(hosts)}"
    svc.update_service_type(st, requests.service_type_update({"hosts": hosts}))
    return f"changed: service type {service_type!r} now has hosts {', '.join(hosts)} (had {', '.join(st.hosts)})"


def bind_dn(store: MetadataStore, args: argparse.Namespace) -> dict[str, Any]:
    """Bind ``--dn`` (or ``--cert``'s subject) on ``--host`` to ``--user``. The service type is
    created with that host when it does not exist, and given the host when it lacks it."""
    svc = AuthnService(store, None)
    user = store.get_user(name=args.user)
    if user is None:
        raise AmsError.not_found("User")
    dn = args.dn if args.dn is not None else dn_of_certificate(args.cert)
    st = store.get_service_type(name=args.service_type)
    if st is None:
        created = requests.new_service_type({"name": args.service_type, "hosts": [args.host], "type": "ams"})
        svc.create_service_type(created)
    elif args.host not in st.hosts:
        svc.update_service_type(st, requests.service_type_update({"hosts": [*st.hosts, args.host]}))
    st = svc.service_type(args.service_type)
    body = {"service_uuid": st.uuid, "host": args.host, "auth_identifier": dn, "unique_key": user.uuid}
    return binding_view(svc.create_binding(requests.new_binding(args.name, body)))
