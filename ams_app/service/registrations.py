"""User registrations: a request to become a user, accepted or declined by an admin."""

from __future__ import annotations

import uuid as uuidlib

from ams_app import auth
from ams_app.auth import Caller
from ams_app.errors import AmsError
from ams_app.models import Registration, User
from ams_app.service.base import ServiceBase
from ams_app.service.requests import NewRegistration
from ams_app.timeutil import now_ns

FILTERS = ("status", "activation_token", "name", "email", "organization")
_TEXT = ("email", "first_name", "last_name", "organization", "description")


class RegistrationOps(ServiceBase):
    def register(self, request: NewRegistration) -> Registration:
        name, texts = request.name, request.texts
        if self.store.get_user(name=name) is not None:
            raise AmsError.conflict("User")
        registration = Registration(
            uuid=str(uuidlib.uuid4()),
            name=name,
            email=texts["email"],
            first_name=texts["first_name"],
            last_name=texts["last_name"],
            organization=texts["organization"],
            description=texts["description"],
            status="pending",
            activation_token=auth.new_token(),
            registered_at=now_ns(),
        )
        self.store.create_registration(registration)
        return registration

    def registration(self, uuid: str) -> Registration:
        found = self.store.get_registration(uuid)
        if found is None:
            raise AmsError.not_found("User registration")
        return found

    def _pending(self, uuid: str) -> Registration:
        found = self.store.get_registration(uuid)
        if found is None or found.status != "pending":
            raise AmsError.not_found("User registration")
        return found

    def accept_registration(self, caller: Caller, uuid: str) -> User:
        registration = self._pending(uuid)
        fields = {key: getattr(registration, key) for key in _TEXT}
        user = self._new_user(caller, registration.name, **fields)
        registration.status = "accepted"
        registration.activation_token = ""
        registration.modified_by = caller.uuid
        registration.modified_at = now_ns()
        self.store.update_registration(registration)
        return user

    def decline_registration(self, caller: Caller, uuid: str, comment: str) -> None:
        registration = self._pending(uuid)
        registration.status = "declined"
        registration.decline_comment = comment
        registration.activation_token = ""
        registration.modified_by = caller.uuid
        registration.modified_at = now_ns()
        self.store.update_registration(registration)

    def list_registrations(self, args: dict[str, str]) -> list[Registration]:
        return self.store.list_registrations({k: v for k, v in args.items() if k in FILTERS and v})

    def delete_registration(self, uuid: str) -> None:
        if not self.store.delete_registration(uuid):
            raise AmsError.not_found("User registration")
