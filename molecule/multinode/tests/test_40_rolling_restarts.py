"""Rolling restarts of the ensemble and of the brokers, as an operator's configuration change makes
them (playbooks/zookeeper.yml and playbooks/kafka.yml, serial 1), with a client publishing and pulling
through haproxy the whole time: one member and one broker at a time, each back in service (srvr
leader or follower; registered, no partition under-replicated) before the next is touched. A monitor
samples the cluster meanwhile: two members are up and two brokers registered at every sample. (A
restart of the leader leaves the other two electing one for a moment, when no member serves: the
monitor counts those samples, and they must be few.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pytest
from multinode import (
    GROUPS,
    INVENTORY,
    PROJECT,
    ROOT,
    Api,
    Traffic,
    kafka_metadata,
    main_pid,
    report,
    ruok,
    srvr_mode,
    unique,
    wait_until,
)

HOSTS = GROUPS["kafka"]  # ZooKeeper and Kafka share kafka1-3


@dataclass
class Monitor:
    """Every 0.3 s: how many members are up (ruok) and serve (leader/follower), how many brokers
    are registered."""

    up: list[int] = field(default_factory=list)
    serving: list[int] = field(default_factory=list)
    brokers: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Monitor:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.up.append(sum(ruok(m) for m in HOSTS))
            self.serving.append(sum(srvr_mode(m) in ("leader", "follower") for m in HOSTS))
            # the most any broker reports: one that is starting may not know the others yet
            counts = [0]
            for broker in HOSTS:
                try:
                    counts.append(len(kafka_metadata([broker]).brokers))
                except AssertionError:
                    continue
            self.brokers.append(max(counts))
            self._stop.wait(0.3)


def playbook(name: str, *extra: str) -> float:
    """Run playbooks/NAME on the scenario's inventory; its duration."""
    command = shutil.which("ansible-playbook") or str(ROOT / ".venv" / "bin" / "ansible-playbook")
    env = os.environ | {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORKS": "12"}
    started = time.monotonic()
    run = subprocess.run(
        [command, "-i", str(INVENTORY), str(ROOT / "playbooks" / name), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    return time.monotonic() - started


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    return client


@pytest.mark.timeout(1500)
def test_a_configuration_change_restarts_one_member_and_one_broker_at_a_time(api):
    wait_until(lambda: sorted(srvr_mode(m) for m in HOSTS) == ["follower", "follower", "leader"], "the ensemble")
    topic, live, audit = unique("rt"), unique("rl"), unique("ra")
    api.topic(topic)
    api.subscription(live, topic)
    api.subscription(audit, topic, ack_deadline=600)
    before = {(h, unit): main_pid(h, unit) for h in HOSTS for unit in ("zookeeper", "kafka")}

    with Traffic(api, topic, live) as traffic, Monitor() as monitor:
        time.sleep(3)
        # JSON extra vars: key=value would make the numbers strings
        zookeeper_s = playbook("zookeeper.yml", "-e", '{"zookeeper_max_client_connections": 61}')
        kafka_s = playbook("kafka.yml", "-e", '{"kafka_log_retention_hours": 169}')
        time.sleep(3)

    after = {key: main_pid(*key) for key in before}
    assert [key for key in before if before[key] == after[key]] == []  # every member and broker restarted
    assert min(monitor.up) >= 2, monitor.up  # never two members down at once
    assert min(monitor.brokers) >= 2, monitor.brokers  # never two brokers down at once
    no_quorum = sum(1 for n in monitor.serving if n < 2)
    assert no_quorum <= 20, monitor.serving  # elections only: a few seconds of 0.3 s samples
    assert monitor.serving[-1] == 3
    assert monitor.brokers[-1] == 3

    pulled = traffic.pulled + api.drain(live)
    missing = [p for p in traffic.published if pulled[p] == 0]
    assert not missing, f"{len(missing)} answered 200 but never pulled: {missing[:5]}"
    once = api.drain(audit)
    wrong = {p: once[p] for p in traffic.published if once[p] != 1}
    assert not wrong, f"{len(wrong)} not exactly once in the log (payload: count): {dict(list(wrong.items())[:5])}"
    summary = traffic.summary()
    report(
        "rolling_restarts",
        {**{k: v for k, v in summary.items() if k != "failures"}, "lost": len(missing),
         "zookeeper_playbook_s": round(zookeeper_s, 1), "kafka_playbook_s": round(kafka_s, 1),
         "fewest_members_up": min(monitor.up), "samples_without_quorum": no_quorum,
         "samples": len(monitor.serving), "fewest_brokers": min(monitor.brokers),
         "failures": summary["failures"][:10]},
    )  # fmt: skip
