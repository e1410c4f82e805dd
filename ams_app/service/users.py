"""Users of the service: create, update, refresh a token, delete, list (docs/compatibility.md)."""

from __future__ import annotations

from typing import Any

from ams_app import auth
from ams_app.auth import Caller
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Membership, User
from ams_app.service.base import ServiceBase
from ams_app.service.validation import as_object, opt_str, opt_str_list, valid_name
from ams_app.timeutil import now_ns

_BAD_USER = AmsError.invalid_argument("User")


class UserOps(ServiceBase):
    def _check_roles(self, roles: list[str]) -> list[str]:
        for role in roles:
            if role not in auth.VALID_ROLES:
                raise AmsError.invalid_data(f"invalid role: {role}")
        return list(dict.fromkeys(roles))

    def _memberships(self, raw: Any) -> list[Membership]:
        if not isinstance(raw, list):
            raise _BAD_USER
        out: list[Membership] = []
        seen: set[str] = set()
        for entry in raw:
            entry = as_object(entry, _BAD_USER)
            project_name = opt_str(entry, "project", _BAD_USER) or ""
            roles = opt_str_list(entry, "roles", _BAD_USER) or []
            if not project_name:
                continue
            project = self.store.get_project(name=project_name)
            if project is None:
                raise AmsError.invalid_data(f"invalid project: {project_name}")
            if project.uuid in seen:
                raise AmsError.invalid_data(f"duplicate reference of project {project_name}")
            seen.add(project.uuid)
            out.append(Membership(project.uuid, self._check_roles(roles)))
        return out

    _USER_TEXT = ("email", "first_name", "last_name", "organization", "description")

    def create_user(self, caller: Caller, name: str, body: Any) -> User:
        body = as_object({} if body is None else body, _BAD_USER)
        texts = {k: opt_str(body, k, _BAD_USER) or "" for k in self._USER_TEXT}
        service_roles = self._check_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
        memberships = self._memberships(body.get("projects") or [])
        return self._new_user(caller, name, service_roles=service_roles, projects=memberships, **texts)

    def update_user(self, name: str, body: Any) -> User:
        user = self.user(name)
        body = as_object(body, _BAD_USER)
        new_name = opt_str(body, "name", _BAD_USER) or ""
        if new_name and not valid_name(new_name):
            raise AmsError.invalid_name("user")
        for key in self._USER_TEXT:
            value = opt_str(body, key, _BAD_USER)
            if value:
                setattr(user, key, value)
        if body.get("service_roles") is not None:
            user.service_roles = self._check_roles(opt_str_list(body, "service_roles", _BAD_USER) or [])
        if body.get("projects") is not None:
            user.projects = self._memberships(body["projects"])
        if new_name:
            user.name = new_name
        user.modified_on = now_ns()
        if not self.store.update_user(user):
            if self.store.get_user(uuid=user.uuid) is None:
                raise AmsError.not_found("User")
            raise AmsError.invalid_data("invalid user name change, name already exists")
        return user

    def refresh_token(self, name: str) -> User:
        user = self.user(name)
        user.token = auth.new_token()
        user.modified_on = now_ns()
        if not self.store.update_user(user):
            raise AmsError.not_found("User")
        return user

    def delete_user(self, name: str) -> None:
        if not self.store.delete_user(self.user(name).uuid):
            raise AmsError.not_found("User")

    def list_users(self, project_name: str | None, page_size: str | None, page_token: str | None) -> Page[User]:
        project_uuid = None
        if project_name:
            project = self.store.get_project(name=project_name)
            if project is None:
                raise AmsError.not_found("ProjectUUID")
            project_uuid = project.uuid
        size, token = self._page_args(page_size, page_token)
        page: Page[User] = self._paged(self.store.list_users, project_uuid, size, token)
        return page
