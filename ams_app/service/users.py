"""Users of the service: create, update, refresh a token, delete, list (docs/compatibility.md)."""

from __future__ import annotations

from ams_app import auth
from ams_app.auth import Caller
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Membership, User
from ams_app.service.base import ServiceBase
from ams_app.service.requests import MembershipEntry, NewUser, UserUpdate, checked_roles
from ams_app.timeutil import now_ns


class UserOps(ServiceBase):
    def _memberships(self, entries: list[MembershipEntry]) -> list[Membership]:
        """The memberships the entries name (entries naming no project are skipped): each
        project exists and comes once, each role exists."""
        out: list[Membership] = []
        seen: set[str] = set()
        for entry in entries:
            if not entry.project:
                continue
            project = self.store.get_project(name=entry.project)
            if project is None:
                raise AmsError.invalid_data(f"invalid project: {entry.project}")
            if project.uuid in seen:
                raise AmsError.invalid_data(f"duplicate reference of project {entry.project}")
            seen.add(project.uuid)
            out.append(Membership(project.uuid, checked_roles(entry.roles)))
        return out

    def create_user(self, caller: Caller, name: str, request: NewUser) -> User:
        memberships = self._memberships(request.projects)
        return self._new_user(caller, name, service_roles=request.service_roles, projects=memberships, **request.texts)

    def update_user(self, user: User, request: UserUpdate) -> User:
        for key, value in request.texts.items():
            setattr(user, key, value)
        if request.service_roles is not None:
            user.service_roles = request.service_roles
        if request.projects is not None:
            user.projects = self._memberships(request.projects)
        if request.name:
            user.name = request.name
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
