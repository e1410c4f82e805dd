"""google.pubsub.v1.Publisher: topics and publishing. Each RPC names the REST route whose roles
may call it (``authorize``)."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1.types import pubsub as ps
from google.pubsub_v1.types import schema as schema_types

from ams_app.errors import AmsError
from ams_app.models import Project, Topic
from ams_app.pubsub import convert
from ams_app.pubsub.calls import Call, authorize, unary
from ams_app.service import requests
from ams_app.service.core import AmsService

PublishResponse = ps.PublishResponse.pb()
ListTopicsResponse = ps.ListTopicsResponse.pb()
ListTopicSubscriptionsResponse = ps.ListTopicSubscriptionsResponse.pb()
ListTopicSnapshotsResponse = ps.ListTopicSnapshotsResponse.pb()


def page_args(request: Any) -> tuple[str | None, str | None]:
    """A list request's page size and token, as the service's listings take them."""
    return (str(request.page_size) if request.page_size else None), (request.page_token or None)


class Publisher:
    def __init__(self, svc: AmsService) -> None:
        self.svc = svc

    def _topic(self, context: grpc.ServicerContext, route: str, text: str) -> tuple[Call, str]:
        project, topic = convert.parse_name(text, "topics")
        return authorize(self.svc, context, route, project), topic

    def _view(self, call: Call, topic: Topic) -> Any:
        return convert.topic(call.project, topic, self.svc.topic_schema_name(call.project, topic))

    @unary
    def CreateTopic(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "topics:create", request.name)
        wanted = requests.new_topic(convert.topic_body(request, call.project.name), call.project.name)
        return self._view(call, self.svc.create_topic(call.project, name, wanted))

    @unary
    def UpdateTopic(self, request: Any, context: grpc.ServicerContext) -> Any:
        """The schema settings may change (attach, detach); nothing else is kept to change."""
        call, name = self._topic(context, "topics:attachSchema", request.topic.name)
        topic = self.svc.topic(call.project, name)
        paths = set(request.update_mask.paths)
        if not paths:
            raise AmsError.invalid_data("update_mask must name the fields to update")
        unsupported = sorted(paths - {"schema_settings"})
        if unsupported:
            raise AmsError.invalid_data(f"These fields cannot be updated here: {', '.join(unsupported)}")
        settings = request.topic.schema_settings
        if settings.schema:
            encoding = schema_types.Encoding(settings.encoding).name if settings.encoding else ""
            self.svc.attach_schema(
                call.project, topic, requests.schema_ref(call.project.name, settings.schema), encoding
            )
        else:
            self.svc.detach_schema(call.project, name)
        return self._view(call, self.svc.topic(call.project, name))

    @unary
    def Publish(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "topics:publish", request.topic)
        topic = self.svc.topic_to_publish(call.caller, call.project, name)
        if not request.messages:
            raise AmsError.invalid_data("A publish request needs at least one message")
        messages = convert.new_messages(request.messages, self.svc.settings)
        return PublishResponse(message_ids=self.svc.publish(call.project, topic, messages))

    @unary
    def GetTopic(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "topics:show", request.topic)
        return self._view(call, self.svc.topic(call.project, name))

    @unary
    def ListTopics(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "topics:list", convert.parse_project(request.project))
        page = self.svc.list_topics(call.caller, call.project, *page_args(request))
        names = self.svc.schema_names(call.project) if any(t.schema_uuid for t in page.items) else {}
        return ListTopicsResponse(
            topics=[convert.topic(call.project, t, names.get(t.schema_uuid)) for t in page.items],
            next_page_token=page.next_page_token,
        )

    @unary
    def ListTopicSubscriptions(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "subscriptions:listByTopic", request.topic)
        names = self.svc.topic_subscriptions(call.project, name)
        start = int(request.page_token) if request.page_token.isdigit() else 0
        size = request.page_size or len(names) or 1
        chosen = names[start : start + size]
        more = str(start + size) if start + size < len(names) else ""
        return ListTopicSubscriptionsResponse(
            subscriptions=[convert.name(call.project, "subscriptions", n) for n in chosen], next_page_token=more
        )

    @unary
    def ListTopicSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "snapshots:list", request.topic)
        self.svc.topic(call.project, name)
        found = _all_snapshots(self.svc, call.project)
        return ListTopicSnapshotsResponse(
            snapshots=[convert.name(call.project, "snapshots", s.name) for s in found if s.topic == name]
        )

    @unary
    def DeleteTopic(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._topic(context, "topics:delete", request.topic)
        self.svc.delete_topic(call.project, name)
        return empty_pb2.Empty()

    @unary
    def DetachSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        raise AmsError(501, "DetachSubscription is not supported: delete the subscription instead", "UNIMPLEMENTED")


def _all_snapshots(svc: AmsService, project: Project) -> list[Any]:
    found: list[Any] = []
    token: str | None = None
    while True:
        page = svc.list_snapshots(project, "1000", token)
        found += page.items
        if not page.next_page_token:
            return found
        token = page.next_page_token
