"""The republisher's loop against a scripted fake of the API: what it publishes, when it
acknowledges, how it retries, when it gives up."""

from __future__ import annotations

import base64
import signal
from collections.abc import Callable
from typing import Any

import pytest

from ams_app.republish.config import Config
from ams_app.republish.loop import Fatal, Republisher, Stopper
from ams_app.republish.routing import Message, Rules
from ams_app.republish.transport import Reply, Transient

SUB = "/projects/P/subscriptions/S"


def config(**changes: Any) -> Config:
    values: dict[str, Any] = {
        "url": "https://ams",
        "token": "t",
        "verify": True,
        "timeout": 30.0,
        "project": "P",
        "subscription": "S",
        "rules": Rules(attribute="site", template="site-{value}"),
        "target_project": "P",
        "unroutable_topic": "unroutable",
        "create_topics": False,
        "source_attribute": "republish_source",
        "max_messages": 10,
    }
    return Config(**{**values, **changes})


def message(n: int, site: str | None) -> Message:
    attributes = {"n": str(n)} | ({"site": site} if site is not None else {})
    return Message(f"projects/P/subscriptions/S:{n}", str(n), base64.b64encode(b"m%d" % n).decode(), attributes)


def pulled(m: Message) -> dict[str, Any]:
    return {"ackId": m.ack_id, "message": {"messageId": m.message_id, "data": m.data, "attributes": m.attributes}}


def error(status: int, text: str) -> Reply:
    return Reply(status, {"error": {"code": status, "message": text, "status": "X"}})


class FakeAms:
    """Topics that exist, what was published to them, the requests made; ``script`` answers
    a request first when it returns something (a Reply, or raises)."""

    def __init__(self, *topics: str) -> None:
        self.topics: dict[str, list[dict[str, Any]]] = {t: [] for t in ("unroutable", *topics)}
        self.requests: list[tuple[str, str, Any]] = []
        self.acks: list[list[str]] = []
        self.batches: list[list[Message]] = []
        self.script: Callable[[str, str, Any], Reply | None] = lambda method, path, body: None
        self.stopper: Stopper | None = None

    def __call__(self, method: str, path: str, body: Any | None) -> Reply:
        self.requests.append((method, path, body))
        scripted = self.script(method, path, body)
        if scripted is not None:
            return scripted
        if path == SUB and method == "GET":
            return Reply(200, {"name": SUB, "topic": "/projects/P/topics/source"})
        if path == SUB + ":pull":
            if not self.batches:
                assert self.stopper is not None
                self.stopper.handle(signal.SIGTERM, None)  # a signal during the long poll
            return Reply(200, {"receivedMessages": [pulled(m) for m in self.batches.pop(0)]})
        if path == SUB + ":acknowledge":
            self.acks.append(body["ackIds"])
            return Reply(200, {})
        topic = path.removeprefix("/projects/P/topics/")
        if method == "PUT":
            if topic in self.topics:
                return error(409, "Topic already exists")
            self.topics[topic] = []
            return Reply(200, {"name": "/projects/P/topics/" + topic})
        topic, _, verb = topic.partition(":")
        if topic not in self.topics:
            return error(404, "Topic doesn't exist")
        if verb == "publish":
            self.topics[topic] += body["messages"]
            return Reply(200, {"messageIds": ["0"] * len(body["messages"])})
        return Reply(200, {"name": "/projects/P/topics/" + topic})

    def numbers(self, topic: str) -> list[int]:
        return [int(m["attributes"]["n"]) for m in self.topics[topic]]


def republisher(fake: FakeAms, **changes: Any) -> tuple[Republisher, list[float]]:
    slept: list[float] = []
    stopper = Stopper()
    fake.stopper = stopper
    return Republisher(config(**changes), fake, stopper, sleep=slept.append), slept


def test_a_batch_is_grouped_per_topic_in_order_then_acknowledged() -> None:
    fake = FakeAms("site-a", "site-b")
    rep, _ = republisher(fake)
    batch = [message(0, "a"), message(1, "b"), message(2, None), message(3, "a"), message(4, "bad/x"), message(5, "b")]
    rep.handle(batch)
    assert fake.numbers("site-a") == [0, 3]
    assert fake.numbers("site-b") == [1, 5]
    assert fake.numbers("unroutable") == [2, 4]
    reasons = [m["attributes"]["republish_error"] for m in fake.topics["unroutable"]]
    assert reasons == ["no attribute 'site'", "'bad/x' makes an invalid topic name 'site-bad/x'"]
    first = fake.topics["site-a"][0]
    assert first == {
        "data": batch[0].data,
        "attributes": {"n": "0", "site": "a", "republish_source": f"{SUB[1:]}/messages/0"},
    }
    assert "republish_error" not in first["attributes"]
    publishes = [path for method, path, _ in fake.requests if path.endswith(":publish")]
    assert len(publishes) == 3  # one request per target topic
    assert fake.acks == [[m.ack_id for m in batch]]
    assert fake.requests[-1][1] == SUB + ":acknowledge"  # the last request: nothing after the ack
    assert (rep.counters.republished, rep.counters.unroutable, rep.counters.batches) == (4, 2, 1)


def test_no_source_attribute_when_configured_empty() -> None:
    fake = FakeAms("site-a")
    rep, _ = republisher(fake, source_attribute="")
    rep.handle([message(0, "a")])
    assert fake.topics["site-a"][0]["attributes"] == {"n": "0", "site": "a"}


def test_a_missing_topic_is_unroutable_unless_topics_are_created() -> None:
    fake = FakeAms()
    rep, _ = republisher(fake)
    rep.handle([message(0, "new")])
    assert fake.numbers("unroutable") == [0]
    reason = fake.topics["unroutable"][0]["attributes"]["republish_error"]
    assert reason == "topic 'site-new' does not exist in project 'P'"

    fake = FakeAms()
    rep, _ = republisher(fake, create_topics=True)
    rep.handle([message(0, "new"), message(1, "new")])
    assert fake.numbers("site-new") == [0, 1]
    assert fake.topics["unroutable"] == []


def test_a_topic_created_meanwhile_is_fine() -> None:
    fake = FakeAms()
    rep, _ = republisher(fake, create_topics=True)
    first_publish = True

    def script(method: str, path: str, body: Any) -> Reply | None:
        nonlocal first_publish
        if path.endswith("site-a:publish") and first_publish:
            first_publish = False
            fake.topics["site-a"] = []  # someone else creates it: our PUT gets 409
            return error(404, "Topic doesn't exist")
        return None

    fake.script = script
    rep.handle([message(0, "a")])
    assert fake.numbers("site-a") == [0]
    assert ("PUT", "/projects/P/topics/site-a", None) in fake.requests


def test_a_refused_creation_makes_the_messages_unroutable() -> None:
    fake = FakeAms()
    rep, _ = republisher(fake, create_topics=True)
    fake.script = lambda method, path, body: (
        error(403, "Access to this resource is forbidden") if method == "PUT" else None
    )
    rep.handle([message(0, "a")])
    reason = fake.topics["unroutable"][0]["attributes"]["republish_error"]
    assert reason == "cannot create topic 'site-a': 403 Access to this resource is forbidden"


def test_a_refused_publish_is_split_until_it_names_the_messages_at_fault() -> None:
    fake = FakeAms("site-a")
    rep, _ = republisher(fake)

    def script(method: str, path: str, body: Any) -> Reply | None:
        if path.endswith("site-a:publish") and any(m["attributes"]["n"] in ("2", "5") for m in body["messages"]):
            return error(400, "Message 0 does not validate")
        return None

    fake.script = script
    rep.handle([message(n, "a") for n in range(8)])
    assert fake.numbers("site-a") == [0, 1, 3, 4, 6, 7]  # the order is kept
    assert fake.numbers("unroutable") == [2, 5]
    reason = fake.topics["unroutable"][0]["attributes"]["republish_error"]
    assert reason == "topic 'site-a' refused it: 400 Message 0 does not validate"
    assert rep.counters.republished == 6


def test_a_forbidden_topic_makes_its_group_unroutable_without_splitting() -> None:
    fake = FakeAms("site-a", "site-b")
    rep, _ = republisher(fake)
    forbidden = error(403, "Access to this resource is forbidden")
    fake.script = lambda method, path, body: forbidden if path.endswith("site-a:publish") else None
    rep.handle([message(0, "a"), message(1, "b"), message(2, "a")])
    assert fake.numbers("unroutable") == [0, 2]
    assert fake.numbers("site-b") == [1]
    assert sum(path.endswith("site-a:publish") for _, path, _ in fake.requests) == 1


@pytest.mark.parametrize("failure", [error(503, "Backend Error"), error(429, "slow down"), Transient("refused")])
def test_transient_failures_are_retried_with_capped_backoff(failure: Reply | Transient) -> None:
    fake = FakeAms("site-a")
    rep, slept = republisher(fake)
    failures = 9

    def script(method: str, path: str, body: Any) -> Reply | None:
        nonlocal failures
        if path.endswith(":publish") and failures:
            failures -= 1
            if isinstance(failure, Transient):
                raise failure
            return failure
        return None

    fake.script = script
    rep.handle([message(0, "a")])
    assert slept == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert fake.numbers("site-a") == [0]
    assert len(fake.acks) == 1


def test_nothing_is_acknowledged_when_the_unroutable_topic_refuses() -> None:
    fake = FakeAms("site-a")
    rep, _ = republisher(fake)
    refusal = error(413, "Message size is too large")
    fake.script = lambda method, path, body: refusal if path.endswith("unroutable:publish") else None
    with pytest.raises(Fatal, match="unroutable topic 'unroutable' refused message 1: 413"):
        rep.handle([message(0, "a"), message(1, None)])
    assert fake.acks == []


def test_a_late_ack_is_counted_and_the_loop_goes_on() -> None:
    fake = FakeAms("site-a")
    rep, _ = republisher(fake)
    fake.script = lambda method, path, body: error(408, "ack timeout") if path.endswith(":acknowledge") else None
    rep.handle([message(0, "a")])
    assert rep.counters.late_acks == 1
    assert rep.counters.batches == 1


def test_run_until_a_signal_then_exit_0() -> None:
    fake = FakeAms("site-a")
    fake.batches = [[message(0, "a"), message(1, "a")], [message(2, "a")]]
    rep, _ = republisher(fake)
    assert rep.run() == 0
    assert fake.numbers("site-a") == [0, 1, 2]
    assert len(fake.acks) == 2
    assert rep.rules.loop_topic == "source"  # learnt from the subscription


def test_a_signal_during_a_retry_abandons_the_batch_unacknowledged() -> None:
    fake = FakeAms("site-a")
    fake.batches = [[message(0, "a")]]
    rep, _ = republisher(fake)

    def script(method: str, path: str, body: Any) -> Reply | None:
        if path.endswith(":publish"):
            assert fake.stopper is not None
            fake.stopper.handle(signal.SIGTERM, None)  # arrives during the (failing) request
            return error(500, "Backend Error")
        return None

    fake.script = script
    assert rep.run() == 0
    assert fake.acks == []


@pytest.mark.parametrize(
    ("status", "where"),
    [(401, ":pull"), (404, ":pull"), (409, ":pull"), (401, ":publish"), (404, ":acknowledge")],
)
def test_fatal_answers_stop_with_1_and_nothing_acknowledged(status: int, where: str) -> None:
    fake = FakeAms("site-a")
    fake.batches = [[message(0, "a")]]
    rep, _ = republisher(fake)
    fake.script = lambda method, path, body: error(status, "no") if path.endswith(where) else None
    assert rep.run() == 1
    if where != ":acknowledge":
        assert fake.acks == []


def test_start_checks() -> None:
    fake = FakeAms()
    del fake.topics["unroutable"]
    rep, _ = republisher(fake)
    assert rep.run() == 1  # the unroutable topic must exist...
    fake.batches = [[message(0, "a")]]
    rep, _ = republisher(fake, create_topics=True)
    assert rep.run() == 0  # ...or be created
    assert "unroutable" in fake.topics

    fake = FakeAms()
    rep, _ = republisher(fake, unroutable_topic="source")
    assert rep.run() == 1  # the source topic cannot take the unroutable messages
