"""google.iam.v1.IAMPolicy on topics and subscriptions: a view of their AMS ACLs
(docs/pubsub.md, "IAM").

A topic's policy has one binding, ``roles/pubsub.publisher``, whose members are the users of its
ACL (``user:{name}``); a subscription's has ``roles/pubsub.subscriber``. Setting a policy sets the
ACL (the REST API's ``:modifyAcl``, with its roles: project and service admins). Other roles,
other member kinds, and other resources (snapshots, schemas, projects) are refused: AMS has no
other per-resource grants. TestIamPermissions answers which of the asked permissions the caller
holds, by the roles and ACLs the REST API applies."""

from __future__ import annotations

import hashlib
from typing import Any

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2

from ams_app.errors import AmsError
from ams_app.pubsub.calls import Call, authorize, unary
from ams_app.service.core import AmsService

#: resource kind -> (the role its ACL stands for, the REST routes that read and set the ACL)
_KINDS = {
    "topics": ("roles/pubsub.publisher", "topics:acl", "topics:modifyAcl"),
    "subscriptions": ("roles/pubsub.subscriber", "subscriptions:acl", "subscriptions:modifyAcl"),
}
#: permission -> (resource kind, the REST route whose roles hold it, whether the ACL applies)
PERMISSIONS = {
    "pubsub.topics.get": ("topics", "topics:show", False),
    "pubsub.topics.publish": ("topics", "topics:publish", True),
    "pubsub.topics.update": ("topics", "topics:attachSchema", False),
    "pubsub.topics.delete": ("topics", "topics:delete", False),
    "pubsub.topics.attachSubscription": ("topics", "subscriptions:create", False),
    "pubsub.topics.getIamPolicy": ("topics", "topics:acl", False),
    "pubsub.topics.setIamPolicy": ("topics", "topics:modifyAcl", False),
    "pubsub.subscriptions.get": ("subscriptions", "subscriptions:show", False),
    "pubsub.subscriptions.consume": ("subscriptions", "subscriptions:pull", True),
    "pubsub.subscriptions.update": ("subscriptions", "subscriptions:create", False),
    "pubsub.subscriptions.delete": ("subscriptions", "subscriptions:delete", False),
    "pubsub.subscriptions.getIamPolicy": ("subscriptions", "subscriptions:acl", False),
    "pubsub.subscriptions.setIamPolicy": ("subscriptions", "subscriptions:modifyAcl", False),
}


def _resource(text: str) -> tuple[str, str, str]:
    """(project, kind, name) of a topic or subscription; other resources are UNIMPLEMENTED."""
    parts = text.split("/")
    if len(parts) != 4 or parts[0] != "projects" or not parts[1] or not parts[3]:
        raise AmsError.invalid_data(f"Invalid resource name {text!r}")
    if parts[2] not in _KINDS:
        raise AmsError(501, f"IAM policies are kept on topics and subscriptions only, not {parts[2]}", "UNIMPLEMENTED")
    return parts[1], parts[2], parts[3]


def _policy(names: list[str], role: str) -> Any:
    members = sorted(f"user:{n}" for n in names)
    etag = hashlib.sha256("\n".join(members).encode()).digest()[:8]
    bindings = [policy_pb2.Binding(role=role, members=members)] if members else []
    return policy_pb2.Policy(version=1, bindings=bindings, etag=etag)


class IamPolicy:
    def __init__(self, svc: AmsService) -> None:
        self.svc = svc

    def _acl(self, call: Call, kind: str, name: str) -> list[str]:
        found = self.svc.topic(call.project, name) if kind == "topics" else self.svc.subscription(call.project, name)
        return self.svc.acl_names(found.acl)

    @unary
    def GetIamPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, kind, name = _resource(request.resource)
        role, read, _ = _KINDS[kind]
        call = authorize(self.svc, context, read, project)
        return _policy(self._acl(call, kind, name), role)

    @unary
    def SetIamPolicy(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, kind, name = _resource(request.resource)
        role, _, write = _KINDS[kind]
        call = authorize(self.svc, context, write, project)
        names: list[str] = []
        for binding in request.policy.bindings:
            if binding.role != role:
                raise AmsError.invalid_data(f"A {kind[:-1]}'s policy has one role here: {role}, not {binding.role}")
            for member in binding.members:
                if not member.startswith("user:"):
                    raise AmsError.invalid_data(f"Members are AMS users (user:NAME), not {member!r}")
                if member[5:] not in names:
                    names.append(member[5:])
        if kind == "topics":
            self.svc.set_topic_acl(call.project, self.svc.topic(call.project, name), names)
        else:
            self.svc.set_subscription_acl(call.project, self.svc.subscription(call.project, name), names)
        return _policy(self._acl(call, kind, name), role)

    @unary
    def TestIamPermissions(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, kind, name = _resource(request.resource)
        held: list[str] = []
        for permission in request.permissions:
            rule = PERMISSIONS.get(permission)
            if rule is None or rule[0] != kind:
                continue
            try:
                call = authorize(self.svc, context, rule[1], project)
                if rule[2]:
                    self._check_acl(call, kind, name)
            except AmsError as error:
                if error.code in (401, 404):
                    raise
                continue
            held.append(permission)
        return iam_policy_pb2.TestIamPermissionsResponse(permissions=held)

    def _check_acl(self, call: Call, kind: str, name: str) -> None:
        if kind == "topics":
            self.svc.topic_to_publish(call.caller, call.project, name)
        else:
            self.svc.subscription_to_pull(call.caller, call.project, name)
