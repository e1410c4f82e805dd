"""Projects and their members."""

from __future__ import annotations

import uuid as uuidlib

from ams_app.auth import Caller
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Membership, Project, User
from ams_app.service.base import topic_key
from ams_app.service.requests import MembershipEntry, NewMember, ProjectUpdate, checked_roles
from ams_app.service.users import UserOps
from ams_app.timeutil import now_ns


class ProjectOps(UserOps):
    def create_project(self, caller: Caller, name: str, description: str) -> Project:
        now = now_ns()
        project = Project(str(uuidlib.uuid4()), name, description, now, now, caller.uuid)
        if not self.store.create_project(project):
            raise AmsError.conflict("Project")
        return project

    def update_project(self, project: Project, request: ProjectUpdate) -> Project:
        if request.name:
            project.name = request.name
        if request.description:
            project.description = request.description
        project.modified_on = now_ns()
        if not self.store.update_project(project):
            raise AmsError.invalid_data("invalid project name change, name already exists")
        return project

    def delete_project(self, project: Project) -> None:
        self.usage.forget(project.uuid)
        for topic_name in self.store.delete_project(project.uuid):
            self.log.drop_topic(topic_key(project, topic_name))

    # --- members ------------------------------------------------------------------------------
    @staticmethod
    def _roles_for(project: Project, entries: list[MembershipEntry] | None) -> list[str] | None:
        """The roles of the first entry naming the project (checked), None when none names it."""
        found = next((e.roles for e in entries or [] if e.project == project.name), None)
        return None if found is None else checked_roles(found)

    def create_member(self, caller: Caller, project: Project, name: str, request: NewMember) -> User:
        roles = self._roles_for(project, request.projects) or []
        return self._new_user(caller, name, email=request.email, projects=[Membership(project.uuid, roles)])

    def member(self, project: Project, name: str) -> User:
        user = self.store.get_user(name=name)
        if user is None or user.membership(project.uuid) is None:
            raise AmsError.not_found("User")
        return user

    def add_member(self, project: Project, name: str, roles: list[str]) -> User:
        user = self.user(name)
        if user.membership(project.uuid) is not None:
            raise AmsError.generic_conflict("User is already a member of the project")
        user.projects.append(Membership(project.uuid, roles))
        user.modified_on = now_ns()
        self.store.update_user(user)
        return user

    def update_member(self, project: Project, name: str, entries: list[MembershipEntry] | None) -> User:
        user = self.user(name)
        membership = user.membership(project.uuid)
        if membership is None:
            raise AmsError.forbidden("User is not a member of the project")
        roles = self._roles_for(project, entries)
        if roles is None:
            raise AmsError.invalid_argument("User")
        membership.roles = roles
        user.modified_on = now_ns()
        self.store.update_user(user)
        return user

    def remove_member(self, project: Project, name: str) -> None:
        user = self.user(name)
        if user.membership(project.uuid) is None:
            raise AmsError.forbidden("User is not a member of the project")
        user.projects = [m for m in user.projects if m.project_uuid != project.uuid]
        user.modified_on = now_ns()
        self.store.update_user(user)

    def list_members(self, project: Project, page_size: str | None, page_token: str | None) -> Page[User]:
        size, token = self._page_args(page_size, page_token)
        page: Page[User] = self._paged(self.store.list_users, project.uuid, size, token)
        return page
