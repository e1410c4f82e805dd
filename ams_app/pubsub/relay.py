"""Passing a Pub/Sub call on to its subscription's owner over the owner's gRPC API (consume_owner;
docs/pubsub.md, "Several nodes").

A node that does not own a subscription sends its pulls, acknowledgements and deadline changes,
and whole streaming pulls, on to the owner's gRPC API (the address its claim in ZooKeeper gives,
ams_app/service/owner.py): the request's bytes, the caller's token, marked as forwarded (a
forwarded call is never sent on again), over TLS verified against forward_ca_file when the owner's
URL is https, as the REST API's forwards are (ams_app/api/forward.py). The owner's answer comes
back as it is: its bytes, or its status with its details (an exactly-once acknowledgement's
ErrorInfo).

Why not the REST API, as before: the owner's JSON read back into protobuf cost a forwarding node
more than serving the call itself (docs/benchmarks.md); bytes passed on cost it about nothing per
message. An owner that serves no gRPC API (grpc_port 0, or a node of an earlier release during a
rolling upgrade) is still reached through the REST API (ams_app/pubsub/owned.py).

An owner that cannot be reached raises ``OwnerUnreachable``, which the caller waits out as a REST
forward does (``through_owner``: until ZooKeeper ends the owner's claim). A failure the owner
answered carries its node's mark (``ANSWERED``) and is passed on; any other is a 503."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import grpc
from gevent.event import Event

from ams_app.api.forward import OwnerUnreachable
from ams_app.errors import AmsError
from ams_app.pubsub.calls import ANSWERED, FORWARDED, Call, Relayed
from ams_app.service.core import AmsService
from ams_app.service.owner import ForwardTo, moved

#: The largest message passed either way: a pull's answer of 1,000 messages of up to 10 MB in
#: all (max_pull_bytes bounds it) and room for its framing; the listener's own limit.
MAX_MESSAGE_BYTES = 12 * 1024 * 1024
_SERVICE = "/google.pubsub.v1.Subscriber/"
_channels: dict[tuple[str, bool, str], grpc.Channel] = {}


def _channel(svc: AmsService, owner: ForwardTo) -> grpc.Channel:
    """One channel per owner, kept (a channel is a connection, multiplexed)."""
    tls = owner.url.startswith("https:")
    ca_file = svc.settings.forward_ca_file
    key = (owner.grpc, tls, ca_file)
    found = _channels.get(key)
    if found is None:
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            # an owner that restarts is reached again within a couple of seconds (grpc's own
            # backoff grows to two minutes, and calls fail at once meanwhile)
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
            # a host that went without a word (no reset) is noticed on a quiet stream too; the
            # listener takes a ping every 10 s (ams_app/pubsub/server.py)
            ("grpc.keepalive_time_ms", 15_000),
            ("grpc.keepalive_timeout_ms", 5_000),
        ]
        if tls:
            roots = Path(ca_file).read_bytes() if ca_file else None  # None: the system's CAs
            found = grpc.secure_channel(owner.grpc, grpc.ssl_channel_credentials(roots), options)
        else:
            found = grpc.insecure_channel(owner.grpc, options)
        _channels[key] = found
    return found


def _metadata(call: Call) -> tuple[tuple[str, str], ...]:
    node = call.svc.settings.node_name or call.svc.settings.node_url
    marked = ((FORWARDED, node),)
    return (("x-goog-api-key", call.token), *marked) if call.token else marked


def _failure(svc: AmsService, owner: ForwardTo, error: grpc.RpcError) -> Exception:
    """What a relayed call's failure is here: the owner's answer (``Relayed``), an owner that
    could not be reached (``OwnerUnreachable``), or a 503."""
    code = error.code() if isinstance(error, grpc.Call) else None
    trailing = tuple(error.trailing_metadata() or ()) if isinstance(error, grpc.Call) else ()
    if any(key == ANSWERED for key, _ in trailing):
        return Relayed(code or grpc.StatusCode.UNKNOWN, error.details() or "", trailing)
    if code is grpc.StatusCode.UNAVAILABLE:  # refused, reset, or no connection
        return OwnerUnreachable(f"{owner.grpc}: {error.details()}")
    if svc.owners is not None:
        svc.owners.unreachable(owner.key)
    return moved()


def unary(call: Call, owner: ForwardTo, method: str, request: Any) -> bytes:
    """The owner's answer to a unary Subscriber RPC, its bytes."""
    settings = call.svc.settings
    rpc = _channel(call.svc, owner).unary_unary(_SERVICE + method)  # bytes both ways
    try:
        answer: bytes = rpc(
            request.SerializeToString(),
            metadata=_metadata(call),
            # as a REST forward's: a pull waits for messages, an owner that is gone must not hold it
            timeout=settings.pull_wait_seconds + settings.kafka_timeout_seconds + 10,
        )
    except grpc.RpcError as exc:
        raise _failure(call.svc, owner, exc) from None
    return answer


def stream(call: Call, owner: ForwardTo, first: Any, requests_in: Iterator[Any], ended: Event) -> Iterator[bytes]:
    """A StreamingPull served by the owner: ``first`` and then the client's requests sent on as
    they come, the owner's responses passed back. It ends when the owner's stream ends, when the
    client goes (``ended``), or when this node stops (UNAVAILABLE, as a stream served here).
    ``OwnerUnreachable`` when the owner could not be reached before it sent anything; an owner
    lost after that ends the stream with UNAVAILABLE, which Google's clients answer by opening
    another."""
    svc = call.svc

    def sent() -> Iterator[bytes]:
        yield first.SerializeToString()
        for request in requests_in:
            yield request.SerializeToString()

    rpc = _channel(svc, owner).stream_stream(_SERVICE + "StreamingPull")
    responses = rpc(sent(), metadata=_metadata(call))
    watcher = gevent.spawn(_cancel_at_end, responses, ended, svc.stopping)
    relayed = False
    try:
        for response in responses:
            relayed = True
            yield response
    except grpc.RpcError as exc:
        if svc.stopping.is_set():
            raise AmsError.unavailable("This node is stopping: open the stream again") from None
        if ended.is_set():
            return  # the client went, and its stream to the owner with it
        failure = _failure(svc, owner, exc)
        if relayed and isinstance(failure, OwnerUnreachable):
            raise AmsError.unavailable("The subscription's owner went: open the stream again") from None
        raise failure from None
    finally:
        watcher.kill(block=False)
        with contextlib.suppress(Exception):
            responses.cancel()


def _cancel_at_end(responses: Any, ended: Event, stopping: Event) -> None:
    """Cancel the stream to the owner once the client's stream ends or this node stops."""
    gevent.wait([ended, stopping], count=1)
    responses.cancel()
