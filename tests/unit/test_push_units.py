"""Push delivery building blocks, one at a time: pacing, the bodies endpoints receive,
rendezvous ownership, the in-memory coordinator, the HTTP client's failures and the parse of
``pushConfig`` bodies (docs/push.md)."""

from __future__ import annotations

import base64
import dataclasses
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ams_app.backends.log import StoredMessage
from ams_app.errors import AmsError
from ams_app.models import PushConfig
from ams_app.push.coordination import LocalCoordinator, preferred_worker
from ams_app.push.pacing import Pacer, RateLimiter
from ams_app.service import push_config
from ams_app.settings import Settings
from ams_app.webhook import Outcome, PushClient, endpoint_body, mattermost_body
from ams_app.wire import message_json

#: The keys a coordinator is asked about in the LocalCoordinator tests.
ASKED = ["k", "other"]

HEX64 = re.compile(r"^[0-9a-f]{64}$")
SUB = "/projects/P/subscriptions/S"
#: 2023-11-14T22:13:20 UTC and 123456789 ns.
PUBLISH_NS = 1_700_000_000_123_456_789
PUBLISH_TIME = "2023-11-14T22:13:20.123456789Z"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def stored(offset: int = 7, text: str = "hello", attributes: dict[str, str] | None = None) -> StoredMessage:
    return StoredMessage(offset=offset, publish_ns=PUBLISH_NS, data=b64(text), attributes=attributes or {})


# =================================================================================== Pacer ====
def test_linear_first_request_may_go_at_once() -> None:
    pacer = Pacer("linear", 3000)
    assert pacer.next_at() == float("-inf")
    assert pacer.next_at() < time.monotonic()


@pytest.mark.parametrize("success", [True, False])
def test_linear_spaces_every_request_by_the_period(success: bool) -> None:
    pacer = Pacer("linear", 2500)
    pacer.record(success, now=100.0)
    assert pacer.next_at() == pytest.approx(102.5)
    pacer.record(not success, now=102.5)
    assert pacer.next_at() == pytest.approx(105.0)
    pacer.record(success, now=110.0)  # a late request: the period counts from it
    assert pacer.next_at() == pytest.approx(112.5)


def test_linear_negative_period_is_no_wait() -> None:
    pacer = Pacer("linear", -5)
    pacer.record(True, now=50.0)
    assert pacer.next_at() == pytest.approx(50.0)


def test_slowstart_starts_at_one_second_and_halves_to_the_floor() -> None:
    pacer = Pacer("slowstart", 0)
    assert pacer.next_at() == float("-inf")
    pacer.record(True, now=0.0)
    assert pacer.next_at() == pytest.approx(0.5)  # 1 s halved
    pacer.record(True, now=10.0)
    assert pacer.next_at() == pytest.approx(10.3)  # 0.25 is below the 300 ms floor
    for i in range(5):
        pacer.record(True, now=20.0 + i)
        assert pacer.next_at() == pytest.approx(20.3 + i)  # the floor holds


def test_slowstart_first_interval_is_one_second() -> None:
    pacer = Pacer("slowstart", 0)
    pacer.record(False, now=0.0)
    assert pacer.next_at() == pytest.approx(2.0)  # 1 s doubled


def test_slowstart_doubles_on_failure_up_to_a_day() -> None:
    pacer = Pacer("slowstart", 0)
    now = 0.0
    expected = 1.0
    for _ in range(30):
        pacer.record(False, now=now)
        expected = min(expected * 2, 86400.0)
        assert pacer.next_at() - now == pytest.approx(expected)
        now += 1.0
    assert pacer.next_at() - (now - 1.0) == pytest.approx(86400.0)  # the ceiling holds
    pacer.record(True, now=now)
    assert pacer.next_at() - now == pytest.approx(43200.0)  # and a success halves it again


def test_slowstart_from_the_floor_doubles() -> None:
    pacer = Pacer("slowstart", 0)
    for i in range(4):
        pacer.record(True, now=float(i))
    pacer.record(False, now=10.0)
    assert pacer.next_at() == pytest.approx(10.6)


def test_reconfigure_unchanged_keeps_the_slowstart_state() -> None:
    pacer = Pacer("slowstart", 0)
    pacer.record(False, now=0.0)
    pacer.record(False, now=1.0)  # interval 4 s
    pacer.reconfigure("slowstart", 0)
    assert pacer.next_at() == pytest.approx(5.0)
    pacer.record(False, now=5.0)
    assert pacer.next_at() == pytest.approx(13.0)  # kept doubling from 4 s


def test_reconfigure_unchanged_linear_keeps_the_interval() -> None:
    pacer = Pacer("linear", 3000)
    pacer.record(True, now=1.0)
    pacer.reconfigure("linear", 3000)
    assert pacer.next_at() == pytest.approx(4.0)


def test_reconfigure_changed_period_resets_and_keeps_last_request() -> None:
    pacer = Pacer("linear", 3000)
    pacer.record(True, now=10.0)
    pacer.reconfigure("linear", 500)
    assert pacer.last_request == 10.0
    assert pacer.next_at() == pytest.approx(10.5)


def test_reconfigure_changed_policy_resets_and_keeps_last_request() -> None:
    pacer = Pacer("slowstart", 0)
    for i in range(5):
        pacer.record(False, now=float(i))  # interval 32 s
    pacer.reconfigure("linear", 2000)
    assert pacer.last_request == 4.0
    assert pacer.next_at() == pytest.approx(6.0)
    pacer.reconfigure("slowstart", 0)  # back to slowstart: from 1 s again
    assert pacer.last_request == 4.0
    assert pacer.next_at() == pytest.approx(5.0)


def test_reconfigure_before_any_request_still_lets_the_first_go() -> None:
    pacer = Pacer("linear", 1000)
    pacer.reconfigure("slowstart", 0)
    assert pacer.next_at() == float("-inf")


# ============================================================================== RateLimiter ====
def test_rate_zero_never_delays() -> None:
    limiter = RateLimiter(0)
    now = time.monotonic()
    assert all(limiter.delay(now=now) == 0.0 for _ in range(10_000))
    assert limiter.delay() == 0.0


def test_burst_then_spacing_at_the_rate() -> None:
    limiter = RateLimiter(10, burst=10)
    now = time.monotonic()  # not before the limiter's creation
    for _ in range(10):
        assert limiter.delay(now=now) == 0.0
    assert limiter.delay(now=now) == pytest.approx(0.1)
    assert limiter.delay(now=now) == pytest.approx(0.2)


def test_tokens_refill_with_time() -> None:
    limiter = RateLimiter(10, burst=10)
    now = time.monotonic()
    for _ in range(10):
        limiter.delay(now=now)
    assert limiter.delay(now=now) == pytest.approx(0.1)  # in debt by one token
    # 0.5 s later: five tokens back, one of them pays the debt
    for _ in range(4):
        assert limiter.delay(now=now + 0.5) == 0.0
    assert limiter.delay(now=now + 0.5) == pytest.approx(0.1)


def test_refill_is_capped_at_the_burst() -> None:
    limiter = RateLimiter(10, burst=10)
    now = time.monotonic() + 1000.0  # idle for a long time
    for _ in range(10):
        assert limiter.delay(now=now) == 0.0
    assert limiter.delay(now=now) == pytest.approx(0.1)


def test_default_burst_is_the_rate_at_least_one() -> None:
    assert RateLimiter(200).burst == 200
    assert RateLimiter(0.5).burst == 1.0


# ============================================================================= bodies =========
def test_message_json_shape() -> None:
    out = message_json(stored(offset=42, attributes={"k": "v"}), decode=False)
    assert out == {"messageId": "42", "attributes": {"k": "v"}, "data": b64("hello"), "publishTime": PUBLISH_TIME}
    assert isinstance(out["messageId"], str)


def test_message_json_omits_empty_attributes() -> None:
    out = message_json(stored(offset=0), decode=False)
    assert "attributes" not in out
    assert out["messageId"] == "0"


def test_message_json_publish_time_has_nanoseconds() -> None:
    out = message_json(StoredMessage(1, 1_700_000_000_000_000_005, "", {}), decode=False)
    assert out["publishTime"] == "2023-11-14T22:13:20.000000005Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", out["publishTime"])


def test_message_json_decodes_when_asked() -> None:
    assert message_json(stored(text="héllo wörld"), decode=True)["data"] == "héllo wörld"
    assert message_json(stored(text="héllo wörld"), decode=False)["data"] == b64("héllo wörld")


@pytest.mark.parametrize("data", ["not base64!", "abc", "%%%%", "YW Jj"])
def test_invalid_base64_is_left_as_it_was(data: str) -> None:
    message = StoredMessage(1, PUBLISH_NS, data, {})
    assert message_json(message, decode=True)["data"] == data


@pytest.mark.parametrize("max_messages", [0, 1])
def test_endpoint_body_single_message(max_messages: int) -> None:
    config = PushConfig(type="http_endpoint", max_messages=max_messages)
    body = endpoint_body(config, SUB, [stored(attributes={"a": "b"})])
    assert body == {
        "message": {"messageId": "7", "attributes": {"a": "b"}, "data": b64("hello"), "publishTime": PUBLISH_TIME},
        "subscription": SUB,
    }


def test_endpoint_body_batch_even_for_one_message() -> None:
    config = PushConfig(type="http_endpoint", max_messages=5)
    body = endpoint_body(config, SUB, [stored()])
    assert set(body) == {"messages"}
    assert body["messages"] == [
        {"message": {"messageId": "7", "data": b64("hello"), "publishTime": PUBLISH_TIME}, "subscription": SUB}
    ]


def test_endpoint_body_batch_of_several() -> None:
    config = PushConfig(type="http_endpoint", max_messages=3, base64_decode=True)
    body = endpoint_body(config, SUB, [stored(offset=1, text="a"), stored(offset=2, text="b")])
    assert [(m["message"]["messageId"], m["message"]["data"], m["subscription"]) for m in body["messages"]] == [
        ("1", "a", SUB),
        ("2", "b", SUB),
    ]


def test_endpoint_body_decodes_when_configured() -> None:
    config = PushConfig(type="http_endpoint", max_messages=1, base64_decode=True)
    assert endpoint_body(config, SUB, [stored(text="plain")])["message"]["data"] == "plain"


@pytest.mark.parametrize(("decode", "text"), [(True, "hi there"), (False, b64("hi there"))])
def test_mattermost_body(decode: bool, text: str) -> None:
    config = PushConfig(
        type="mattermost",
        mattermost_url="https://mm.example.org/hooks/x",
        mattermost_username="bot",
        mattermost_channel="alerts",
        base64_decode=decode,
    )
    assert mattermost_body(config, stored(text="hi there")) == {"text": text, "username": "bot", "channel": "alerts"}


# ======================================================================== preferred_worker ====
KEYS = [f"project-uuid.sub-{i}" for i in range(1000)]
WORKERS = ["node-a-1-aaaaaa", "node-b-2-bbbbbb", "node-c-3-cccccc"]


def test_no_workers_no_owner() -> None:
    assert preferred_worker("k", []) is None


def test_a_single_worker_owns_everything() -> None:
    assert all(preferred_worker(k, ["only"]) == "only" for k in KEYS[:50])


def test_preferred_worker_is_deterministic_and_order_free() -> None:
    for key in KEYS[:100]:
        owner = preferred_worker(key, WORKERS)
        assert owner in WORKERS
        assert preferred_worker(key, list(WORKERS)) == owner
        assert preferred_worker(key, list(reversed(WORKERS))) == owner


def test_preferred_worker_spreads_the_keys() -> None:
    owners = [preferred_worker(k, WORKERS) for k in KEYS]
    for worker in WORKERS:
        assert owners.count(worker) > 200, (worker, owners.count(worker))


@pytest.mark.parametrize("gone", WORKERS)
def test_losing_a_worker_moves_only_its_keys(gone: str) -> None:
    before = {k: preferred_worker(k, WORKERS) for k in KEYS}
    rest = [w for w in WORKERS if w != gone]
    after = {k: preferred_worker(k, rest) for k in KEYS}
    for key in KEYS:
        if before[key] == gone:
            assert after[key] in rest
        else:
            assert after[key] == before[key], key
    # and adding it back moves back exactly those keys
    assert {k: preferred_worker(k, [*rest, gone]) for k in KEYS} == before


# ======================================================================== LocalCoordinator ====
@pytest.fixture
def coordinator() -> Iterator[LocalCoordinator]:
    coord = LocalCoordinator(dataclasses.replace(Settings(), node_name="unit"))
    yield coord
    coord.close()


def test_local_before_start(coordinator: LocalCoordinator) -> None:
    assert coordinator.worker_id.startswith("unit-")
    assert coordinator.workers() == []
    assert coordinator.ensure_registered() is False
    assert coordinator.owns("k") is False
    assert coordinator.claims(ASKED) == {}


def test_local_claims_do_not_count_before_start(coordinator: LocalCoordinator) -> None:
    coordinator.claim("k", {"worker": coordinator.worker_id})
    assert coordinator.owns("k") is False


def test_local_start_registers_itself(coordinator: LocalCoordinator) -> None:
    coordinator.start()
    assert coordinator.workers() == [coordinator.worker_id]
    assert coordinator.ensure_registered() is True
    assert preferred_worker("any", coordinator.workers()) == coordinator.worker_id


def test_local_claim_is_exclusive_and_released(coordinator: LocalCoordinator) -> None:
    coordinator.start()
    claim: dict[str, Any] = {"worker": coordinator.worker_id, "failures": 0, "error": ""}
    assert coordinator.claim("k", claim) is True
    assert coordinator.claim("k", claim) is False
    assert coordinator.claim("k", {"worker": "someone-else"}) is False
    assert coordinator.owns("k") is True
    assert coordinator.owns("other") is False
    assert coordinator.claims(ASKED) == {"k": claim}
    assert coordinator.claims(["other"]) == {}  # only what is asked about
    coordinator.release("k")
    assert coordinator.owns("k") is False
    assert coordinator.claims(ASKED) == {}
    coordinator.release("k")  # releasing twice is harmless
    assert coordinator.claim("k", claim) is True  # free again


def test_local_report_updates_the_claim(coordinator: LocalCoordinator) -> None:
    coordinator.start()
    me = coordinator.worker_id
    coordinator.claim("k", {"worker": me, "failures": 0, "error": ""})
    coordinator.report("k", {"worker": me, "failures": 3, "error": "HTTP 503"})
    assert coordinator.claims(ASKED) == {"k": {"worker": me, "failures": 3, "error": "HTTP 503"}}
    coordinator.report("unclaimed", {"worker": me, "failures": 1, "error": "x"})  # not ours: ignored
    assert set(coordinator.claims(ASKED)) == {"k"}


def test_local_claims_are_copies(coordinator: LocalCoordinator) -> None:
    coordinator.start()
    claim: dict[str, Any] = {"worker": coordinator.worker_id, "failures": 0}
    coordinator.claim("k", claim)
    claim["failures"] = 99
    coordinator.claims(ASKED)["k"]["failures"] = 42
    assert coordinator.claims(ASKED)["k"]["failures"] == 0


def test_local_close_forgets_everything(coordinator: LocalCoordinator) -> None:
    coordinator.start()
    coordinator.claim("a", {"worker": coordinator.worker_id})
    coordinator.claim("b", {"worker": coordinator.worker_id})
    coordinator.close()
    assert coordinator.claims(ASKED) == {}
    assert coordinator.workers() == []
    assert coordinator.owns("a") is False
    assert coordinator.owns("b") is False


# ============================================================================== PushClient ====
@pytest.fixture
def client() -> Iterator[PushClient]:
    push_client = PushClient(dataclasses.replace(Settings(), push_timeout_seconds=2.0))
    yield push_client
    push_client.close()


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_post_to_a_closed_port(client: PushClient, scheme: str) -> None:
    outcome = client.post(f"{scheme}://127.0.0.1:9/push", {"message": {}}, authorization="secret")
    assert isinstance(outcome, Outcome)
    assert outcome.ok is False
    assert outcome.detail.startswith("connection failed"), outcome.detail
    assert len(outcome.detail) <= 300


def test_deliver_to_a_closed_port(client: PushClient) -> None:
    config = PushConfig(type="http_endpoint", push_endpoint="https://127.0.0.1:9/push", max_messages=1)
    outcome = client.deliver(config, SUB, [stored()])
    assert outcome.ok is False
    assert outcome.detail.startswith("connection failed")


def test_verification_on_a_closed_port(client: PushClient) -> None:
    failure = client.verification_failure("https://127.0.0.1:9/some/path?q=1", "0" * 64)
    assert isinstance(failure, str)
    assert failure
    assert failure.startswith("connection failed"), failure


# ============================================================================ parse ========
HTTPS = "https://receiver.example.org:8443/hook"


def http_config(**extra: Any) -> dict[str, Any]:
    return {"type": "http_endpoint", "pushEndpoint": HTTPS, **extra}


def rejected(raw: Any, old: PushConfig | None = None) -> AmsError:
    with pytest.raises(AmsError) as info:
        push_config.parse(raw, old)
    assert info.value.code == 400
    return info.value


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {},
        {"retryPolicy": {}},
        {"retryPolicy": {"type": "", "period": 0}},
        {"type": "", "pushEndpoint": "", "maxMessages": 0, "base64Decode": False},
        {"authorizationHeader": {}},
    ],
)
def test_empty_config_means_pull_mode(raw: Any) -> None:
    config = push_config.parse(raw)
    assert config == PushConfig()
    assert config.enabled is False


@pytest.mark.parametrize(
    "raw",
    [
        {"pushEndpoint": HTTPS},
        {"maxMessages": 5},
        {"retryPolicy": {"type": "linear"}},
        {"mattermostUrl": "https://mm.example.org/hooks/x"},
        {"authorizationHeader": {"type": "disabled"}},
    ],
)
def test_a_non_empty_config_needs_a_type(raw: dict[str, Any]) -> None:
    error = rejected(raw)
    assert error.message == "Push configuration type can only be of 'http_endpoint' or 'mattermost'"


def test_an_unknown_type_is_rejected() -> None:
    error = rejected({"type": "smtp", "pushEndpoint": HTTPS})
    assert error.message == "Push configuration type can only be of 'http_endpoint' or 'mattermost'"


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://receiver.example.org/hook",
        "receiver.example.org/hook",
        "host:example.com:8080/path/to/hook",
        "https://",
        "https:///hook",
        "ftp://receiver.example.org/",
        "",
    ],
)
def test_http_endpoint_needs_a_valid_https_url(endpoint: str) -> None:
    error = rejected(http_config(pushEndpoint=endpoint))
    assert error.message == "Push endpoint should be addressed by a valid https url"


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://receiver.example.org:notaport/hook",  # Go: invalid port ":notaport" after host
        "https://receiver example.org/hook",  # Go: invalid character " " in host name
    ],
)
def test_http_endpoint_with_a_malformed_authority_is_rejected(endpoint: str) -> None:
    """Not a valid URL (RFC 3986; the original's url.ParseRequestURI refuses it), and no
    request could ever reach it: requests raises InvalidURL on it."""
    error = rejected(http_config(pushEndpoint=endpoint))
    assert error.message == "Push endpoint should be addressed by a valid https url"


def test_http_endpoint_defaults() -> None:
    config = push_config.parse(http_config())
    assert config.enabled is True
    assert config.type == "http_endpoint"
    assert config.push_endpoint == HTTPS
    assert config.max_messages == 1
    assert config.authorization_type == "autogen"
    assert HEX64.match(config.authorization_value)
    assert config.retry_type == "linear"
    assert config.retry_period == 3000
    assert HEX64.match(config.verification_hash)
    assert config.verified is False
    assert config.base64_decode is False


def test_autogen_values_are_new_each_time() -> None:
    first = push_config.parse(http_config(authorizationHeader={"type": "autogen"}))
    second = push_config.parse(http_config(authorizationHeader={"type": "autogen"}))
    assert HEX64.match(first.authorization_value)
    assert HEX64.match(second.authorization_value)
    assert first.authorization_value != second.authorization_value
    assert first.verification_hash != second.verification_hash


def test_disabled_authorization_has_no_value() -> None:
    config = push_config.parse(http_config(authorizationHeader={"type": "disabled"}))
    assert config.authorization_type == "disabled"
    assert config.authorization_value == ""


def test_unknown_authorization_type_is_rejected() -> None:
    error = rejected(http_config(authorizationHeader={"type": "basic"}))
    assert error.message == "Authorization header type can only be of 'autogen' or 'disabled' type"


@pytest.mark.parametrize("kind", ["exponential", "LINEAR"])
def test_unknown_retry_policy_is_rejected(kind: str) -> None:
    error = rejected(http_config(retryPolicy={"type": kind}))
    assert error.message == "Retry policy can only be of 'linear' or 'slowstart' type"


@pytest.mark.parametrize("period", [None, 0, 1500])
def test_slowstart_forces_period_zero(period: int | None) -> None:
    config = push_config.parse(http_config(retryPolicy={"type": "slowstart", "period": period}))
    assert config.retry_type == "slowstart"
    assert config.retry_period == 0


@pytest.mark.parametrize(("period", "expected"), [(None, 3000), (0, 3000), (-10, 3000), (1, 1), (1500, 1500)])
def test_linear_period(period: int | None, expected: int) -> None:
    config = push_config.parse(http_config(retryPolicy={"type": "linear", "period": period}))
    assert config.retry_type == "linear"
    assert config.retry_period == expected


@pytest.mark.parametrize(("given", "expected"), [(None, 1), (0, 1), (-3, 1), (1, 1), (10, 10)])
def test_max_messages_on_create(given: int | None, expected: int) -> None:
    assert push_config.parse(http_config(maxMessages=given)).max_messages == expected


def test_mattermost_needs_a_url() -> None:
    error = rejected({"type": "mattermost", "mattermostUsername": "bot"})
    assert error.message == "Field mattermostUrl cannot be empty"


def test_mattermost_is_verified_at_once() -> None:
    config = push_config.parse(
        {
            "type": "mattermost",
            "mattermostUrl": "https://mm.example.org/hooks/x",
            "mattermostUsername": "bot",
            "mattermostChannel": "alerts",
            "base64Decode": True,
            "pushEndpoint": "not even a url",  # ignored for mattermost
            "maxMessages": 10,  # ignored for mattermost
        }
    )
    assert config.enabled is True
    assert config.type == "mattermost"
    assert config.verified is True
    assert config.mattermost_url == "https://mm.example.org/hooks/x"
    assert config.mattermost_username == "bot"
    assert config.mattermost_channel == "alerts"
    assert config.base64_decode is True
    assert config.max_messages == 1
    assert config.push_endpoint == ""


def test_modify_same_endpoint_keeps_hash_and_verified() -> None:
    old = dataclasses.replace(push_config.parse(http_config(maxMessages=5)), verified=True)
    new = push_config.parse(http_config(retryPolicy={"type": "slowstart"}), old)
    assert new.verification_hash == old.verification_hash
    assert new.verified is True
    assert new.retry_type == "slowstart"
    assert new.max_messages == 5  # 0 on modify keeps the existing value


def test_modify_same_endpoint_unverified_stays_unverified() -> None:
    old = push_config.parse(http_config())
    new = push_config.parse(http_config(), old)
    assert new.verification_hash == old.verification_hash
    assert new.verified is False


def test_modify_changed_endpoint_needs_a_new_verification() -> None:
    old = dataclasses.replace(push_config.parse(http_config()), verified=True)
    new = push_config.parse(http_config(pushEndpoint="https://elsewhere.example.org/hook"), old)
    assert HEX64.match(new.verification_hash)
    assert new.verification_hash != old.verification_hash
    assert new.verified is False


def test_modify_without_auth_type_keeps_the_autogen_value() -> None:
    old = push_config.parse(http_config())
    new = push_config.parse(http_config(), old)
    assert new.authorization_type == "autogen"
    assert new.authorization_value == old.authorization_value


def test_modify_with_autogen_generates_a_new_value() -> None:
    old = push_config.parse(http_config())
    new = push_config.parse(http_config(authorizationHeader={"type": "autogen"}), old)
    assert HEX64.match(new.authorization_value)
    assert new.authorization_value != old.authorization_value


def test_modify_without_auth_type_keeps_disabled() -> None:
    old = push_config.parse(http_config(authorizationHeader={"type": "disabled"}))
    new = push_config.parse(http_config(), old)
    assert new.authorization_type == "disabled"
    assert new.authorization_value == ""


def test_modify_from_mattermost_is_a_new_http_config() -> None:
    old = push_config.parse({"type": "mattermost", "mattermostUrl": "https://mm.example.org/hooks/x"})
    new = push_config.parse(http_config(), old)
    assert new.type == "http_endpoint"
    assert new.verified is False
    assert new.authorization_type == "autogen"
    assert new.max_messages == 1


def test_modify_to_empty_is_pull_mode() -> None:
    old = push_config.parse(http_config())
    assert push_config.parse({}, old) == PushConfig()


@pytest.mark.parametrize(
    "raw",
    [
        "http_endpoint",
        ["type"],
        {"type": 1},
        {"type": "http_endpoint", "pushEndpoint": HTTPS, "maxMessages": "many"},
        {"type": "http_endpoint", "pushEndpoint": HTTPS, "retryPolicy": "linear"},
        {"type": "http_endpoint", "pushEndpoint": HTTPS, "authorizationHeader": ["autogen"]},
    ],
)
def test_malformed_bodies(raw: Any) -> None:
    assert rejected(raw).message == "Invalid Subscription Arguments"
