"""Pull, acknowledge, deadlines and seek at the subscription's owner (consume_owner; see
ams_app/service/owner.py and docs/production.md).

Served here when this node owns the subscription (or when nobody needs to: the embedded
backend, consume_owner off), or when another node sent the call here (then a subscription that
another node owns is UNAVAILABLE: ownership is moving). Otherwise the call goes on to the owner:
to its gRPC API as it came (ams_app/pubsub/relay.py), or, to an owner that serves none, to its
REST API as the REST API forwards (ams_app/api/forward.py: the caller's token, marked as
forwarded, over verified TLS when the nodes speak HTTPS), and the owner's answer read back. An
acknowledgement sent on that way asks for each id on its own (``ACKS_HEADER``), as Pub/Sub
acknowledges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from google.pubsub_v1.types import pubsub as ps

from ams_app import jsoncodec
from ams_app.api.forward import ACKS_HEADER, EACH, call_owner, through_owner
from ams_app.backends.log import StoredMessage
from ams_app.errors import AmsError
from ams_app.models import Subscription, subscription_key
from ams_app.pubsub import convert, relay
from ams_app.pubsub.calls import Call
from ams_app.service import requests
from ams_app.service.owner import ForwardTo, moved
from ams_app.service.requests import AckRef, DeadlineChange, PullRequest, SeekTarget
from ams_app.service.subscriptions import Delivery
from ams_app.timeutil import now_ns, parse_iso8601_ns, zulu_nanos

R = TypeVar("R")
PullResponse = ps.PullResponse.pb()
AcknowledgeRequest = ps.AcknowledgeRequest.pb()
ModifyAckDeadlineRequest = ps.ModifyAckDeadlineRequest.pb()


def _at_owner(call: Call, sub_name: str, here: Callable[[], R], there: Callable[[ForwardTo], R]) -> R:
    svc = call.svc
    if svc.owners is None:
        return here()
    if call.forwarded:  # the node that sent it here thinks this one owns it
        try:
            return here()
        except ForwardTo:
            raise moved() from None
    target = svc.owners.owner_elsewhere(subscription_key(call.project.uuid, sub_name))
    if target is None:
        try:
            return here()
        except ForwardTo as found:
            return through_owner(svc, found, there, here)
    return through_owner(svc, target, there, here)


def _post(call: Call, target: ForwardTo, sub_name: str, verb: str, body: dict[str, Any], **headers: str) -> Any:
    """POST ``body`` to the subscription's ``verb`` at the owner; its JSON answer, or its error."""
    path = f"/v1/projects/{call.project.name}/subscriptions/{sub_name}:{verb}"
    sent = {"x-api-key": call.token, "content-type": "application/json", **headers}
    answer = call_owner(call.svc, target, "POST", path, jsoncodec.dumps(body), sent)
    data = jsoncodec.loads(answer.data) if answer.data else {}
    if answer.status != 200:
        error = data.get("error") if isinstance(data, dict) else None
        if not isinstance(error, dict):
            raise AmsError(answer.status, f"the subscription's owner answered {answer.status}", "UNAVAILABLE")
        more = {k: v for k, v in error.items() if k not in ("code", "message", "status")}
        raise AmsError(answer.status, str(error.get("message")), str(error.get("status")), more or None)
    return data


def ack_refs(call: Call, sub_name: str, ack_ids: Any) -> list[AckRef]:
    """The messages that ack ids of the subscription name, read by the REST API's parser
    (INVALID_ARGUMENT for an id that is malformed or of another subscription)."""
    return requests.ack_refs({"ackIds": list(ack_ids)}, call.project.name, sub_name)


def _ack_ids(call: Call, sub_name: str, refs: list[AckRef]) -> list[str]:
    prefix = f"projects/{call.project.name}/subscriptions/{sub_name}:"
    return [f"{prefix}{offset}" if attempt is None else f"{prefix}{offset}.{attempt}" for offset, attempt in refs]


def _named(call: Call, sub: Subscription, refs: list[AckRef]) -> dict[str, Any]:
    """The subscription's name and the ack ids of ``refs``, as an Acknowledge or ModifyAckDeadline
    request names them."""
    name = convert.name(call.project, "subscriptions", sub.name)
    return {"subscription": name, "ack_ids": _ack_ids(call, sub.name, refs)}


def _delivery(item: dict[str, Any]) -> Delivery:
    m = item["message"]
    stored = StoredMessage(
        int(m["messageId"]), parse_iso8601_ns(m["publishTime"]), m.get("data", ""), m.get("attributes") or {}
    )
    stored.ordering_key = m.get("orderingKey", "")
    return Delivery(item["ackId"], stored, item.get("deliveryAttempt"))


def _pulled_there(call: Call, sub: Subscription, request: PullRequest, target: ForwardTo) -> list[Delivery]:
    body = {"maxMessages": request.max_messages, "returnImmediately": request.return_immediately}
    return [_delivery(item) for item in _post(call, target, sub.name, "pull", body).get("receivedMessages", [])]


def pull(call: Call, sub: Subscription, request: PullRequest) -> list[Delivery]:
    """The deliveries of a pull (a stream's, served at this node)."""
    return _at_owner(
        call,
        sub.name,
        lambda: call.svc.pull(call.project, sub, request),
        lambda target: _pulled_there(call, sub, request, target),
    )


def pull_response(call: Call, sub: Subscription, request: PullRequest, sent: Any) -> Any:
    """The answer to the Pull RPC ``sent``: a PullResponse, or the owner's, its bytes."""

    def answer(deliveries: list[Delivery]) -> Any:
        return PullResponse(received_messages=[convert.received(d) for d in deliveries])

    def there(target: ForwardTo) -> Any:
        if target.grpc:
            return relay.unary(call, target, "Pull", sent)
        return answer(_pulled_there(call, sub, request, target))

    return _at_owner(call, sub.name, lambda: answer(call.svc.pull(call.project, sub, request)), there)


def acknowledge(call: Call, sub: Subscription, refs: list[AckRef], sent: Any = None) -> None:
    """Acknowledge each message on its own. ``sent``: the Acknowledge RPC that asks it, passed on
    as it came to an owner with a gRPC API (else one is made of ``refs``)."""
    received = now_ns()

    def here() -> None:
        # answered once applied, as Pub/Sub's at-least-once; stored first when exactly-once
        call.svc.acknowledge(call.project, sub, refs, received, cumulative=False, durable=sub.exactly_once)

    def there(target: ForwardTo) -> None:
        if target.grpc:
            request = sent if sent is not None else AcknowledgeRequest(**_named(call, sub, refs))
            relay.unary(call, target, "Acknowledge", request)
            return
        _post(call, target, sub.name, "acknowledge", {"ackIds": _ack_ids(call, sub.name, refs)}, **{ACKS_HEADER: EACH})

    _at_owner(call, sub.name, here, there)


def modify_deadline(call: Call, sub: Subscription, refs: list[AckRef], seconds: int, sent: Any = None) -> None:
    """Lease the messages ``seconds`` from now, or give them back (0). ``sent``: as acknowledge's."""
    received = now_ns()

    def here() -> None:
        call.svc.modify_ack_deadline(call.project, sub.name, DeadlineChange(seconds, refs), received)

    def there(target: ForwardTo) -> None:
        if target.grpc:
            named = _named(call, sub, refs)
            request = sent if sent is not None else ModifyAckDeadlineRequest(**named, ack_deadline_seconds=seconds)
            relay.unary(call, target, "ModifyAckDeadline", request)
            return
        body = {"ackIds": _ack_ids(call, sub.name, refs), "ackDeadlineSeconds": seconds}
        _post(call, target, sub.name, "modifyAckDeadline", body)

    _at_owner(call, sub.name, here, there)


def seek(call: Call, sub: Subscription, target: SeekTarget, sent: Any = None) -> None:
    def here() -> None:
        call.svc.seek(call.caller, call.project, sub, target)

    def there(owner: ForwardTo) -> None:
        if owner.grpc and sent is not None:
            relay.unary(call, owner, "Seek", sent)
            return
        if target.snapshot:
            body = {"snapshot": f"projects/{call.project.name}/snapshots/{target.snapshot}"}
        else:
            body = {"time": zulu_nanos(target.time_ns)}
        _post(call, owner, sub.name, "seek", body)

    _at_owner(call, sub.name, here, there)
