"""Tokens, the role names, and the caller's effective roles."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field

from ams_app.models import User

SERVICE_ADMIN = "service_admin"
PROJECT_ADMIN = "project_admin"
PUBLISHER = "publisher"
CONSUMER = "consumer"
PUSH_WORKER = "push_worker"
ADMIN_VIEWER = "admin_viewer"

METRICS_VIEWER = "metrics_viewer"
REGISTER_ADMIN = "register_admin"
ARGO_API_AUTHN = "argo_api_authn"

#: Role names that users may be given (create/update reject anything else). Which roles may call
#: which route is declared with each route (ams_app/api/<resource>.py, ``add_route``).
VALID_ROLES: frozenset[str] = frozenset(
    {
        SERVICE_ADMIN,
        PROJECT_ADMIN,
        PUBLISHER,
        CONSUMER,
        PUSH_WORKER,
        ADMIN_VIEWER,
        METRICS_VIEWER,
        REGISTER_ADMIN,
        ARGO_API_AUTHN,
    }
)


def new_token() -> str:
    """64 lower-case hex characters: SHA-256 of 32 random bytes, as the original."""
    return hashlib.sha256(secrets.token_bytes(32)).hexdigest()


@dataclass
class Caller:
    """Who is calling: a user, or the configured service token (user is None)."""

    user: User | None
    roles: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_service_token(self) -> bool:
        return self.user is None

    @property
    def uuid(self) -> str:
        return self.user.uuid if self.user else ""

    def has(self, role: str) -> bool:
        return role in self.roles

    @property
    def is_service_admin(self) -> bool:
        return SERVICE_ADMIN in self.roles


SERVICE_CALLER = Caller(None, frozenset({SERVICE_ADMIN}))


def effective_roles(user: User, project_uuid: str | None) -> frozenset[str]:
    """Roles of the membership in the URL's project plus every service role."""
    roles = set(user.service_roles)
    if project_uuid is not None:
        membership = user.membership(project_uuid)
        if membership is not None:
            roles.update(membership.roles)
    return frozenset(roles)


def allowed(roles: frozenset[str], caller: Caller) -> bool:
    """May ``caller`` call a route that ``roles`` may call? The service token may call any."""
    if caller.is_service_token:
        return True
    return bool(roles & caller.roles)
