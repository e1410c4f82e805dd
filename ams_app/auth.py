"""Tokens, the route -> roles table and the caller's effective roles."""

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

_SA, _PA, _PUB, _CON, _PW = SERVICE_ADMIN, PROJECT_ADMIN, PUBLISHER, CONSUMER, PUSH_WORKER

#: Who may call which route (each operation's roles are also in ams_app/openapi.yaml). A route
#: that goes through ``pipeline.authenticate`` but is missing here is refused to every user; only
#: the configured service token passes it. Routes that take any valid token (``users:profile``,
#: ``users:usageReport``) or none (``ams:healthStatus``, ``version:list``) do not go through it.
ROUTE_ROLES: dict[str, frozenset[str]] = {
    name: frozenset(roles)
    for name, roles in {
        "ams:metrics": (_SA, "metrics_viewer"),
        "ams:vaMetrics": (_SA, "metrics_viewer"),
        "users:byToken": (_SA, _PW),
        "users:byUUID": (_SA, "argo_api_authn"),
        "users:list": (_SA,),
        "users:show": (_SA,),
        "users:refreshToken": (_SA,),
        "users:create": (_SA,),
        "users:update": (_SA,),
        "users:delete": (_SA,),
        "registrations:newUser": (_SA, "register_admin"),
        "registrations:acceptNewUser": (_SA,),
        "registrations:declineNewUser": (_SA,),
        "registrations:delete": (_SA,),
        "registrations:show": (_SA,),
        "registrations:list": (_SA,),
        "projects:list": (_SA,),
        "projects:metrics": (_SA, _PA),
        "projects:addUser": (_SA, _PA),
        "projects:removeUser": (_SA, _PA),
        "projects:showUser": (_SA, _PA),
        "projects:createUser": (_SA, _PA),
        "projects:updateUser": (_SA, _PA),
        "projects:listUsers": (_SA, _PA),
        "projects:show": (_SA, _PA),
        "projects:create": (_SA,),
        "projects:update": (_SA, _PA),
        "projects:delete": (_SA, _PA),
        "subscriptions:list": (_SA, _PA, _CON),
        "subscriptions:listByTopic": (_SA, _PA),
        "subscriptions:offsets": (_SA, _PA, _CON),
        "subscriptions:timeToOffset": (_SA, _PA, _CON),
        "subscriptions:acl": (_SA, _PA),
        "subscriptions:metrics": (_SA, _PA, _CON),
        "subscriptions:show": (_SA, _PA, _CON, _PW),
        "subscriptions:create": (_SA, _PA),
        "subscriptions:delete": (_SA, _PA),
        "subscriptions:pull": (_SA, _PA, _CON, _PW),
        "subscriptions:acknowledge": (_SA, _PA, _CON, _PW),
        "subscriptions:verifyPushEndpoint": (_SA, _PA),
        "subscriptions:modifyAckDeadline": (_SA, _PA, _CON),
        "subscriptions:modifyPushConfig": (_SA, _PA),
        "subscriptions:modifyOffset": (_SA, _PA, _CON),
        "subscriptions:modifyAcl": (_SA, _PA),
        "topics:list": (_SA, _PA, _PUB),
        "topics:acl": (_SA, _PA),
        "topics:metrics": (_SA, _PA, _PUB),
        "topics:show": (_SA, _PA, _PUB),
        "topics:create": (_SA, _PA),
        "topics:delete": (_SA, _PA),
        "topics:publish": (_SA, _PA, _PUB),
        "topics:modifyAcl": (_SA, _PA),
        "topics:attachSchema": (_SA, _PA),
        "topics:detachSchema": (_SA, _PA),
        "schemas:validateMessage": (_SA, _PA),
        "schemas:create": (_SA, _PA),
        "schemas:show": (_SA, _PA),
        "schemas:list": (_SA, _PA),
        "schemas:update": (_SA, _PA),
        "schemas:delete": (_SA, _PA),
    }.items()
}

#: Role names that users may be given (create/update reject anything else).
VALID_ROLES: frozenset[str] = frozenset().union(*ROUTE_ROLES.values()) | {ADMIN_VIEWER}


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


def allowed(route: str, caller: Caller) -> bool:
    if caller.is_service_token:
        return True
    return bool(ROUTE_ROLES.get(route, frozenset()) & caller.roles)
