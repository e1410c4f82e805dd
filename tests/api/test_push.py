"""Push delivery over real HTTPS receivers (docs/push.md), on both backends.

The servers deliver in-process (backend embedded: one worker; backend kafka: a worker that
holds its subscriptions through ZooKeeper). Receivers are HTTPS servers in this process, with
certificates from the tests' CA, which the servers trust through AMS_PUSH_CA_FILE.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trustme

from tests.helpers import AmsServer, Api, b64, sample, unique
from tests.helpers import error_of as envelope
from tests.push_receiver import Receiver


@pytest.fixture
def receiver(test_ca: trustme.CA) -> Iterator[Receiver]:
    r = Receiver(test_ca)
    yield r
    r.close()


@pytest.fixture
def project(api: Api) -> Iterator[str]:
    """A project of the test's own, deleted afterwards: its push subscriptions (some with
    endpoints that are gone) stop with it instead of loading the shared server."""
    name = api.new_project()
    yield name
    api.delete(f"/projects/{name}")


@pytest.fixture
def topic(api: Api, project: str) -> str:
    name = unique("topic")
    api.ok("PUT", f"/projects/{project}/topics/{name}")
    return name


def push_sub(api: Api, project: str, topic: str, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    name = unique("push")
    body = {"topic": f"projects/{project}/topics/{topic}", "pushConfig": config}
    return name, api.ok("PUT", f"/projects/{project}/subscriptions/{name}", body)


def verified_sub(api: Api, project: str, topic: str, receiver: Receiver, **config: Any) -> tuple[str, dict[str, Any]]:
    """An http_endpoint subscription on ``receiver``, verified through the endpoint; requests
    50 ms apart unless the test says otherwise (the default linear period is 3 s)."""
    config = {"retryPolicy": {"type": "linear", "period": 50}, **config}
    name, created = push_sub(
        api,
        project,
        topic,
        {"type": "http_endpoint", "pushEndpoint": receiver.url("/push/in?x=1"), **config},
    )
    receiver.verification = (200, created["pushConfig"]["verificationHash"])
    r = api.post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
    assert (r.status_code, r.content) == (200, b""), r.text
    return name, api.ok("GET", f"/projects/{project}/subscriptions/{name}")


def error_of(response: Any) -> tuple[int, str, str]:
    error = envelope(response)
    return error["code"], error["message"], error["status"]


def wait_until(check: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not reached in {timeout}s")


def payloads(messages: list[dict[str, Any]]) -> list[str]:
    return [base64.b64decode(m["data"]).decode() for m in messages]


# ------------------------------------------------------------------------ verification --------
def test_verification_succeeds_with_the_hash_and_activates(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    name, sub = verified_sub(api, project, topic, receiver)
    assert sub["pushConfig"]["verified"] is True
    # the endpoint's path and query are dropped: the proof lives at the root of its host
    assert receiver.verification_requests == ["/ams_verification_hash"]
    assert "pushStatus" in sub
    acl = api.ok("GET", f"/projects/{project}/subscriptions/{name}:acl")["authorized_users"]
    assert acl == ["push_worker_0"]
    worker = api.ok("GET", "/users/push_worker_0")
    assert worker["service_roles"] == ["push_worker"]
    assert project in [p["project"] for p in worker["projects"]]
    again = api.post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
    assert error_of(again) == (409, "Push endpoint is already verified", "CONFLICT")


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ((200, "not-the-hash"), "Endpoint verification failed.Wrong verification hash"),
        ((404, ""), "Endpoint verification failed.Wrong response status code"),
        ((500, "whatever"), "Endpoint verification failed.Wrong response status code"),
    ],
)
def test_verification_fails_on_a_wrong_answer(
    api: Api, project: str, topic: str, receiver: Receiver, answer: tuple[int, str], message: str
) -> None:
    name, _ = push_sub(api, project, topic, {"type": "http_endpoint", "pushEndpoint": receiver.url()})
    receiver.verification = answer
    r = api.post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
    assert error_of(r) == (401, message, "UNAUTHORIZED")
    sub = api.ok("GET", f"/projects/{project}/subscriptions/{name}")
    assert sub["pushConfig"]["verified"] is False
    assert "pushStatus" not in sub


def test_verification_fails_when_the_endpoint_is_unreachable_or_untrusted(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    stranger = Receiver(trustme.CA())  # a certificate the server has no reason to trust
    try:
        for endpoint in (stranger.url(), "https://127.0.0.1:9/push"):
            name, created = push_sub(api, project, topic, {"type": "http_endpoint", "pushEndpoint": endpoint})
            stranger.verification = (200, created["pushConfig"]["verificationHash"])
            code, message, status = error_of(api.post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint"))
            assert (code, status) == (401, "UNAUTHORIZED")
            assert message.startswith("Endpoint verification failed."), message
            assert len(message) > 30, message  # with the transport's reason
        assert stranger.verification_requests == []  # TLS failed before any request
    finally:
        stranger.close()


def test_verification_needs_an_http_endpoint_subscription(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    pull = unique("pull")
    api.ok("PUT", f"/projects/{project}/subscriptions/{pull}", {"topic": f"projects/{project}/topics/{topic}"})
    mm, _ = push_sub(api, project, topic, {"type": "mattermost", "mattermostUrl": receiver.url("/hooks/x")})
    for name in (pull, mm):
        r = api.post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
        assert error_of(r) == (409, "Subscription is not in http push mode", "CONFLICT")
    r = api.post(f"/projects/{project}/subscriptions/nope:verifyPushEndpoint")
    assert error_of(r) == (404, "Subscription doesn't exist", "NOT_FOUND")


def test_verification_is_for_project_admins(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    name, created = push_sub(api, project, topic, {"type": "http_endpoint", "pushEndpoint": receiver.url()})
    receiver.verification = (200, created["pushConfig"]["verificationHash"])
    consumer = api.new_user(projects=[{"project": project, "roles": ["consumer"]}])
    r = api.as_(consumer["token"]).post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
    assert r.status_code == 403
    admin = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    r = api.as_(admin["token"]).post(f"/projects/{project}/subscriptions/{name}:verifyPushEndpoint")
    assert r.status_code == 200, r.text


# ------------------------------------------------------------------------ delivery ------------
def test_a_failing_then_slow_receiver_gets_every_message_in_order(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    receiver.fail_first = 3
    receiver.delay = 0.3
    name, sub = verified_sub(api, project, topic, receiver, maxMessages=4, retryPolicy={"type": "linear", "period": 50})
    sent = [f"m{i}" for i in range(30)]
    for i in range(0, len(sent), 7):
        api.publish(project, topic, *sent[i : i + 7], attributes={"k": "v"})
    got = receiver.wait_for(len(sent))
    assert payloads(got) == sent  # in order, none lost, none twice among the accepted
    assert [int(m["messageId"]) for m in got] == sorted(int(m["messageId"]) for m in got)
    assert all(m["attributes"] == {"k": "v"} and m["publishTime"].endswith("Z") for m in got)
    assert len(receiver.failed()) == 3
    # a failed batch is sent again unchanged: the retry after the failures starts where they did
    first_failed = receiver.failed()[0].body
    assert [m["message"]["data"] for m in first_failed["messages"]] == [b64(p) for p in sent[:4]]
    accepted = receiver.accepted()
    assert all(len(r.body["messages"]) <= 4 for r in accepted)
    expected_auth = sub["pushConfig"]["authorizationHeader"]["value"]
    assert all(r.headers["Authorization"] == expected_auth for r in receiver.received)
    assert all(r.headers["Content-Type"] == "application/json" for r in receiver.received)
    assert all(r.path == "/push/in?x=1" for r in receiver.received)
    assert accepted[0].body["messages"][0]["subscription"] == f"/projects/{project}/subscriptions/{name}"
    # acknowledged: the subscription's offset moved past everything
    offsets = wait_until(
        lambda: (o := api.ok("GET", f"/projects/{project}/subscriptions/{name}:offsets"))["current"] == o["max"] and o,
        what="offsets caught up",
    )
    assert offsets["current"] == offsets["max"]


def test_one_message_per_request_and_no_header_when_disabled(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    name, _ = verified_sub(api, project, topic, receiver, authorizationHeader={"type": "disabled"})
    api.publish(project, topic, "a", "b", "c")
    got = receiver.wait_for(3)
    assert payloads(got) == ["a", "b", "c"]
    bodies = [r.body for r in receiver.accepted()]
    assert all(set(b) == {"message", "subscription"} for b in bodies)
    assert all("Authorization" not in r.headers for r in receiver.received)
    assert bodies[0]["subscription"] == f"/projects/{project}/subscriptions/{name}"


def test_base64_decode_sends_the_payload_decoded(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    verified_sub(api, project, topic, receiver, base64Decode=True)
    api.publish(project, topic, '{"site": "x"}')
    (message,) = receiver.wait_for(1)
    assert message["data"] == '{"site": "x"}'


def test_an_endpoint_that_answers_3xx_or_4xx_is_retried(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    receiver.fail_first, receiver.fail_status = 2, 302  # a redirect is not a success, nor followed
    verified_sub(api, project, topic, receiver, retryPolicy={"type": "linear", "period": 50})
    api.publish(project, topic, "only")
    assert payloads(receiver.wait_for(1)) == ["only"]
    assert [r.status for r in receiver.received] == [302, 302, 200]


def test_push_status_tells_failures_then_recovery(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    receiver.fail_first = 10**6
    name, _ = verified_sub(api, project, topic, receiver, retryPolicy={"type": "linear", "period": 100})
    api.publish(project, topic, "x")
    path = f"/projects/{project}/subscriptions/{name}"
    failing = wait_until(
        lambda: "failed" in (s := api.ok("GET", path)["pushStatus"]) and s, what="pushStatus shows the failures"
    )
    assert failing.startswith(f"Subscription {path} is currently active")
    assert "HTTP 503" in failing
    listed = api.ok("GET", f"/projects/{project}/subscriptions")["subscriptions"]
    assert next(s["pushStatus"] for s in listed if s["name"] == path).startswith(f"Subscription {path}")
    receiver.fail_first = 0
    receiver.wait_for(1)
    wait_until(
        lambda: (
            api.ok("GET", path)["pushStatus"].startswith(f"Subscription {path} is currently active (")
            and "failed" not in api.ok("GET", path)["pushStatus"]
        ),
        what="pushStatus back to active",
    )


def test_push_figures_on_the_prometheus_page(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    """Failures, successes, delivered messages and the consecutive failures of a subscription
    (docs/monitoring.md) follow what the endpoint answers."""
    receiver.fail_first = 10**6
    name, _ = verified_sub(api, project, topic, receiver, retryPolicy={"type": "linear", "period": 100})
    api.publish(project, topic, "x", "y")
    labels = {"project": project, "subscription": name}

    def failures() -> float:
        return sample(api.scrape(), "ams_push_consecutive_failures", **labels) or 0

    wait_until(lambda: failures() >= 3, what="three failures in a row on the page")
    page = api.scrape()
    assert (sample(page, "ams_push_deliveries_total", project=project, outcome="failure") or 0) >= 3
    assert sample(page, "ams_push_deliveries_total", project=project, outcome="success") is None
    receiver.fail_first = 0
    receiver.wait_for(2)
    wait_until(lambda: failures() == 0, what="consecutive failures back to 0")
    page = api.scrape()
    assert (sample(page, "ams_push_deliveries_total", project=project, outcome="success") or 0) >= 1
    assert sample(page, "ams_push_messages_delivered_total", project=project) == 2
    assert (sample(page, "ams_push_delivery_duration_seconds_count", project=project) or 0) >= 4


def test_replay_with_modify_offset_delivers_again(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    name, _ = verified_sub(api, project, topic, receiver)
    ids = api.publish(project, topic, "one", "two", "three")
    receiver.wait_for(3)
    api.ok("POST", f"/projects/{project}/subscriptions/{name}:modifyOffset", {"offset": int(ids[1])})
    got = receiver.wait_for(5)
    assert payloads(got) == ["one", "two", "three", "two", "three"]


def test_consumption_is_counted_in_the_subscription_metrics(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    name, _ = verified_sub(api, project, topic, receiver)
    api.publish(project, topic, "abc", "defg")
    receiver.wait_for(2)

    def counted() -> bool:
        metrics = api.ok("GET", f"/projects/{project}/subscriptions/{name}:metrics")["metrics"]
        values = {m["metric"]: m["timeseries"][0]["value"] for m in metrics}
        return bool(values["subscription.number_of_messages"] == 2)

    wait_until(counted, what="consumption counted")


def test_mattermost_gets_text_username_and_channel(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    _name, sub = push_sub(
        api,
        project,
        topic,
        {
            "type": "mattermost",
            "mattermostUrl": receiver.url("/hooks/abc"),
            "mattermostUsername": "ams-bot",
            "mattermostChannel": "alerts",
            "base64Decode": True,
            "retryPolicy": {"type": "slowstart"},
        },
    )
    assert sub["pushConfig"]["verified"] is True
    assert "pushStatus" in sub
    api.publish(project, topic, "disk full", "disk fine")
    wait_until(lambda: len(receiver.accepted()) >= 2, what="two mattermost posts")
    assert [(r.path, r.body) for r in receiver.accepted()] == [
        ("/hooks/abc", {"text": "disk full", "username": "ams-bot", "channel": "alerts"}),
        ("/hooks/abc", {"text": "disk fine", "username": "ams-bot", "channel": "alerts"}),
    ]


# ------------------------------------------------------------------------ lifecycle -----------
def test_unverified_and_pull_mode_subscriptions_get_nothing(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    unverified, _ = push_sub(api, project, topic, {"type": "http_endpoint", "pushEndpoint": receiver.url()})
    name, _ = verified_sub(api, project, topic, receiver)
    api.publish(project, topic, "first")
    receiver.wait_for(1)
    path = f"/projects/{project}/subscriptions/{name}"
    api.ok("POST", f"{path}:modifyPushConfig", {"pushConfig": {}})  # back to pull mode
    sub = api.ok("GET", path)
    assert sub["pushConfig"]["type"] == ""
    assert "pushStatus" not in sub
    assert api.ok("GET", f"{path}:acl")["authorized_users"] == []
    api.publish(project, topic, "second")
    pulled = wait_until(lambda: api.pull(project, name), what="pull after leaving push mode")
    assert payloads([d["message"] for d in pulled]) == ["second"]
    assert payloads(receiver.accepted_messages()) == ["first"]
    # the unverified one still holds both messages
    offsets = api.ok("GET", f"/projects/{project}/subscriptions/{unverified}:offsets")
    assert offsets["max"] - offsets["current"] == 2


def test_a_changed_endpoint_must_be_verified_again(
    api: Api, project: str, topic: str, receiver: Receiver, test_ca: trustme.CA
) -> None:
    name, sub = verified_sub(api, project, topic, receiver)
    path = f"/projects/{project}/subscriptions/{name}"
    other = Receiver(test_ca)
    try:
        config = {"type": "http_endpoint", "pushEndpoint": other.url(), "maxMessages": 2}
        api.ok("POST", f"{path}:modifyPushConfig", {"pushConfig": config})
        changed = api.ok("GET", path)
        assert changed["pushConfig"]["verified"] is False
        assert changed["pushConfig"]["verificationHash"] != sub["pushConfig"]["verificationHash"]
        api.publish(project, topic, "held")
        time.sleep(1.5)
        assert receiver.accepted_messages() == []
        assert other.accepted_messages() == []
        other.verification = (200, changed["pushConfig"]["verificationHash"])
        assert api.post(f"{path}:verifyPushEndpoint").status_code == 200
        assert payloads(other.wait_for(1)) == ["held"]
    finally:
        other.close()


def test_deleting_an_active_push_subscription_says_so(api: Api, project: str, topic: str, receiver: Receiver) -> None:
    name, _ = verified_sub(api, project, topic, receiver)
    r = api.delete(f"/projects/{project}/subscriptions/{name}")
    assert r.json() == {"message": f"Subscription /projects/{project}/subscriptions/{name} deactivated"}
    unverified, _ = push_sub(api, project, topic, {"type": "http_endpoint", "pushEndpoint": receiver.url()})
    r = api.delete(f"/projects/{project}/subscriptions/{unverified}")
    assert (r.status_code, r.json()) == (200, {})
    api.publish(project, topic, "nobody")
    time.sleep(1.0)
    assert receiver.accepted_messages() == []


def test_status_lists_the_serving_push_worker(server: AmsServer, api: Api) -> None:
    status = api.ok("GET", "/status")
    assert status["status"] == "ok"
    assert [s["status"] for s in status["push_servers"]] == ["SERVING"]
    assert status["push_servers"][0]["endpoint"]


# ------------------------------------------------------------------------ settings ------------
def test_a_receiver_slower_than_the_timeout_is_retried(make_server: Any, receiver: Receiver, tmp_path: Any) -> None:
    srv: AmsServer = make_server(tmp_path / "slow", ams_push_timeout_seconds="0.5")
    api = srv.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    receiver.delay = 2.0
    verified_sub(api, project, "t", receiver, retryPolicy={"type": "linear", "period": 100})
    api.publish(project, "t", "late")
    wait_until(lambda: len(receiver.received) >= 2, what="a second attempt after the timeout")
    receiver.delay = 0
    got = receiver.wait_for(1)
    assert payloads(got)[-1] == "late"


def test_push_disabled_refuses_configs_and_verification(make_server: Any, tmp_path: Any) -> None:
    srv: AmsServer = make_server(tmp_path / "off", ams_push_enabled="false")
    api = srv.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    body = {
        "topic": f"projects/{project}/topics/t",
        "pushConfig": {"type": "http_endpoint", "pushEndpoint": "https://127.0.0.1:9/x"},
    }
    r = api.put(f"/projects/{project}/subscriptions/s", body)
    assert error_of(r) == (409, "Push functionality is currently disabled", "CONFLICT")
    r = api.post(f"/projects/{project}/subscriptions/s:verifyPushEndpoint")
    assert error_of(r) == (409, "Push functionality is currently disabled", "CONFLICT")
    assert api.ok("GET", "/status") == {"status": "ok", "push_functionality": "disabled"}


def test_delivery_survives_its_topic_being_deleted_and_created_again(
    api: Api, project: str, topic: str, receiver: Receiver
) -> None:
    name, _ = verified_sub(api, project, topic, receiver)
    api.publish(project, topic, "before")
    receiver.wait_for(1)
    api.ok("DELETE", f"/projects/{project}/topics/{topic}")
    time.sleep(1.5)  # the worker reads a topic that is gone for a while
    sub = api.ok("GET", f"/projects/{project}/subscriptions/{name}")
    assert sub["pushStatus"].startswith(f"Subscription /projects/{project}/subscriptions/{name} is currently active")
    api.ok("PUT", f"/projects/{project}/topics/{topic}")
    api.publish(project, topic, "after")
    assert payloads(receiver.wait_for(2)) == ["before", "after"]
