"""Pull, acknowledge, deadlines and seek at the subscription's owner (consume_owner; see
ams_app/service/owner.py and docs/production.md).

Served here when this node owns the subscription (or when nobody needs to: the embedded
backend, consume_owner off); otherwise sent on to the owner's REST API as the REST API forwards
(ams_app/api/forward.py: the caller's token, marked as forwarded, over verified TLS when the
nodes speak HTTPS), and the owner's answer read back. An acknowledgement sent on asks for each
id on its own (``ACKS_HEADER``), as Pub/Sub acknowledges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ams_app import jsoncodec
from ams_app.api.forward import ACKS_HEADER, EACH, call_owner, through_owner
from ams_app.backends.log import StoredMessage
from ams_app.errors import AmsError
from ams_app.models import Subscription, subscription_key
from ams_app.pubsub.calls import Call
from ams_app.service import requests
from ams_app.service.owner import ForwardTo
from ams_app.service.requests import AckRef, DeadlineChange, PullRequest, SeekTarget
from ams_app.service.subscriptions import Delivery
from ams_app.timeutil import now_ns, parse_iso8601_ns, zulu_nanos

R = TypeVar("R")


def _at_owner(call: Call, sub_name: str, here: Callable[[], R], there: Callable[[ForwardTo], R]) -> R:
    svc = call.svc
    if svc.owners is None:
        return here()
    key = subscription_key(call.project.uuid, sub_name)
    url = svc.owners.elsewhere(key)
    if url is None:
        try:
            return here()
        except ForwardTo as found:
            return through_owner(svc, found, there, here)
    return through_owner(svc, ForwardTo(url, key), there, here)


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


def _delivery(item: dict[str, Any]) -> Delivery:
    m = item["message"]
    stored = StoredMessage(
        int(m["messageId"]), parse_iso8601_ns(m["publishTime"]), m.get("data", ""), m.get("attributes") or {}
    )
    stored.ordering_key = m.get("orderingKey", "")
    return Delivery(item["ackId"], stored, item.get("deliveryAttempt"))


def pull(call: Call, sub: Subscription, request: PullRequest) -> list[Delivery]:
    def there(target: ForwardTo) -> list[Delivery]:
        body = {"maxMessages": request.max_messages, "returnImmediately": request.return_immediately}
        return [_delivery(item) for item in _post(call, target, sub.name, "pull", body).get("receivedMessages", [])]

    return _at_owner(call, sub.name, lambda: call.svc.pull(call.project, sub, request), there)


def acknowledge(call: Call, sub: Subscription, refs: list[AckRef]) -> None:
    received = now_ns()

    def here() -> None:
        call.svc.acknowledge(call.project, sub, refs, received, cumulative=False)

    def there(target: ForwardTo) -> None:
        _post(call, target, sub.name, "acknowledge", {"ackIds": _ack_ids(call, sub.name, refs)}, **{ACKS_HEADER: EACH})

    _at_owner(call, sub.name, here, there)


def modify_deadline(call: Call, sub: Subscription, refs: list[AckRef], seconds: int) -> None:
    received = now_ns()

    def here() -> None:
        call.svc.modify_ack_deadline(call.project, sub.name, DeadlineChange(seconds, refs), received)

    def there(target: ForwardTo) -> None:
        body = {"ackIds": _ack_ids(call, sub.name, refs), "ackDeadlineSeconds": seconds}
        _post(call, target, sub.name, "modifyAckDeadline", body)

    _at_owner(call, sub.name, here, there)


def seek(call: Call, sub: Subscription, target: SeekTarget) -> None:
    def here() -> None:
        call.svc.seek(call.caller, call.project, sub, target)

    def there(owner: ForwardTo) -> None:
        if target.snapshot:
            body = {"snapshot": f"projects/{call.project.name}/snapshots/{target.snapshot}"}
        else:
            body = {"time": zulu_nanos(target.time_ns)}
        _post(call, owner, sub.name, "seek", body)

    _at_owner(call, sub.name, here, there)
