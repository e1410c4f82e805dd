"""Topics: create, delete, list, publish (with its schema check), and their ACLs."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ams_app.auth import PUBLISHER, Caller
from ams_app.backends.log import NewMessage
from ams_app.backends.store import Page
from ams_app.errors import AmsError
from ams_app.models import Project, Topic
from ams_app.service import schema_check
from ams_app.service.base import topic_key
from ams_app.service.schemas import SchemaOps
from ams_app.service.validation import as_object
from ams_app.timeutil import now_ns

_BAD_MESSAGE = AmsError.invalid_argument("Message")


class TopicOps(SchemaOps):
    def create_topic(self, project: Project, name: str, body: Any) -> Topic:
        bad = AmsError.invalid_request_body()
        body = as_object({} if body is None else body, bad)
        if not all(isinstance(v, str) for v in body.values()):
            raise bad
        schema_uuid = self.schema_by_ref(project, body["schema"]).uuid if body.get("schema") else ""
        topic = Topic(project.uuid, name, now_ns(), [], schema_uuid)
        self.log.create_topic(topic_key(project, name))
        if not self.store.create_topic(topic):
            raise AmsError.conflict("Topic")
        return topic

    def delete_topic(self, project: Project, name: str) -> None:
        if not self.store.delete_topic(project.uuid, name):
            raise AmsError.not_found("Topic")
        self.usage.forget(project.uuid, "topic", name)
        self.log.delete_topic(topic_key(project, name))

    def list_topics(
        self, caller: Caller, project: Project, page_size: str | None, page_token: str | None
    ) -> Page[Topic]:
        size, token = self._page_args(page_size, page_token)
        acl_user = self._filtered_for(caller, PUBLISHER)
        page: Page[Topic] = self._paged(self.store.list_topics, project.uuid, acl_user, size, token)
        return page

    def _messages(self, body: Any) -> list[NewMessage]:
        body = as_object(body, _BAD_MESSAGE)
        raw = body.get("messages")
        if not isinstance(raw, list):
            raise _BAD_MESSAGE
        limits = self.settings
        if len(raw) > limits.max_publish_messages:
            raise AmsError.invalid_data(
                f"Too many messages in one request (the limit is {limits.max_publish_messages})"
            )
        out: list[NewMessage] = []
        for index, item in enumerate(raw):
            item = as_object(item, _BAD_MESSAGE)
            data = item.get("data", "")
            attributes = item.get("attributes") or {}
            if not isinstance(data, str) or not isinstance(attributes, dict):
                raise _BAD_MESSAGE
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()):
                raise _BAD_MESSAGE
            if len(attributes) > limits.max_attributes:
                raise AmsError.invalid_data(
                    f"Message {index} has too many attributes (the limit is {limits.max_attributes})"
                )
            try:
                decoded = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise AmsError.invalid_data(f"Message {index} is not in valid base64 encoding") from exc
            if not decoded and not attributes:
                raise AmsError.invalid_data(f"Message {index} has neither data nor attributes")
            size = len(decoded) + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())
            if size > limits.max_message_bytes:
                raise AmsError.too_large()
            out.append(NewMessage(data, dict(attributes)))
        return out

    def publish(self, caller: Caller, project: Project, name: str, body: Any) -> list[str]:
        topic = self.topic(project, name)
        if self._acl_applies(caller, PUBLISHER) and caller.uuid not in topic.acl:
            raise AmsError.forbidden()
        messages = self._messages(body)
        compiled = self.compiled_schema_of(project, topic)
        if compiled is not None:
            for index, message in enumerate(messages):  # every message first: all or nothing
                schema_check.validate_message(compiled, index, message.data)
        if not messages:
            return []
        stored = self.log.append(topic_key(project, name), messages)
        self.usage.published(project.uuid, name, len(stored), sum(len(m.data) for m in stored), now_ns())
        return [str(m.offset) for m in stored]

    def modify_topic_acl(self, project: Project, name: str, body: Any) -> None:
        topic = self.topic(project, name)
        topic.acl = self._acl_users(project, body, "Topic")
        self.store.update_topic(topic)
