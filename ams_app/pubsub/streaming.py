"""StreamingPull: a bidirectional stream that delivers a subscription's messages as they come
(docs/pubsub.md, "StreamingPull").

The first request names the subscription and the stream's ack deadline (10 to 600 seconds), and
may set flow control: at most ``max_outstanding_messages`` and ``max_outstanding_bytes`` out on
the stream, unacknowledged (0: no limit). The stream pulls (in waits of a second, so that it sees
its end), leases what it sends for the stream's deadline, and sends each response with the
subscription's properties (Google's clients read exactly-once from every response).

Later requests may carry acknowledgements and deadline changes (Google's Python client sends its
own over the unary RPCs instead; others use the stream), a new stream deadline, or nothing (a
heartbeat). With exactly-once on, the stream answers its acknowledgements and deadline changes
with confirmations naming the ids that failed.

What is out on a stream is counted down by the acknowledgements and deadline changes that reach
this node, the stream's own and the unary ones (``settled``); one made through another node is
counted when its lease would have ended. A stream ends when the client closes it or goes, when the
subscription goes (NOT_FOUND), or when the node stops: then UNAVAILABLE, which Google's clients
answer by opening a new stream (through the load balancer, to another node). Messages pulled for a
stream that ended before they were sent are given back at once.

A stream that reaches a node other than the subscription's owner is passed on whole to the
owner's gRPC API (ams_app/pubsub/relay.py) and served there: its flow control, its leases and the
acknowledgements of its messages are then all the owner's."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import gevent
import grpc
from gevent.event import Event
from gevent.queue import Empty, Queue
from google.pubsub_v1.types import pubsub as ps

from ams_app.api.forward import OwnerUnreachable
from ams_app.errors import AmsError
from ams_app.models import subscription_key
from ams_app.pubsub import convert, owned, relay
from ams_app.pubsub.calls import Call, authorize, fresh
from ams_app.service.core import AmsService
from ams_app.service.owner import ForwardTo, moved
from ams_app.service.requests import PullRequest
from ams_app.service.subscriptions import Delivery

log = logging.getLogger("ams.grpc")
StreamingPullResponse = ps.StreamingPullResponse.pb()
#: A stream's ack deadline bounds, in seconds (Pub/Sub's).
MIN_STREAM_DEADLINE_S, MAX_STREAM_DEADLINE_S = 10, 600
#: Seconds one pull of a stream waits for a first message before it looks at the stream again.
_PULL_WAIT_S = 1.0


class _Stream:
    """One open StreamingPull: what is out on it, and its flow control."""

    def __init__(self, call: Call, sub_name: str, first: Any) -> None:
        self.call = call
        self.sub_name = sub_name
        self.deadline_s = first.stream_ack_deadline_seconds
        self.max_messages = max(int(first.max_outstanding_messages), 0)
        self.max_bytes = max(int(first.max_outstanding_bytes), 0)
        #: ack id -> (payload bytes, monotonic time its lease ends as far as this node knows)
        self.out: dict[str, tuple[int, float]] = {}
        self.out_bytes = 0
        self._next_sweep = 0.0
        self.changed = Event()  # something went out of ``out``, or the stream ended
        self.ended = Event()
        self.error: AmsError | None = None
        self.replies: Queue[Any] = Queue()
        self.properties: dict[str, bool] = {}

    def room(self) -> int:
        """How many messages the next pull may take: 0 while the stream is at its limits. What
        is out is looked through (for leases that ended) only at the limits, and at most once a
        second: a stream with room does not pay for it on every pull."""
        over = (self.max_messages and len(self.out) >= self.max_messages) or (
            self.max_bytes and self.out_bytes >= self.max_bytes
        )
        now = time.monotonic()
        if over and now >= self._next_sweep:
            self._next_sweep = now + 1.0
            for ack_id in [a for a, (_, until) in self.out.items() if until <= now]:
                self.out_bytes -= self.out.pop(ack_id)[0]
        if self.max_bytes and self.out_bytes >= self.max_bytes:
            return 0
        if not self.max_messages:
            return 2**31
        return max(self.max_messages - len(self.out), 0)

    def sent(self, deliveries: list[Delivery]) -> None:
        until = time.monotonic() + self.deadline_s
        for d in deliveries:
            size = len(d.message.data) * 3 // 4  # base64 text: its bytes
            self.out[d.ack_id] = (size, until)
            self.out_bytes += size

    def settle(self, ack_ids: Any, seconds: int) -> None:
        """Acknowledged or given back (``seconds`` 0), or leased ``seconds`` more."""
        now = time.monotonic()
        for ack_id in ack_ids:
            found = self.out.get(ack_id)
            if found is None:
                continue
            if seconds:
                self.out[ack_id] = (found[0], now + seconds)
            else:
                del self.out[ack_id]
                self.out_bytes -= found[0]
        self.changed.set()


class StreamingPull:
    def __init__(self, svc: AmsService) -> None:
        self.svc = svc
        self._open: dict[str, set[_Stream]] = {}
        self._running = 0
        self.idle = Event()  # no stream is being served (``ams serve`` waits for it at a stop)
        self.idle.set()

    def settled(self, project_uuid: str, sub_name: str, ack_ids: Any, seconds: int) -> None:
        """Acknowledgements (``seconds`` 0) and deadline changes made through the unary RPCs."""
        for stream in list(self._open.get(subscription_key(project_uuid, sub_name), ())):
            stream.settle(ack_ids, seconds)

    def serve(self, requests_in: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        first = next(requests_in, None)
        if first is None:
            return
        if not first.subscription:
            raise AmsError.invalid_data("The first request of a stream names its subscription")
        project, name = convert.parse_name(first.subscription, "subscriptions")
        with fresh(self.svc):
            call = authorize(self.svc, context, "subscriptions:pull", project)
            sub = self.svc.subscription_to_pull(call.caller, call.project, name)
        _check_deadline(first.stream_ack_deadline_seconds)
        if first.ack_ids or first.modify_deadline_ack_ids:
            raise AmsError.invalid_data("The first request of a stream carries no ack ids")
        self._running += 1
        self.idle.clear()
        try:
            owner = self._owner_elsewhere(call, name)
            if owner is None:
                yield from self._serve_here(call, name, first, requests_in, context, sub.exactly_once, sub.ordered)
                return
            ended = Event()
            context.add_callback(ended.set)
            try:
                yield from relay.stream(call, owner, first, requests_in, ended)
            except OwnerUnreachable:
                # its claim holds until ZooKeeper ends it: the client's next stream finds the next owner
                assert self.svc.owners is not None
                self.svc.owners.wait_for_release(owner.key, owner.url)
                raise moved() from None
        finally:
            self._running -= 1
            if not self._running:
                self.idle.set()

    def _owner_elsewhere(self, call: Call, name: str) -> ForwardTo | None:
        """The owner the whole stream goes to (ams_app/pubsub/relay.py): another node that owns
        the subscription and serves the gRPC API. None: served here, whose pulls go to an owner
        without one through its REST API (ams_app/pubsub/owned.py)."""
        owners = self.svc.owners
        if owners is None:
            return None
        owner = owners.owner_elsewhere(subscription_key(call.project.uuid, name))
        if owner is None or not owner.grpc:
            return None
        if call.forwarded:  # the node that sent it here thinks this one owns it: ownership is moving
            raise moved()
        return owner

    def _serve_here(
        self,
        call: Call,
        name: str,
        first: Any,
        requests_in: Iterator[Any],
        context: grpc.ServicerContext,
        exactly_once: bool,
        ordered: bool,
    ) -> Iterator[Any]:
        stream = _Stream(call, name, first)
        key = subscription_key(call.project.uuid, name)
        self._open.setdefault(key, set()).add(stream)
        context.add_callback(lambda: (stream.ended.set(), stream.changed.set()))
        reader = gevent.spawn(self._read, stream, requests_in)
        try:
            yield from self._deliver(stream, exactly_once, ordered)
        finally:
            stream.ended.set()
            reader.kill(block=False)
            streams = self._open.get(key)
            if streams is not None:
                streams.discard(stream)
                if not streams:
                    self._open.pop(key, None)

    def _deliver(self, stream: _Stream, exactly_once: bool, ordered: bool) -> Iterator[Any]:
        call = stream.call
        properties = {"exactly_once_delivery_enabled": exactly_once, "message_ordering_enabled": ordered}
        stream.properties = properties
        while True:
            while True:  # confirmations of the stream's own acknowledgements first
                try:
                    yield stream.replies.get_nowait()
                except Empty:
                    break
            if stream.error is not None:
                raise stream.error
            if stream.ended.is_set():
                return
            if self.svc.stopping.is_set():
                raise AmsError.unavailable("This node is stopping: open the stream again")
            room = stream.room()
            if room <= 0:
                stream.changed.clear()
                stream.changed.wait(_PULL_WAIT_S)
                continue
            with fresh(self.svc):
                sub = self.svc.subscription_to_pull(call.caller, call.project, stream.sub_name)  # still there?
                if self._owner_elsewhere(call, stream.sub_name) is not None:
                    # another node took the subscription (this one found nobody holding it when the
                    # stream came): the client's next stream goes there whole
                    raise AmsError.unavailable("The subscription is served by another node: open the stream again")
            wanted = PullRequest(
                min(room, self.svc.settings.max_pull_messages),
                False,
                ack_deadline=stream.deadline_s,
                wait_seconds=_PULL_WAIT_S,
            )
            got = owned.pull(call, sub, wanted)
            if not got:
                continue
            if stream.ended.is_set():  # nobody to send them to: given back at once
                self._give_back(stream, got)
                return
            stream.sent(got)
            yield StreamingPullResponse(
                received_messages=[convert.received(d) for d in got], subscription_properties=properties
            )

    def _give_back(self, stream: _Stream, got: list[Delivery]) -> None:
        call = stream.call
        with contextlib.suppress(AmsError):
            with fresh(self.svc):
                sub = self.svc.subscription(call.project, stream.sub_name)
            refs = owned.ack_refs(call, stream.sub_name, [d.ack_id for d in got])
            owned.modify_deadline(call, sub, refs, 0)

    def _read(self, stream: _Stream, requests_in: Iterator[Any]) -> None:
        """The client's later requests: acknowledgements, deadline changes, a new stream
        deadline, heartbeats. A malformed one ends the stream with INVALID_ARGUMENT."""
        try:
            for request in requests_in:
                self._take(stream, request)
        except AmsError as error:
            stream.error = error
        except Exception as exc:  # the stream broke (the client went): nothing more to read
            log.debug("stream of %s: %s", stream.sub_name, exc)
        finally:
            stream.ended.set()
            stream.changed.set()

    def _take(self, stream: _Stream, request: Any) -> None:
        call = stream.call
        if request.subscription and request.subscription != convert.name(
            call.project, "subscriptions", stream.sub_name
        ):
            raise AmsError.invalid_data("Only the first request of a stream names its subscription")
        if request.max_outstanding_messages or request.max_outstanding_bytes:
            raise AmsError.invalid_data("Flow control is set by the first request of a stream only")
        if request.stream_ack_deadline_seconds:
            _check_deadline(request.stream_ack_deadline_seconds)
            stream.deadline_s = request.stream_ack_deadline_seconds
        if len(request.modify_deadline_seconds) != len(request.modify_deadline_ack_ids):
            raise AmsError.invalid_data("modify_deadline_seconds and modify_deadline_ack_ids differ in length")
        if not (request.ack_ids or request.modify_deadline_ack_ids):
            if not request.stream_ack_deadline_seconds:
                # a heartbeat: answered (the Go client opens a new stream when one goes unanswered)
                stream.replies.put(StreamingPullResponse(subscription_properties=stream.properties))
            return
        with fresh(self.svc):
            sub = self.svc.subscription(call.project, stream.sub_name)
        if request.ack_ids:
            refs = owned.ack_refs(call, stream.sub_name, request.ack_ids)
            failed = self._settle(lambda: owned.acknowledge(call, sub, refs))
            stream.settle(request.ack_ids, 0)
            if sub.exactly_once:
                confirmation = {
                    "ack_ids": [a for a in request.ack_ids if a not in failed],
                    "invalid_ack_ids": [a for a in request.ack_ids if a in failed],
                }
                stream.replies.put(StreamingPullResponse(acknowledge_confirmation=confirmation))
        by_seconds: dict[int, list[str]] = {}
        for ack_id, seconds in zip(request.modify_deadline_ack_ids, request.modify_deadline_seconds, strict=True):
            if not 0 <= seconds <= MAX_STREAM_DEADLINE_S:
                raise AmsError.invalid_data(f"modify_deadline_seconds must be between 0 and {MAX_STREAM_DEADLINE_S}")
            by_seconds.setdefault(seconds, []).append(ack_id)
        for seconds, ids in by_seconds.items():
            refs = owned.ack_refs(call, stream.sub_name, ids)
            failed = self._settle(lambda refs=refs, seconds=seconds: owned.modify_deadline(call, sub, refs, seconds))
            stream.settle(ids, seconds)
            if sub.exactly_once:
                confirmation = {
                    "ack_ids": [a for a in ids if a not in failed],
                    "invalid_ack_ids": [a for a in ids if a in failed],
                }
                stream.replies.put(StreamingPullResponse(modify_ack_deadline_confirmation=confirmation))
        stream.changed.set()

    @staticmethod
    def _settle(apply: Any) -> set[str]:
        """Run an acknowledgement or deadline change; the ack ids refused on an exactly-once
        subscription (the others were taken)."""
        try:
            apply()
        except AmsError as error:
            refused = (error.more or {}).get("ackIdErrors")
            if isinstance(refused, dict):
                return set(refused)
            raise
        return set()


def _check_deadline(seconds: int) -> None:
    if not MIN_STREAM_DEADLINE_S <= seconds <= MAX_STREAM_DEADLINE_S:
        raise AmsError.invalid_data(
            f"stream_ack_deadline_seconds must be between {MIN_STREAM_DEADLINE_S} and {MAX_STREAM_DEADLINE_S}"
        )
