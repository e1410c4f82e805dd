"""The service-wide figures on a server's Prometheus page (ams_app/service/figures.py, docs/monitoring.md
"What a scrape costs"): computed aside, one round at a time, a scrape waiting for its round only so
long and otherwise showing the last one with its age; and the oldest unacknowledged message of a
subscription read once while it stays the oldest. On the embedded backend, in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from ams_app.service.figures import FiguresAside, ServiceFigures
from tests.helpers import Api, prometheus_samples, sample
from tests.inprocess import InProcessServer

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[InProcessServer]:
    srv = InProcessServer(tmp_path / "data")
    yield srv
    srv.stop()


def page(collector: Any) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return prometheus_samples(generate_latest(registry).decode())


def backlog_of(api: Api, n: int) -> tuple[str, str, str]:
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/t"})
    api.publish(project, "t", *[f"m{i}" for i in range(n)])
    return project, "t", "s"


class Gated:
    """The figures' rounds held at a gate the test opens, counting the rounds started."""

    def __init__(self, figures: ServiceFigures) -> None:
        self.rounds = 0
        self.gate = gevent.event.Event()
        original = figures._families

        def families() -> Any:
            self.rounds += 1
            self.gate.wait()
            return original()

        figures._families = families  # type: ignore[method-assign]


def test_a_scrape_does_not_wait_for_a_slow_round_and_later_shows_it(server: InProcessServer) -> None:
    api = server.api()
    project, _, sub = backlog_of(api, 3)
    labels = {"project": project, "subscription": sub}
    figures = server.app.extensions["ams"]._figures()
    gated = Gated(figures)
    aside = FiguresAside(figures, wait=0.05)

    # the round is held: the scrapes answer without it, and start no second one
    for _ in range(3):
        first = page(aside)
        assert sample(first, "ams_service_figures_ok") == 0
        assert sample(first, "ams_subscription_backlog_messages", **labels) is None
        assert sample(first, "ams_service_figures_age_seconds") is None
    assert gated.rounds == 1

    gated.gate.set()  # the round ends; the next scrape starts its own, which ends within the wait
    gevent.sleep(0.01)
    fresh = page(aside)
    assert gated.rounds == 2
    assert sample(fresh, "ams_service_figures_ok") == 1
    assert sample(fresh, "ams_subscription_backlog_messages", **labels) == 3
    age = sample(fresh, "ams_service_figures_age_seconds")
    assert age is not None
    assert 0 <= age < 1

    # held again: the page keeps the last round's figures, growing older
    gated.gate = gevent.event.Event()
    api.publish(project, "t", "m3", "m4")
    gevent.sleep(0.1)
    held = page(aside)
    assert sample(held, "ams_service_figures_ok") == 1
    assert sample(held, "ams_subscription_backlog_messages", **labels) == 3
    held_age = sample(held, "ams_service_figures_age_seconds")
    assert held_age is not None
    assert held_age >= 0.1
    assert gated.rounds == 3

    gated.gate.set()
    gevent.sleep(0.01)  # the held round ends with the two new messages; the next scrape's too
    assert sample(page(aside), "ams_subscription_backlog_messages", **labels) == 5


def test_a_scrape_that_finds_an_older_round_running_waits_for_one_of_its_own(server: InProcessServer) -> None:
    """A round that began before the scrape may miss what the scraper just did: the scrape waits
    for the next one too, within its wait."""
    api = server.api()
    project, _, sub = backlog_of(api, 1)
    figures = server.app.extensions["ams"]._figures()
    gated = Gated(figures)
    aside = FiguresAside(figures, wait=0.05)
    page(aside)  # starts a round, held
    assert gated.rounds == 1
    aside.wait = 30
    opener = gevent.spawn_later(0.05, gated.gate.set)
    samples = page(aside)
    opener.join()
    assert gated.rounds == 2  # the older round, then one begun after the scrape
    assert sample(samples, "ams_subscription_backlog_messages", project=project, subscription=sub) == 1
    age = sample(samples, "ams_service_figures_age_seconds")
    assert age is not None
    assert age < 1


def test_a_failed_round_says_so_and_the_next_one_recovers(server: InProcessServer) -> None:
    api = server.api()
    project, _, sub = backlog_of(api, 2)
    figures = server.app.extensions["ams"]._figures()
    original = figures._families
    failing = True

    def families() -> Any:
        if failing:
            raise ConnectionError("the store is down")
        return original()

    figures._families = families  # type: ignore[method-assign]
    aside = FiguresAside(figures, wait=5)
    down = page(aside)
    assert sample(down, "ams_service_figures_ok") == 0
    assert sample(down, "ams_project_backlog_messages", project=project) is None
    assert sample(down, "ams_service_figures_duration_seconds") is not None  # that round's
    failing = False
    up = page(aside)
    assert sample(up, "ams_service_figures_ok") == 1
    assert sample(up, "ams_subscription_backlog_messages", project=project, subscription=sub) == 2


def test_the_oldest_unacked_message_is_read_once_while_it_stays_the_oldest(server: InProcessServer) -> None:
    api = server.api()
    project, _, sub = backlog_of(api, 3)
    labels = {"project": project, "subscription": sub}
    figures = server.app.extensions["ams"]._figures()
    log = figures.log
    peeks: list[tuple[str, int]] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            return getattr(log, name)

        def peek(self, key: str, offset: int) -> Any:
            peeks.append((key, offset))
            return log.peek(key, offset)

    figures.log = Counting()  # type: ignore[assignment]
    ages = []
    for _ in range(3):
        samples = page(figures)
        ages.append(sample(samples, "ams_subscription_oldest_unacked_age_seconds", **labels))
        gevent.sleep(0.05)
    assert len(peeks) == 1
    assert ages[0] is not None
    assert ages[2] is not None
    assert ages[2] >= ages[0] + 0.1

    pulled = api.pull(project, sub, 1)
    api.ack(project, sub, [pulled[0]["ackId"]])
    page(figures)
    page(figures)
    assert len(peeks) == 2  # the new oldest, once
    assert peeks[1][1] == peeks[0][1] + 1

    # a subscription made again under the same name is another: its oldest message is read anew
    api.ok("DELETE", f"/projects/{project}/subscriptions/{sub}")
    gevent.sleep(0.01)
    api.ok("PUT", f"/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/t"})
    api.publish(project, "t", "after")
    samples = page(figures)
    assert sample(samples, "ams_subscription_backlog_messages", **labels) == 1
    assert len(peeks) == 3


def test_closing_the_service_stops_a_round_under_way(server: InProcessServer) -> None:
    svc = server.app.extensions["ams"]
    aside = svc.figures_aside
    gated = Gated(aside.figures)
    aside.wait = 0.01
    page(aside)
    running = aside._running
    assert running is not None
    assert not running.dead  # held at the gate
    aside.close()
    assert running.dead
    assert aside._running is None
    assert gated.rounds == 1
