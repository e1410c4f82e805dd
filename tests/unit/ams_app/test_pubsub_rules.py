"""The gRPC edge's rules, in-process (ams_app/pubsub/, docs/pubsub.md): tokens in metadata, AMS
errors as gRPC status, names, request bodies, and a stream's flow control."""

from __future__ import annotations

import time

import grpc
import pytest
from google.pubsub_v1.types import pubsub as ps

from ams_app.backends.log import StoredMessage
from ams_app.errors import AmsError
from ams_app.pubsub import calls, convert
from ams_app.pubsub.streaming import _Stream
from ams_app.service.subscriptions import Delivery


def raw(message: object) -> object:
    """The protobuf message behind a proto-plus one (what the server's handlers get)."""
    return type(message).pb(message)  # type: ignore[attr-defined]


class Metadata:
    def __init__(self, *pairs: tuple[str, str]) -> None:
        self.pairs = pairs

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.pairs


@pytest.mark.parametrize(
    ("pairs", "token"),
    [
        ((("x-goog-api-key", "k1"),), "k1"),
        ((("authorization", "Bearer k2"),), "k2"),
        ((("authorization", "bearer  k3 "),), "k3"),
        ((("x-api-key", "k4"),), "k4"),
        ((("authorization", "Basic abc"),), ""),
        ((("x-goog-request-params", "topic=x"),), ""),
        ((), ""),
    ],
)
def test_the_token_comes_from_any_of_three_headers(pairs: tuple[tuple[str, str], ...], token: str) -> None:
    assert calls.token_of(Metadata(*pairs)) == token  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AmsError.invalid_data("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (AmsError.too_large(), grpc.StatusCode.INVALID_ARGUMENT),
        (AmsError.unauthorized(), grpc.StatusCode.UNAUTHENTICATED),
        (AmsError.forbidden(), grpc.StatusCode.PERMISSION_DENIED),
        (AmsError.not_found("Topic"), grpc.StatusCode.NOT_FOUND),
        (AmsError.conflict("Topic"), grpc.StatusCode.ALREADY_EXISTS),
        (AmsError.generic_conflict("in use"), grpc.StatusCode.FAILED_PRECONDITION),
        (AmsError.unavailable("down"), grpc.StatusCode.UNAVAILABLE),
        (AmsError.internal(), grpc.StatusCode.INTERNAL),
        (AmsError(501, "no", "UNIMPLEMENTED"), grpc.StatusCode.UNIMPLEMENTED),
    ],
)
def test_ams_errors_have_their_grpc_status(error: AmsError, code: grpc.StatusCode) -> None:
    assert calls.status_code(error) == code


def test_names() -> None:
    assert convert.parse_name("projects/p/topics/t", "topics") == ("p", "t")
    assert convert.parse_project("projects/p") == "p"
    for bad in ("projects/p/subscriptions/s", "projects/p/topics/", "p/topics/t", "projects/p/topics/t/x"):
        with pytest.raises(AmsError) as refused:
            convert.parse_name(bad, "topics")
        assert refused.value.code == 400
    with pytest.raises(AmsError):
        convert.parse_project("projects/")
    assert convert.json_name("dead_letter_policy") == "deadLetterPolicy"
    assert convert.json_name("filter") == "filter"


def test_a_subscription_body_keeps_what_the_service_does_and_refuses_what_it_cannot() -> None:
    pb = raw(
        ps.Subscription(
            name="projects/p/subscriptions/s",
            topic="projects/p/topics/t",
            ack_deadline_seconds=30,
            labels={"team": "a"},
            retry_policy=ps.RetryPolicy(minimum_backoff={"seconds": 1}),
            enable_exactly_once_delivery=True,
        )
    )
    assert convert.subscription_body(pb) == {
        "topic": "projects/p/topics/t",
        "ackDeadlineSeconds": 30,
        "retryPolicy": {"minimumBackoff": "1s"},
        "enableExactlyOnceDelivery": True,
    }
    exported = raw(ps.Subscription(topic="projects/p/topics/t", bigquery_config={"table": "x.y.z"}))
    with pytest.raises(AmsError, match="bigqueryConfig"):
        convert.subscription_body(exported)
    kept_a_day = raw(ps.Subscription(topic="projects/p/topics/t", message_retention_duration={"seconds": 86400}))
    with pytest.raises(AmsError, match="messageRetentionDuration"):
        convert.subscription_body(kept_a_day)
    pushed = raw(ps.Subscription(topic="projects/p/topics/t", push_config={"push_endpoint": "https://e.example"}))
    assert convert.subscription_body(pushed)["pushConfig"] == {
        "type": "http_endpoint",
        "pushEndpoint": "https://e.example",
    }


def delivery(ack_id: str, size: int = 4) -> Delivery:
    return Delivery(ack_id, StoredMessage(0, 0, "QUJD" * (size // 3), {}))


def stream(max_messages: int = 0, max_bytes: int = 0) -> _Stream:
    first = raw(
        ps.StreamingPullRequest(
            stream_ack_deadline_seconds=60, max_outstanding_messages=max_messages, max_outstanding_bytes=max_bytes
        )
    )
    return _Stream(None, "s", first)  # type: ignore[arg-type]


def test_a_stream_sends_no_more_than_its_flow_control_allows() -> None:
    s = stream(max_messages=3)
    assert s.room() == 3
    s.sent([delivery("a"), delivery("b")])
    assert s.room() == 1
    s.sent([delivery("c")])
    assert s.room() == 0
    s.settle(["a", "unknown"], 0)  # acknowledged (an id of another stream is passed over)
    assert s.room() == 1
    s.settle(["b"], 30)  # leased longer: still out
    assert s.room() == 1
    unlimited = stream()
    unlimited.sent([delivery(str(i)) for i in range(5000)])
    assert unlimited.room() > 1000


def test_a_streams_bytes_count_too() -> None:
    s = stream(max_bytes=10)
    s.sent([delivery("a", 6)])
    assert s.room() > 0
    s.sent([delivery("b", 6)])
    assert s.room() == 0
    s.settle(["a"], 0)
    assert s.room() > 0


def test_what_ran_out_of_its_lease_leaves_the_stream_at_its_limit() -> None:
    s = stream(max_messages=2)
    s.sent([delivery("a"), delivery("b")])
    assert s.room() == 0
    past = time.monotonic() - 1
    s.out["a"] = (s.out["a"][0], past)
    s._next_sweep = 0.0
    assert s.room() == 1
    assert "a" not in s.out
