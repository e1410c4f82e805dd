"""Topics: create, delete, list, publish (with its schema check), and their ACLs."""

from __future__ import annotations

from ams_app.auth import PUBLISHER, Caller
from ams_app.backends.log import NewMessage
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Project, Topic
from ams_app.service import schema_check
from ams_app.service.base import topic_key
from ams_app.service.requests import NewTopic
from ams_app.service.schemas import SchemaOps
from ams_app.timeutil import now_ns


class TopicOps(SchemaOps):
    def create_topic(self, project: Project, name: str, request: NewTopic) -> Topic:
        found = self.schema(project, request.schema) if request.schema else None
        self.check_schema_encoding(found, request.schema_encoding)
        topic = Topic(
            project.uuid,
            name,
            now_ns(),
            [],
            found.uuid if found else "",
            request.retention_s,
            request.schema_encoding if found else "",
        )
        self.log.create_topic(topic_key(project, name), request.retention_s)
        if not self.store.create_topic(topic):
            raise AmsError.conflict("Topic")
        return topic

    def delete_topic(self, project: Project, name: str) -> None:
        users = self.dead_letter_users(project, name) if self.store.get_topic(project.uuid, name) else []
        if users:
            raise AmsError.generic_conflict(
                f"Topic is the dead-letter topic of subscriptions: {', '.join(sorted(users))}"
            )
        if not self.store.delete_topic(project.uuid, name):
            raise AmsError.not_found("Topic")
        self.usage.forget(project.uuid, "topic", name)
        self.log.delete_topic(topic_key(project, name))

    def dead_letter_users(self, project: Project, topic: str) -> list[str]:
        """The subscriptions of the project that dead-letter into ``topic``."""
        names: list[str] = []
        token = ""
        while True:
            page = self.store.list_subscriptions(project.uuid, None, 1000, token)
            names += [s.name for s in page.items if s.dead_letter and s.dead_letter_topic == topic]
            token = page.next_page_token
            if not token:
                return names

    def list_topics(
        self, caller: Caller, project: Project, page_size: str | None, page_token: str | None
    ) -> Page[Topic]:
        size, token = self._page_args(page_size, page_token)
        acl_user = self._filtered_for(caller, PUBLISHER)
        page: Page[Topic] = self._paged(self.store.list_topics, project.uuid, acl_user, size, token)
        return page

    def topic_to_publish(self, caller: Caller, project: Project, name: str) -> Topic:
        """The topic, if the caller may publish to it."""
        topic = self.topic(project, name)
        if self._acl_applies(caller, PUBLISHER) and caller.uuid not in topic.acl:
            raise AmsError.forbidden()
        return topic

    def publish(self, project: Project, topic: Topic, messages: list[NewMessage]) -> list[str]:
        """Append the messages, all or none: each satisfies the topic's schema, or none is kept."""
        compiled = self.compiled_schema_of(project, topic)
        if compiled is not None:
            for index, message in enumerate(messages):
                schema_check.validate_message(compiled, index, message.data, topic.schema_encoding)
        if not messages:
            return []
        stored = self.log.append(topic_key(project, topic.name), messages)
        self.usage.published(project.uuid, topic.name, len(stored), sum(len(m.data) for m in stored), now_ns())
        return [str(m.offset) for m in stored]

    def set_topic_acl(self, project: Project, topic: Topic, names: list[str]) -> None:
        topic.acl = self._acl_users(project, names)
        self.store.update_topic(topic)
