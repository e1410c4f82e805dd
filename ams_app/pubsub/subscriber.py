"""google.pubsub.v1.Subscriber: subscriptions, pull and acknowledge, snapshots and seek (the
StreamingPull in streaming.py). Each RPC names the REST route whose roles may call it."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1.types import pubsub as ps

from ams_app.errors import AmsError
from ams_app.models import Subscription
from ams_app.pubsub import convert, owned
from ams_app.pubsub.calls import Call, authorize, streaming, unary
from ams_app.pubsub.publisher import page_args
from ams_app.pubsub.streaming import StreamingPull
from ams_app.service import push_config, requests
from ams_app.service.core import AmsService
from ams_app.service.requests import AckRef, PullRequest, SeekTarget

ListSubscriptionsResponse = ps.ListSubscriptionsResponse.pb()
ListSnapshotsResponse = ps.ListSnapshotsResponse.pb()
SeekResponse = ps.SeekResponse.pb()
#: The longest ack deadline Pub/Sub takes, in seconds.
MAX_DEADLINE_S = 600
#: Most ack ids in one Acknowledge or ModifyAckDeadline (Google's clients send up to 2,500).
MAX_ACK_IDS = 10_000
#: Fields that UpdateSubscription may change here (the others are fixed at creation, or not kept).
UPDATABLE = frozenset(
    {"ack_deadline_seconds", "push_config", "retry_policy", "dead_letter_policy", "retain_acked_messages"}
)


def ack_refs(call: Call, sub_name: str, ack_ids: Any) -> list[AckRef]:
    if len(ack_ids) > MAX_ACK_IDS:
        raise AmsError.invalid_data(f"At most {MAX_ACK_IDS} ack ids in one request")
    return owned.ack_refs(call, sub_name, ack_ids)


def deadline_seconds(seconds: int) -> int:
    if not 0 <= seconds <= MAX_DEADLINE_S:
        raise AmsError.invalid_data(f"ack_deadline_seconds must be between 0 and {MAX_DEADLINE_S}")
    return seconds


class Subscriber:
    def __init__(self, svc: AmsService) -> None:
        self.svc = svc
        self.streams = StreamingPull(svc)

    def _sub(self, context: grpc.ServicerContext, route: str, text: str) -> tuple[Call, str]:
        project, name = convert.parse_name(text, "subscriptions")
        return authorize(self.svc, context, route, project), name

    def _view(self, call: Call, sub: Subscription) -> Any:
        topic = self.svc.store.get_topic(call.project.uuid, sub.topic)
        out = convert.subscription(call.project, sub, topic.retention_s if topic else 0)
        if topic is None:
            out.topic = "_deleted-topic_"
        return out

    # --- subscriptions -------------------------------------------------------------------------
    @unary
    def CreateSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:create", request.name)
        body = convert.subscription_body(request)
        created = self.svc.create_subscription(call.project, name, requests.new_subscription(body, call.project.name))
        return self._view(call, created)

    @unary
    def GetSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:show", request.subscription)
        return self._view(call, self.svc.subscription(call.project, name))

    @unary
    def UpdateSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:create", request.subscription.name)
        paths = set(request.update_mask.paths)
        if not paths:
            raise AmsError.invalid_data("update_mask must name the fields to update")
        fixed = sorted(paths - UPDATABLE)
        if fixed:
            raise AmsError.invalid_data(f"These fields cannot be updated: {', '.join(fixed)}")
        current = self.svc.subscription(call.project, name)
        body = convert.subscription_body(self._view(call, current))
        wanted = convert.subscription_body(request.subscription)
        for path in paths:
            key = convert.json_name(path)
            body.pop(key, None)
            if key in wanted:
                body[key] = wanted[key]
        if "push_config" in paths:
            self.svc.modify_push_config(call.project, name, push_config.read(body.get("pushConfig")))
        body.pop("pushConfig", None)  # changed (or kept) above
        updated = self.svc.update_subscription(call.project, name, requests.new_subscription(body, call.project.name))
        return self._view(call, updated)

    @unary
    def ListSubscriptions(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "subscriptions:list", convert.parse_project(request.project))
        page = self.svc.list_subscriptions(call.caller, call.project, *page_args(request))
        return ListSubscriptionsResponse(
            subscriptions=[self._view(call, s) for s in page.items], next_page_token=page.next_page_token
        )

    @unary
    def DeleteSubscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:delete", request.subscription)
        self.svc.delete_subscription(call.project, name)
        return empty_pb2.Empty()

    @unary
    def ModifyPushConfig(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:modifyPushConfig", request.subscription)
        self.svc.modify_push_config(call.project, name, push_config.read(convert.push_body(request.push_config)))
        return empty_pb2.Empty()

    # --- pull and acknowledge ------------------------------------------------------------------
    @unary
    def Pull(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:pull", request.subscription)
        sub = self.svc.subscription_to_pull(call.caller, call.project, name)
        if request.max_messages <= 0:
            raise AmsError.invalid_data("max_messages must be above 0")
        # return_immediately is deprecated; without it a pull waits a while for a first message
        wanted = PullRequest(request.max_messages, request.return_immediately)
        return owned.pull_response(call, sub, wanted, request)

    @unary
    def Acknowledge(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:acknowledge", request.subscription)
        sub = self.svc.subscription(call.project, name)
        refs = ack_refs(call, name, request.ack_ids)
        # room on the stream at once, not once the store holds the acknowledgements (a stream's
        # flow control bounds what its client holds; an id refused comes back when its lease ends)
        self.streams.settled(call.project.uuid, name, request.ack_ids, 0)
        owned.acknowledge(call, sub, refs, request)
        return empty_pb2.Empty()

    @unary
    def ModifyAckDeadline(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:modifyAckDeadline", request.subscription)
        sub = self.svc.subscription(call.project, name)
        seconds = deadline_seconds(request.ack_deadline_seconds)
        owned.modify_deadline(call, sub, ack_refs(call, name, request.ack_ids), seconds, request)
        self.streams.settled(call.project.uuid, name, request.ack_ids, seconds)
        return empty_pb2.Empty()

    @streaming
    def StreamingPull(self, requests_in: Any, context: grpc.ServicerContext) -> Any:
        yield from self.streams.serve(requests_in, context)

    # --- snapshots and seek --------------------------------------------------------------------
    @unary
    def GetSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, name = convert.parse_name(request.snapshot, "snapshots")
        call = authorize(self.svc, context, "snapshots:show", project)
        return convert.snapshot(call.project, self.svc.snapshot(call.project, name))

    @unary
    def ListSnapshots(self, request: Any, context: grpc.ServicerContext) -> Any:
        call = authorize(self.svc, context, "snapshots:list", convert.parse_project(request.project))
        page = self.svc.list_snapshots(call.project, *page_args(request))
        return ListSnapshotsResponse(
            snapshots=[convert.snapshot(call.project, s) for s in page.items], next_page_token=page.next_page_token
        )

    @unary
    def CreateSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, name = convert.parse_name(request.name, "snapshots")
        call = authorize(self.svc, context, "snapshots:create", project)
        source = requests.snapshot_source({"subscription": request.subscription}, call.project.name)
        return convert.snapshot(call.project, self.svc.create_snapshot(call.caller, call.project, name, source))

    @unary
    def UpdateSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, _ = convert.parse_name(request.snapshot.name, "snapshots")
        authorize(self.svc, context, "snapshots:create", project)
        raise AmsError.invalid_data("A snapshot's labels and expiry are not kept to change here (docs/pubsub.md)")

    @unary
    def DeleteSnapshot(self, request: Any, context: grpc.ServicerContext) -> Any:
        project, name = convert.parse_name(request.snapshot, "snapshots")
        call = authorize(self.svc, context, "snapshots:delete", project)
        self.svc.delete_snapshot(call.project, name)
        return empty_pb2.Empty()

    @unary
    def Seek(self, request: Any, context: grpc.ServicerContext) -> Any:
        call, name = self._sub(context, "subscriptions:seek", request.subscription)
        sub = self.svc.subscription(call.project, name)
        which = request.WhichOneof("target")
        if which == "snapshot":
            target = requests.seek_target({"snapshot": request.snapshot}, call.project.name)
        elif which == "time":
            target = SeekTarget("", request.time.ToNanoseconds())
        else:
            raise AmsError.invalid_data("A seek needs either snapshot or time")
        owned.seek(call, sub, target, request)
        return SeekResponse()
