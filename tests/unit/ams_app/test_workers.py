"""A process per core (ams_app/workers.py, the settings workers, worker_port_base and
worker_grpc_port_base): which settings are refused, what each worker is told, and how the parent
restarts, gives up on and stops its workers (with fake processes and a fake clock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from typing import Any

import pytest

from ams_app import workers
from ams_app.settings import Settings, SettingsError, load_settings
from ams_app.workers import Role, Supervisor, command_environment, with_port, worker_environment
from tests.helpers import ROOT

KAFKA = {"backend": "kafka", "zookeeper_hosts": "zk:2181"}


def _settings(**values: Any) -> Settings:
    return load_settings(environ={}, overrides={**KAFKA, **values})


# --- the settings ---------------------------------------------------------------------------


def test_one_process_is_the_default_and_checks_nothing_more() -> None:
    settings = load_settings(environ={})
    assert settings.workers == 1
    assert settings.worker_count == 1
    # one process: the workers' ports are not checked, whatever they are
    assert load_settings(environ={}, overrides={"worker_port_base": 8443}).worker_port_base == 8443


@pytest.mark.parametrize("workers", [0, 2, 8])
def test_backend_embedded_is_one_process(workers: int) -> None:
    with pytest.raises(SettingsError, match=r"^workers must be 1 on backend embedded, not \d: its SQLite databases"):
        load_settings(environ={}, overrides={"workers": workers})


def test_zero_is_one_worker_per_core_this_process_may_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    settings = _settings(workers=0)
    assert settings.worker_count == 3
    assert settings.worker_ports == range(8081, 8084)


def test_the_workers_own_ports_follow_port_and_grpc_port_by_default() -> None:
    settings = _settings(workers=4, port=9000, grpc_port=9100)
    assert list(settings.worker_ports) == [9001, 9002, 9003, 9004]
    assert list(settings.worker_grpc_ports) == [9101, 9102, 9103, 9104]
    assert _settings(workers=2).worker_grpc_ports == range(0)  # no gRPC listener, no gRPC ports
    chosen = _settings(workers=2, worker_port_base=8100, grpc_port=8085, worker_grpc_port_base=8200)
    assert (list(chosen.worker_ports), list(chosen.worker_grpc_ports)) == ([8100, 8101], [8200, 8201])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        # the production inventory's ports with the defaults: eight workers reach grpc_port 8085
        (
            {"workers": 8, "grpc_port": 8085},
            r"the workers' own ports 8081-8088 \(worker_port_base, 8 workers\) include grpc_port 8085",
        ),
        ({"workers": 2, "worker_port_base": 8079}, r"own ports 8079-8080 \(worker_port_base.*include port 8080"),
        ({"workers": 2, "worker_port_base": 8442}, r"include authn_port 8443: set worker_port_base where 2 ports"),
        (
            {"workers": 2, "push_worker_metrics_port": 9108, "worker_port_base": 9107},
            "include push_worker_metrics_port 9108",
        ),
        (
            {"workers": 3, "grpc_port": 9000, "worker_grpc_port_base": 8079},
            r"own ports 8079-8081 \(worker_grpc_port_base, 3 workers\) include port 8080",
        ),
        (
            {"workers": 3, "grpc_port": 9000, "worker_grpc_port_base": 8083},
            "the workers' own API ports 8081-8083 and gRPC ports 8083-8085 overlap",
        ),
        ({"workers": 3, "worker_port_base": 65534}, "3 workers from worker_port_base 65534 take ports 65534-65536"),
        ({"workers": 2, "port": 65535}, "2 workers from worker_port_base 65536 take ports 65536-65537, beyond 65535"),
    ],
)
def test_the_workers_ports_must_be_free_ports(values: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        _settings(**values)


def test_the_appliance_layout_is_legal() -> None:
    """The ams role's defaults (roles/ams): own ports from 8100 and 8200 beside 8080 and 8085."""
    settings = _settings(
        workers=64, grpc_port=8085, worker_port_base=8100, worker_grpc_port_base=8200, push_worker_metrics_port=9108
    )
    assert (settings.worker_ports[-1], settings.worker_grpc_ports[-1]) == (8163, 8263)


# --- what each worker is told ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "port", "expected"),
    [
        ("http://ams1:8080", 8101, "http://ams1:8101"),
        ("https://ams1.example.org", 8101, "https://ams1.example.org:8101"),
        ("https://10.0.0.11:8443/", 8102, "https://10.0.0.11:8102/"),
        ("http://[2001:db8::1]:8080", 8101, "http://[2001:db8::1]:8101"),
    ],
)
def test_with_port_keeps_the_scheme_host_and_path(url: str, port: int, expected: str) -> None:
    assert with_port(url, port) == expected


def _worker_settings(node: Settings, index: int, environ: dict[str, str] | None = None) -> Settings:
    """The settings worker ``index`` of ``node`` loads (its environment over the node's)."""
    base = {f"AMS_{k.upper()}": str(v) for k, v in KAFKA.items()}
    return load_settings(environ={**base, **(environ or {}), **worker_environment(node, index, parent=4242)})


def test_each_worker_is_a_node_of_its_own_at_its_own_port() -> None:
    node = _settings(workers=2, node_name="ams1", host="10.0.0.11", grpc_port=8085, worker_grpc_port_base=8200)
    env = worker_environment(node, 1, parent=4242)
    assert env == {
        "AMS_WORKERS": "1",
        "AMS_PORT": "8082",
        "AMS_NODE_NAME": "ams1-w1",
        "AMS_ADVERTISE_URL": "http://10.0.0.11:8082",
        "AMS_GRPC_PORT": "8201",
        "AMS_WORKER_INDEX": "1",
        "AMS_WORKER_PARENT": "4242",
        "AMS_WORKER_SHARED_PORT": "8080",
        "AMS_WORKER_SHARED_GRPC_PORT": "8085",
    }
    worker = _worker_settings(node, 1, {"AMS_HOST": "10.0.0.11", "AMS_WORKERS": "2", "AMS_GRPC_PORT": "8085"})
    assert worker.workers == 1  # an ordinary ams serve, on its own ports
    assert (worker.port, worker.grpc_port, worker.node_name) == (8082, 8201, "ams1-w1")
    # where the other nodes and workers forward its subscriptions' requests and relay its gRPC calls
    # (ams_app/service/owner.py keeps node_url and node_grpc in the claims)
    assert (worker.node_url, worker.node_grpc) == ("http://10.0.0.11:8082", "10.0.0.11:8201")
    assert Role.from_environ(env) == Role(index=1, parent=4242, shared_port=8080, shared_grpc_port=8085)


def test_an_advertise_url_keeps_its_scheme_and_host_with_the_workers_port() -> None:
    node = _settings(workers=2, advertise_url="https://ams1.example.org:8080", worker_port_base=8100)
    assert [worker_environment(node, i, 1)["AMS_ADVERTISE_URL"] for i in (0, 1)] == [
        "https://ams1.example.org:8100",
        "https://ams1.example.org:8101",
    ]


def test_on_every_address_the_url_names_the_node_not_the_worker() -> None:
    node = _settings(workers=2, host="0.0.0.0", node_name="ams2")
    env = worker_environment(node, 0, 1)
    assert (env["AMS_ADVERTISE_URL"], env["AMS_NODE_NAME"]) == ("http://ams2:8081", "ams2-w0")
    assert "AMS_GRPC_PORT" not in env
    assert "AMS_WORKER_SHARED_GRPC_PORT" not in env


def test_without_a_node_name_the_workers_are_named_after_the_host() -> None:
    node = _settings(workers=2)
    assert worker_environment(node, 1, 1)["AMS_NODE_NAME"] == f"{socket.gethostname()}-w1"


def test_a_process_no_parent_started_has_no_role() -> None:
    assert Role.from_environ({}) is None
    assert Role.from_environ({"AMS_WORKER_INDEX": ""}) is None


def test_the_command_lines_settings_reach_the_workers_through_the_environment(tmp_path: Any) -> None:
    config = tmp_path / "ams.yml"
    config.write_text("backend: kafka\nzookeeper_hosts: zk:2181\nport: 7000\nworkers: 3\n")
    overrides = {"port": 9000, "host": None, "workers": 2, "grpc_port": 9100}
    env = command_environment(str(config), overrides)
    assert env == {"AMS_PORT": "9000", "AMS_WORKERS": "2", "AMS_GRPC_PORT": "9100", "AMS_CONFIG": str(config)}
    node = load_settings(str(config), environ={}, overrides=overrides)
    worker = load_settings(environ={**env, **worker_environment(node, 0, 1)})
    assert (worker.port, worker.grpc_port, worker.workers) == (9001, 9101, 1)


def test_the_parent_never_imports_gevent() -> None:
    """ams_app/serve.py patches the standard library at import: the parent must not import it."""
    code = (
        "import sys, ams_app.cli, ams_app.workers; "
        "assert not [m for m in sys.modules if m.startswith(('gevent', 'ams_app.serve'))], sorted(sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


# --- the parent ------------------------------------------------------------------------------


class FakeProcess:
    """A worker process: it runs until it is told to die, or stops on a signal when it obeys."""

    pids = iter(range(1000, 100000))

    def __init__(self, obeys: bool = True) -> None:
        self.pid = next(self.pids)
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.obeys = obeys
        self.started_at = 0.0

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)
        if self.obeys:
            self.returncode = 0

    def kill(self) -> None:
        self.signals.append(signal.SIGKILL)
        self.returncode = -signal.SIGKILL

    def wait(self) -> int | None:
        return self.returncode


class Machine:
    """The supervisor's world: a clock that sleeping advances, the processes it starts, and events
    (clock time -> action) that happen as time passes."""

    def __init__(self, workers: int = 2, obeys: bool = True, restart_seconds: float = 0.0) -> None:
        self.now = 0.0
        self.started: list[tuple[int, FakeProcess]] = []
        self.events: list[tuple[float, Any]] = []
        self.obeys = obeys
        self.supervisor = Supervisor(
            [{"AMS_WORKER_INDEX": str(i)} for i in range(workers)],
            stop_seconds=40.0,
            restart_seconds=restart_seconds,
            command=["ams", "serve"],
            popen=self.popen,
            clock=lambda: self.now,
            sleep=self.sleep,
        )

    def popen(self, command: list[str], env: dict[str, str], start_new_session: bool) -> FakeProcess:
        assert command == ["ams", "serve"]
        assert start_new_session
        process = FakeProcess(self.obeys)
        process.started_at = self.now
        self.started.append((int(env["AMS_WORKER_INDEX"]), process))
        return process

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove(event)
            event[1]()
        assert self.now < 600, "the supervisor never returned"

    def at(self, when: float, action: Any) -> None:
        self.events.append((when, action))

    def current(self, index: int) -> FakeProcess:
        return [p for i, p in self.started if i == index][-1]

    def die(self, index: int, code: int) -> Any:
        def action() -> None:
            self.current(index).returncode = code

        return action


def test_a_dead_worker_is_started_again_and_a_signal_stops_all_with_status_0() -> None:
    machine = Machine()
    machine.at(30.0, machine.die(1, -signal.SIGKILL))  # long after its start: no backoff growth
    machine.at(45.0, lambda: machine.supervisor.signal(signal.SIGTERM))
    assert machine.supervisor.run() == 0
    assert [index for index, _ in machine.started] == [0, 1, 1]
    first, second = [p for i, p in machine.started if i == 1]
    assert first.signals == []  # it was dead
    assert second.signals == [signal.SIGTERM]
    assert machine.current(0).signals == [signal.SIGTERM]


def test_the_signal_received_is_the_signal_forwarded() -> None:
    machine = Machine()
    machine.at(1.0, lambda: machine.supervisor.signal(signal.SIGINT))
    machine.at(1.05, lambda: machine.supervisor.signal(signal.SIGTERM))  # the first one counts
    assert machine.supervisor.run() == 0
    assert [p.signals for _, p in machine.started] == [[signal.SIGINT], [signal.SIGINT]]


def test_a_worker_that_keeps_dying_as_it_starts_stops_everything() -> None:
    machine = Machine()
    for when in (1.0, 3.0, 6.0, 9.0, 12.0):  # each time the current worker 0 dies at once
        machine.at(when, machine.die(0, 1))
    assert machine.supervisor.run() == 1
    zeros = [p for i, p in machine.started if i == 0]
    assert len(zeros) == 3  # started, restarted after 0.5 s, after 1 s, then given up
    assert machine.current(1).signals == [signal.SIGTERM]  # the other worker was stopped


def test_settings_a_worker_refuses_exit_2_which_systemd_does_not_restart() -> None:
    machine = Machine(workers=1)
    for when in (0.5, 1.5, 3.0):
        machine.at(when, machine.die(0, 2))
    assert machine.supervisor.run() == 2


def test_a_worker_that_started_well_counts_its_deaths_afresh() -> None:
    machine = Machine(workers=1)
    machine.at(1.0, machine.die(0, 1))  # early: 1
    machine.at(2.0, machine.die(0, 1))  # early: 2
    machine.at(30.0, machine.die(0, 1))  # it had run for 10 s and more: not early
    machine.at(31.0, machine.die(0, 1))  # early: 1 again
    machine.at(60.0, lambda: machine.supervisor.signal(signal.SIGTERM))
    assert machine.supervisor.run() == 0
    assert len(machine.started) == 5


def test_workers_still_running_after_the_bound_are_killed_and_the_stop_is_not_clean() -> None:
    machine = Machine(obeys=False)
    machine.at(1.0, lambda: machine.supervisor.signal(signal.SIGTERM))
    assert machine.supervisor.run() == 1
    assert [p.signals for _, p in machine.started] == [[signal.SIGTERM, signal.SIGKILL]] * 2
    assert machine.now >= 41.0  # the signal at 1 s, then the whole 40 s


def test_a_dead_worker_starts_again_once_its_claims_have_expired() -> None:
    """With consume_owner, a worker at the dead one's address before ZooKeeper ended its session
    would be taken for the owner of its subscriptions: it stays down until then."""
    assert workers.restart_seconds(_settings(consume_session_seconds=6)) == 8.0
    assert workers.restart_seconds(_settings(consume_owner=False)) == 0.0
    machine = Machine(restart_seconds=8.0)
    machine.at(30.0, machine.die(1, -signal.SIGKILL))
    machine.at(60.0, lambda: machine.supervisor.signal(signal.SIGTERM))
    assert machine.supervisor.run() == 0
    again = machine.current(1)
    assert 38.0 <= again.started_at < 38.5


def test_the_bound_covers_a_workers_own_stop() -> None:
    assert workers.stop_seconds(_settings(shutdown_timeout=15)) == 40.0
