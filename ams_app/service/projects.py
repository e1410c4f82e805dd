"""Projects and their members."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from ams_app.auth import Caller
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Membership, Project, User
from ams_app.service.base import topic_key
from ams_app.service.users import UserOps
from ams_app.service.validation import as_object, opt_str, opt_str_list, valid_name
from ams_app.timeutil import now_ns

_BAD_USER = AmsError.invalid_argument("User")
_BAD_PROJECT = AmsError.invalid_argument("Project")


class ProjectOps(UserOps):
    def create_project(self, caller: Caller, name: str, body: Any) -> Project:
        body = as_object(body, _BAD_PROJECT)
        description = opt_str(body, "description", _BAD_PROJECT) or ""
        now = now_ns()
        project = Project(str(uuidlib.uuid4()), name, description, now, now, caller.uuid)
        if not self.store.create_project(project):
            raise AmsError.conflict("Project")
        return project

    def update_project(self, project: Project, body: Any) -> Project:
        bad = AmsError.invalid_request_body()
        body = as_object(body, bad)
        new_name = opt_str(body, "name", bad) or ""
        description = opt_str(body, "description", bad)
        if new_name and not valid_name(new_name):
            raise AmsError.invalid_name("project")
        if new_name:
            project.name = new_name
        if description:
            project.description = description
        project.modified_on = now_ns()
        if not self.store.update_project(project):
            raise AmsError.invalid_data("invalid project name change, name already exists")
        return project

    def delete_project(self, project: Project) -> None:
        self.usage.forget(project.uuid)
        for topic_name in self.store.delete_project(project.uuid):
            self.log.drop_topic(topic_key(project, topic_name))

    # --- members ------------------------------------------------------------------------------
    def _roles_for(self, project: Project, body: dict[str, Any]) -> list[str] | None:
        raw = body.get("projects")
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise _BAD_USER
        found: list[str] | None = None
        for entry in raw:  # every entry must be well formed, not only the one for this project
            entry = as_object(entry, _BAD_USER)
            roles = opt_str_list(entry, "roles", _BAD_USER) or []
            if opt_str(entry, "project", _BAD_USER) == project.name and found is None:
                found = roles
        return None if found is None else self._check_roles(found)

    def create_member(self, caller: Caller, project: Project, name: str, body: Any) -> User:
        body = as_object({} if body is None else body, _BAD_USER)
        email = opt_str(body, "email", _BAD_USER) or ""
        roles = self._roles_for(project, body) or []
        return self._new_user(caller, name, email=email, projects=[Membership(project.uuid, roles)])

    def member(self, project: Project, name: str) -> User:
        user = self.store.get_user(name=name)
        if user is None or user.membership(project.uuid) is None:
            raise AmsError.not_found("User")
        return user

    def add_member(self, project: Project, name: str, body: Any) -> User:
        bad = AmsError.invalid_request_body()
        body = as_object(body if body is not None else {}, bad)
        roles = self._check_roles(opt_str_list(body, "roles", bad) or [])
        user = self.user(name)
        if user.membership(project.uuid) is not None:
            raise AmsError.generic_conflict("User is already a member of the project")
        user.projects.append(Membership(project.uuid, roles))
        user.modified_on = now_ns()
        self.store.update_user(user)
        return user

    def update_member(self, project: Project, name: str, body: Any) -> User:
        body = as_object(body, _BAD_USER)
        user = self.user(name)
        membership = user.membership(project.uuid)
        if membership is None:
            raise AmsError.forbidden("User is not a member of the project")
        roles = self._roles_for(project, body)
        if roles is None:
            raise _BAD_USER
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
