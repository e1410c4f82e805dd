"""The gRPC listener inside ``ams serve`` (setting ``grpc_port``; docs/pubsub.md).

grpcio runs on gevent here (``grpc.experimental.gevent``): its handlers are greenlets beside the
HTTP API's, over the same AmsService. The services are served with grpc's generic handlers and
the message classes that google-cloud-pubsub ships, so no .proto file is kept here. TLS uses the
HTTP API's certificate (tls_cert, tls_key) when it is set."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.iam.v1 import iam_policy_pb2, policy_pb2
from google.protobuf import empty_pb2
from google.pubsub_v1.types import pubsub as ps
from google.pubsub_v1.types import schema as sc

from ams_app.pubsub.iam import IamPolicy
from ams_app.pubsub.publisher import Publisher
from ams_app.pubsub.relay import MAX_MESSAGE_BYTES
from ams_app.pubsub.schema_service import SchemaService
from ams_app.pubsub.subscriber import Subscriber
from ams_app.service.core import AmsService
from ams_app.settings import Settings

log = logging.getLogger("ams.grpc")
_gevent_ready = False
#: The largest message the listener takes: a Publish of 10 MB (Google's clients' limit per
#: request), and room for its framing.
MAX_RECEIVE_BYTES = MAX_MESSAGE_BYTES
_EMPTY = empty_pb2.Empty


def _pb(message: Any) -> Any:
    """The protobuf class behind a proto-plus message class (or the class itself)."""
    return message.pb() if hasattr(message, "pb") else message


def _bytes_or(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """A response serializer that passes bytes on as they are: a subscription owner's answer to a
    call this node sent on (ams_app/pubsub/relay.py)."""
    return lambda response: response if isinstance(response, bytes) else serialize(response)


#: Every RPC: (service, method, request, response, kind). kind: unary, or stream (bidirectional).
RPCS: tuple[tuple[str, str, Any, Any, str], ...] = (
    ("Publisher", "CreateTopic", ps.Topic, ps.Topic, "unary"),
    ("Publisher", "UpdateTopic", ps.UpdateTopicRequest, ps.Topic, "unary"),
    ("Publisher", "Publish", ps.PublishRequest, ps.PublishResponse, "unary"),
    ("Publisher", "GetTopic", ps.GetTopicRequest, ps.Topic, "unary"),
    ("Publisher", "ListTopics", ps.ListTopicsRequest, ps.ListTopicsResponse, "unary"),
    (
        "Publisher",
        "ListTopicSubscriptions",
        ps.ListTopicSubscriptionsRequest,
        ps.ListTopicSubscriptionsResponse,
        "unary",
    ),
    ("Publisher", "ListTopicSnapshots", ps.ListTopicSnapshotsRequest, ps.ListTopicSnapshotsResponse, "unary"),
    ("Publisher", "DeleteTopic", ps.DeleteTopicRequest, _EMPTY, "unary"),
    ("Publisher", "DetachSubscription", ps.DetachSubscriptionRequest, ps.DetachSubscriptionResponse, "unary"),
    ("Subscriber", "CreateSubscription", ps.Subscription, ps.Subscription, "unary"),
    ("Subscriber", "GetSubscription", ps.GetSubscriptionRequest, ps.Subscription, "unary"),
    ("Subscriber", "UpdateSubscription", ps.UpdateSubscriptionRequest, ps.Subscription, "unary"),
    ("Subscriber", "ListSubscriptions", ps.ListSubscriptionsRequest, ps.ListSubscriptionsResponse, "unary"),
    ("Subscriber", "DeleteSubscription", ps.DeleteSubscriptionRequest, _EMPTY, "unary"),
    ("Subscriber", "ModifyAckDeadline", ps.ModifyAckDeadlineRequest, _EMPTY, "unary"),
    ("Subscriber", "Acknowledge", ps.AcknowledgeRequest, _EMPTY, "unary"),
    ("Subscriber", "Pull", ps.PullRequest, ps.PullResponse, "unary"),
    ("Subscriber", "StreamingPull", ps.StreamingPullRequest, ps.StreamingPullResponse, "stream"),
    ("Subscriber", "ModifyPushConfig", ps.ModifyPushConfigRequest, _EMPTY, "unary"),
    ("Subscriber", "GetSnapshot", ps.GetSnapshotRequest, ps.Snapshot, "unary"),
    ("Subscriber", "ListSnapshots", ps.ListSnapshotsRequest, ps.ListSnapshotsResponse, "unary"),
    ("Subscriber", "CreateSnapshot", ps.CreateSnapshotRequest, ps.Snapshot, "unary"),
    ("Subscriber", "UpdateSnapshot", ps.UpdateSnapshotRequest, ps.Snapshot, "unary"),
    ("Subscriber", "DeleteSnapshot", ps.DeleteSnapshotRequest, _EMPTY, "unary"),
    ("Subscriber", "Seek", ps.SeekRequest, ps.SeekResponse, "unary"),
    ("SchemaService", "CreateSchema", sc.CreateSchemaRequest, sc.Schema, "unary"),
    ("SchemaService", "GetSchema", sc.GetSchemaRequest, sc.Schema, "unary"),
    ("SchemaService", "ListSchemas", sc.ListSchemasRequest, sc.ListSchemasResponse, "unary"),
    ("SchemaService", "ListSchemaRevisions", sc.ListSchemaRevisionsRequest, sc.ListSchemaRevisionsResponse, "unary"),
    ("SchemaService", "CommitSchema", sc.CommitSchemaRequest, sc.Schema, "unary"),
    ("SchemaService", "RollbackSchema", sc.RollbackSchemaRequest, sc.Schema, "unary"),
    ("SchemaService", "DeleteSchemaRevision", sc.DeleteSchemaRevisionRequest, sc.Schema, "unary"),
    ("SchemaService", "DeleteSchema", sc.DeleteSchemaRequest, _EMPTY, "unary"),
    ("SchemaService", "ValidateSchema", sc.ValidateSchemaRequest, sc.ValidateSchemaResponse, "unary"),
    ("SchemaService", "ValidateMessage", sc.ValidateMessageRequest, sc.ValidateMessageResponse, "unary"),
)
#: The IAM RPCs, served on each of the three services' names as Google's clients call them.
IAM_RPCS = (
    ("SetIamPolicy", iam_policy_pb2.SetIamPolicyRequest, policy_pb2.Policy),
    ("GetIamPolicy", iam_policy_pb2.GetIamPolicyRequest, policy_pb2.Policy),
    ("TestIamPermissions", iam_policy_pb2.TestIamPermissionsRequest, iam_policy_pb2.TestIamPermissionsResponse),
)


class Listener:
    """The started gRPC server, and what its stop waits for."""

    def __init__(self, server: grpc.Server, subscriber: Subscriber) -> None:
        self.server = server
        self.subscriber = subscriber

    def stop(self, timeout: float) -> None:
        """Stop taking calls; give those under way ``timeout`` seconds, streams included (each
        ends with UNAVAILABLE once the service is stopping, and its client opens a new one
        elsewhere), so that none is still at work when the service closes its backends."""
        done = self.server.stop(timeout)
        done.wait(timeout)
        self.subscriber.streams.idle.wait(timeout)


def handlers(svc: AmsService, subscriber: Subscriber) -> list[grpc.GenericRpcHandler]:
    servicers: dict[str, Any] = {
        "Publisher": Publisher(svc),
        "Subscriber": subscriber,
        "SchemaService": SchemaService(svc),
    }
    iam = IamPolicy(svc)
    tables: dict[str, dict[str, grpc.RpcMethodHandler]] = {name: {} for name in servicers}
    for service, method, request, response, kind in RPCS:
        implementation = getattr(servicers[service], method)
        make = grpc.unary_unary_rpc_method_handler if kind == "unary" else grpc.stream_stream_rpc_method_handler
        tables[service][method] = make(
            implementation,
            request_deserializer=_pb(request).FromString,
            response_serializer=_bytes_or(_pb(response).SerializeToString),
        )
    out: list[grpc.GenericRpcHandler] = []
    for service, table in tables.items():
        out.append(grpc.method_handlers_generic_handler(f"google.pubsub.v1.{service}", table))
    out.append(
        grpc.method_handlers_generic_handler(
            "google.iam.v1.IAMPolicy",
            {
                method: grpc.unary_unary_rpc_method_handler(
                    getattr(iam, method),
                    request_deserializer=request.FromString,
                    response_serializer=response.SerializeToString,
                )
                for method, request, response in IAM_RPCS
            },
        )
    )
    return out


def start(svc: AmsService, settings: Settings, shared_port: int = 0) -> Listener | None:
    """Listen on grpc_port (none when it is 0); the server, started. A node's worker
    (ams_app/workers.py) listens on its own grpc_port, where the other nodes relay calls to it, and
    on ``shared_port``, the node's, which every worker binds with SO_REUSEPORT."""
    if not settings.grpc_port:
        return None
    global _gevent_ready
    if not _gevent_ready:
        from grpc.experimental import gevent as grpc_gevent

        grpc_gevent.init_gevent()
        _gevent_ready = True
    # the pool's workers are greenlets (threads are patched): each holds one RPC, a stream too
    pool = futures.ThreadPoolExecutor(max_workers=settings.max_connections)
    subscriber = Subscriber(svc)
    server = grpc.server(
        pool,
        handlers=handlers(svc, subscriber),
        maximum_concurrent_rpcs=settings.max_connections,
        options=[
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
            ("grpc.max_send_message_length", MAX_RECEIVE_BYTES),
            # clients' keepalive pings (the Go client's, every 5 minutes) are welcome
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # grpc's default on Linux, stated for the workers, which share the node's grpc_port
            *([("grpc.so_reuseport", 1)] if shared_port else []),
        ],
    )
    ports = [settings.grpc_port, *([shared_port] if shared_port else [])]
    addresses = [f"[{settings.host}]:{port}" if ":" in settings.host else f"{settings.host}:{port}" for port in ports]
    for address in addresses:
        if settings.tls_cert and settings.tls_key:
            credentials = grpc.ssl_server_credentials(
                [(Path(settings.tls_key).read_bytes(), Path(settings.tls_cert).read_bytes())]
            )
            server.add_secure_port(address, credentials)
        else:
            server.add_insecure_port(address)
    server.start()
    log.info(
        "Pub/Sub gRPC API listening on %s (%s)", " and ".join(addresses), "TLS" if settings.tls_cert else "plaintext"
    )
    return Listener(server, subscriber)
