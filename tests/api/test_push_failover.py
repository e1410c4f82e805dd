"""Two ``ams push-worker`` processes share the push subscriptions through a real ZooKeeper;
when the owner of a subscription dies, the other takes it over without losing a message.

The API server runs with ``push_worker: external`` (it only reports the workers' claims), as
the production nodes do; the workers use the same Kafka, MongoDB database and ZooKeeper.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import trustme

from tests.api.test_push import payloads, verified_sub, wait_until
from tests.helpers import ROOT, AmsServer, Api, free_port, prometheus_samples, sample
from tests.push_receiver import Receiver

pytestmark = pytest.mark.slow

SESSION_SECONDS = "4"  # ZooKeeper's floor with tickTime=2000


class Workers:
    def __init__(self, server: AmsServer, tmp: Path) -> None:
        self.env = {
            **os.environ,
            **server.env,
            "AMS_PUSH_SESSION_SECONDS": SESSION_SECONDS,
            "AMS_PUSH_SCAN_SECONDS": "0.5",
        }
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        with (self.tmp / f"worker-{len(self.procs)}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ams_app", "push-worker"], cwd=ROOT, env=self.env, stdout=log, stderr=log
            )
        self.procs.append(proc)
        return proc

    def by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        (proc,) = [p for p in self.procs if p.pid == pid]
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("worker-*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def cluster(make_server: Any, tmp_path: Path) -> Iterator[tuple[Api, Workers]]:
    server: AmsServer = make_server(
        tmp_path / "api", backend="kafka", ams_push_worker="external", ams_push_session_seconds=SESSION_SECONDS
    )
    workers = Workers(server, tmp_path)
    api = server.api()
    workers.start()
    workers.start()
    wait_until(lambda: len(api.ok("GET", "/status")["push_servers"]) == 2, what="two push workers registered")
    yield api, workers
    workers.stop()


@pytest.fixture
def receiver(test_ca: trustme.CA) -> Iterator[Receiver]:
    r = Receiver(test_ca)
    yield r
    r.close()


def owner_pid(api: Api, project: str, sub: str) -> int | None:
    """The process id of the worker that holds ``sub`` (in its id), None while nobody does."""
    status = api.ok("GET", f"/projects/{project}/subscriptions/{sub}")["pushStatus"]
    match = re.search(r"\(push worker (.+)-(\d+)-([0-9a-f]+)\)", status)
    return int(match.group(2)) if match else None


def publish_in_background(api: Api, project: str, topic: str, sent: list[str]) -> Callable[[], None]:
    """Publish ``sent`` in batches of 10 over a few seconds; returns a join()."""

    def run() -> None:
        for i in range(0, len(sent), 10):
            api.publish(project, topic, *sent[i : i + 10])
            time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    return lambda: thread.join(120)


def start_stream(
    api: Api, workers: Workers, receiver: Receiver, count: int, delivered_first: int
) -> tuple[str, str, list[str], Callable[[], None], subprocess.Popen[bytes]]:
    """A verified push subscription (5 messages a request, 20 ms apart) on a topic that gets
    ``count`` messages in the background; returns once ``delivered_first`` have arrived:
    (project, subscription, what is sent, join the publisher, the owning worker)."""
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    sub, _ = verified_sub(api, project, "t", receiver, maxMessages=5, retryPolicy={"type": "linear", "period": 20})
    sent = [f"m{i:04d}" for i in range(count)]
    join = publish_in_background(api, project, "t", sent)
    receiver.wait_for(delivered_first, timeout=90)
    owner = wait_until(lambda: owner_pid(api, project, sub), what="an owner")
    return project, sub, sent, join, workers.by_pid(owner)


def first_occurrences(got: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for p in got:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_the_other_worker_takes_over_without_loss(cluster: tuple[Api, Workers], receiver: Receiver, how: str) -> None:
    api, workers = cluster
    project, sub, sent, join, owner = start_stream(api, workers, receiver, 600, 100)
    first = owner.pid
    killed_at = time.monotonic()
    owner.send_signal(signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
    join()
    try:
        wait_until(lambda: set(sent) <= set(payloads(receiver.accepted_messages())), 120, "every message")
    except AssertionError:
        print(workers.logs())
        raise
    time.sleep(0.5)  # a duplicate still in flight would arrive now
    got = payloads(receiver.accepted_messages())
    # every message, in order; a crash may repeat the batch that was in flight, nothing else
    assert first_occurrences(got) == sent
    duplicates = len(got) - len(sent)
    if how == "SIGTERM":  # a graceful stop finishes and acknowledges its post, then hands over
        assert got == sent
    assert duplicates <= 5, duplicates
    assert regressions(got) <= 1
    # the survivor holds it now
    second = wait_until(lambda: (pid := owner_pid(api, project, sub)) != first and pid, what="a new owner")
    assert workers.by_pid(second).poll() is None
    resumed = [r.at for r in receiver.accepted() if r.at > killed_at]
    print(f"{how}: delivery resumed {resumed[0] - killed_at:.1f}s after the owner stopped; {duplicates} duplicates")
    assert len(api.ok("GET", "/status")["push_servers"]) == 1


def regressions(got: list[str]) -> int:
    """How often a message arrives after a later one (a batch delivered again)."""
    return sum(1 for before, after in itertools.pairwise(got) if after < before)


def test_a_paused_owner_loses_its_claim_and_posts_nothing_when_it_wakes(
    cluster: tuple[Api, Workers], receiver: Receiver
) -> None:
    """SIGSTOP beyond the session timeout is a worker cut off from ZooKeeper: the other takes
    over; when the paused one runs again it must find its claim gone before posting."""
    api, workers = cluster
    project, sub, sent, join, paused = start_stream(api, workers, receiver, 400, 50)
    first = paused.pid
    paused.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: owner_pid(api, project, sub) not in (None, first), 60, "the other worker took over")
        join()
        wait_until(lambda: set(sent) <= set(payloads(receiver.accepted_messages())), 120, "every message")
    finally:
        paused.send_signal(signal.SIGCONT)
    api.publish(project, "t", "zz-after")
    wait_until(lambda: "zz-after" in payloads(receiver.accepted_messages()), 60, "a message after the wake-up")
    time.sleep(3)  # the woken worker had every chance to post what it held
    got = payloads(receiver.accepted_messages())
    assert first_occurrences(got) == [*sent, "zz-after"]
    assert regressions(got) <= 1, got  # the takeover may repeat the batch in flight, once
    assert len(got) - len(sent) - 1 <= 5


def test_subscriptions_spread_over_the_workers_and_all_deliver(
    cluster: tuple[Api, Workers], receiver: Receiver
) -> None:
    api, _ = cluster
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    subs = [verified_sub(api, project, "t", receiver)[0] for _ in range(12)]
    owners = {wait_until(lambda s=s: owner_pid(api, project, s), what="an owner") for s in subs}
    assert len(owners) == 2  # rendezvous hashing: 12 subscriptions all on one worker is 1 in 2048
    api.publish(project, "t", "hello")
    got = receiver.wait_for(len(subs))
    assert payloads(got) == ["hello"] * len(subs)
    assert {m["subscription"] for r in receiver.accepted() for m in [r.body]} == {
        f"/projects/{project}/subscriptions/{s}" for s in subs
    }


def test_a_worker_serves_its_prometheus_page(
    make_server: Any, tmp_path: Path, receiver: Receiver, tls_files: tuple[str, str, str]
) -> None:
    """``push_worker_metrics_port``: the worker's own page, with the deliveries it made; over HTTPS
    with the node's ``tls_cert``, as the appliance runs it (the token Prometheus sends)."""
    server: AmsServer = make_server(
        tmp_path / "api", backend="kafka", ams_push_worker="external", ams_push_session_seconds=SESSION_SECONDS
    )
    workers = Workers(server, tmp_path)
    port = free_port()
    cert, key, ca = tls_files
    workers.env.update(
        {
            "AMS_PUSH_WORKER_METRICS_PORT": str(port),
            "AMS_SERVICE_TOKEN": server.token,
            "AMS_TLS_CERT": cert,
            "AMS_TLS_KEY": key,
        }
    )
    workers.start()
    api = server.api()
    try:
        wait_until(lambda: len(api.ok("GET", "/status")["push_servers"]) == 1, what="the push worker registered")
        project = api.new_project()
        api.ok("PUT", f"/projects/{project}/topics/t")
        verified_sub(api, project, "t", receiver, maxMessages=5)
        api.publish(project, "t", "a", "b", "c")
        receiver.wait_for(3)
        page_url = f"https://127.0.0.1:{port}/metrics"
        with pytest.raises(requests.exceptions.ConnectionError):  # no plain HTTP beside it
            requests.get(page_url.replace("https:", "http:"), timeout=10)
        assert requests.get(page_url, timeout=10, verify=ca).status_code == 401  # prometheus_access: token

        def delivered() -> float:
            page = requests.get(page_url, headers={"x-api-key": server.token}, timeout=10, verify=ca)
            return sample(prometheus_samples(page.text), "ams_push_messages_delivered_total", project=project) or 0

        wait_until(lambda: delivered() == 3, what="3 messages delivered on the worker's page")
    finally:
        workers.stop()
