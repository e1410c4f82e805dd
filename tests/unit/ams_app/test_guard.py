"""Guarded (ams_app/service/guard.py): a backend the health check found down is refused at once."""

from __future__ import annotations

from typing import Any

import pytest

from ams_app.backends.errors import BackendUnavailable, MessageTooLarge
from ams_app.errors import AmsError
from ams_app.service.guard import Guarded


class Backend:
    timeout = 30.0

    def __init__(self) -> None:
        self.calls: list[str] = []

    def get(self, key: str) -> str:
        self.calls.append(f"get {key}")
        return key.upper()

    def ping(self) -> None:
        self.calls.append("ping")

    def close(self) -> None:
        self.calls.append("close")


def guarded() -> tuple[Any, Backend, set[str]]:
    backend, down = Backend(), set[str]()
    return Guarded(backend, "the metadata store", lambda: "store" in down), backend, down


def test_calls_pass_while_the_backend_is_up() -> None:
    g, backend, _ = guarded()
    assert g.get("a") == "A"
    assert g.timeout == 30.0  # plain attributes pass as they are
    assert backend.calls == ["get a"]


def test_calls_are_refused_at_once_while_it_is_down_and_pass_again_after() -> None:
    g, backend, down = guarded()
    assert g.get("a") == "A"  # the method is built once, and then follows the health as it changes
    down.add("store")
    with pytest.raises(AmsError) as refused:
        g.get("b")
    assert refused.value.envelope() == {
        "error": {"code": 503, "message": "The metadata store is unavailable", "status": "UNAVAILABLE"}
    }
    down.clear()
    assert g.get("c") == "C"
    assert backend.calls == ["get a", "get c"]  # the refused call never reached the backend


def test_the_health_check_and_close_always_reach_the_backend() -> None:
    g, backend, down = guarded()
    down.add("store")
    g.ping()
    g.close()
    assert backend.calls == ["ping", "close"]


def test_calls_waiting_when_the_backend_is_found_down_answer_503_at_once() -> None:
    """abandon() throws 503 into the greenlets inside a call (a real gevent wait here), and
    leaves alone those that have left the call by their turn."""
    import gevent
    import gevent.event

    never = gevent.event.Event()

    class Slow:
        def wait(self) -> str:
            never.wait(30)  # a backend that stopped answering
            return "answered"

        def quick(self) -> str:
            return "quick"

    down: set[str] = set()
    g = Guarded(Slow(), "Kafka", lambda: "kafka" in down)
    waiters = [gevent.spawn(g.wait) for _ in range(3)]
    done = gevent.spawn(g.quick)
    gevent.sleep(0.01)  # the three are inside the call now; the quick one has left it
    down.add("kafka")
    assert g.abandon() == 3
    gevent.joinall([*waiters, done], timeout=5)
    for waiter in waiters:
        assert isinstance(waiter.exception, AmsError)
        assert waiter.exception.envelope()["error"]["message"] == "Kafka is unavailable"
    assert done.value == "quick"
    assert g.abandon() == 0  # nobody waits any more


class Failing:
    """A backend whose call fails with its own BackendUnavailable (told ``503 Backend Error``); its
    ping answers or not, as ``answers`` says."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.pings = 0

    def read(self) -> str:
        raise BackendUnavailable("Kafka: a partition without a leader")

    def big(self) -> str:
        raise MessageTooLarge("too large")

    def ping(self) -> None:
        self.pings += 1
        if not self.answers:
            raise RuntimeError("all brokers are down")


def test_a_backend_error_before_the_outage_was_found_names_the_backend_when_it_does_not_answer() -> None:
    rechecks: list[int] = []
    backend = Failing(answers=False)
    g = Guarded(backend, "Kafka", lambda: False, lambda: rechecks.append(1))
    with pytest.raises(AmsError) as refused:
        g.read()
    assert refused.value.envelope()["error"]["message"] == "Kafka is unavailable"
    assert (backend.pings, rechecks) == (1, [1])  # and the health check is asked to look again now


def test_a_backend_error_of_a_backend_that_answers_stays_its_own() -> None:
    rechecks: list[int] = []
    backend = Failing(answers=True)
    g = Guarded(backend, "Kafka", lambda: False, lambda: rechecks.append(1))
    with pytest.raises(BackendUnavailable):  # its own error: the HTTP layer says 503 Backend Error
        g.read()
    with pytest.raises(MessageTooLarge):  # the HTTP layer says 413
        g.big()
    assert (backend.pings, rechecks) == (1, [])  # a 413 is not a reason to ping


def test_a_ping_that_hangs_counts_as_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    import gevent

    from ams_app.service import guard

    class Hanging(Failing):
        def ping(self) -> None:
            gevent.sleep(5)

    monkeypatch.setattr(guard, "CONFIRM_SECONDS", 0.05)
    g = Guarded(Hanging(answers=True), "Kafka", lambda: False)
    with pytest.raises(AmsError) as refused:
        g.read()
    assert refused.value.message == "Kafka is unavailable"
