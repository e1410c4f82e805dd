"""``ams serve`` with ``workers`` other than 1: a parent that starts a worker process per core and
keeps them running (docs/production.md, "A process per core").

Each worker is an ordinary single-process ``ams serve`` (ams_app/serve.py) started with its own
settings in the environment (``worker_environment``): its node name (``{node}-w{i}``), its own API
port (``worker_port_base + i``) and gRPC port (``worker_grpc_port_base + i``), an advertise URL
there, and ``workers: 1``. It is a node of its own for the subscription owners, push delivery and
the metadata cache: the other nodes and workers forward to its own port. Told by ``AMS_WORKER_*``
variables (``Role``), it also listens on the node's ``port`` and ``grpc_port``, which all the
workers bind with SO_REUSEPORT: the kernel spreads the connections over them.

The parent serves nothing. It forwards SIGTERM and SIGINT to the workers and waits for them
(at most ``2 * shutdown_timeout + 10`` seconds, then SIGKILL), restarts a worker that dies (once
its subscriptions' claims have expired, ``restart_seconds``, and after a backoff), and gives up,
stopping the others, when a worker keeps dying as it starts (a port in use, settings it refuses).
No gevent here: ams_app/serve.py patches the standard library as it is imported, so the parent
never imports it; the workers do, each in a process of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ams_app.settings import Settings

log = logging.getLogger("ams.workers")

#: The variables a parent sets for each worker, beside the settings it changes (AMS_* settings).
INDEX = "AMS_WORKER_INDEX"
PARENT = "AMS_WORKER_PARENT"
SHARED_PORT = "AMS_WORKER_SHARED_PORT"
SHARED_GRPC_PORT = "AMS_WORKER_SHARED_GRPC_PORT"

#: A worker that exits within this many seconds of its start died starting...
EARLY_SECONDS = 10.0
#: ... and when one does so this many times in a row, the parent stops every worker and exits.
GIVE_UP_AFTER = 3
#: Seconds before a dead worker is started again: this, doubled for each early death in a row...
FIRST_BACKOFF = 0.5
#: ... up to this.
MAX_BACKOFF = 10.0
#: Seconds between two looks at the workers.
POLL_SECONDS = 0.1


@dataclasses.dataclass(frozen=True)
class Role:
    """What a worker is told by its parent: which worker it is, the parent's pid (a worker whose
    parent is gone stops), and the node's shared ports, which it listens on beside its own."""

    index: int
    parent: int
    shared_port: int
    shared_grpc_port: int = 0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Role | None:
        """The role in the environment; None for a process that no parent started."""
        env = os.environ if environ is None else environ
        if not env.get(INDEX):
            return None
        return cls(
            index=int(env[INDEX]),
            parent=int(env.get(PARENT) or 0),
            shared_port=int(env[SHARED_PORT]),
            shared_grpc_port=int(env.get(SHARED_GRPC_PORT) or 0),
        )


def worker_node_name(settings: Settings, index: int) -> str:
    """Worker ``index``'s node name: the node's (or the host name) with ``-w{index}``."""
    return f"{settings.node_name or socket.gethostname()}-w{index}"


def with_port(url: str, port: int) -> str:
    """``url`` with its port replaced (its scheme, host and path kept)."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def worker_environment(settings: Settings, index: int, parent: int) -> dict[str, str]:
    """The variables that make ``ams serve`` worker ``index`` of a node with ``settings``: the
    settings it changes (AMS_*, over the node's) and its role (AMS_WORKER_*)."""
    own = settings.worker_ports[index]
    env = {
        "AMS_WORKERS": "1",
        "AMS_PORT": str(own),
        "AMS_NODE_NAME": worker_node_name(settings, index),
        # the node's URL (advertise_url, or built from host and port with the node's own name) at
        # the worker's own port: where the other nodes and workers forward to it
        "AMS_ADVERTISE_URL": with_port(settings.node_url, own),
        INDEX: str(index),
        PARENT: str(parent),
        SHARED_PORT: str(settings.port),
    }
    if settings.grpc_port:
        env["AMS_GRPC_PORT"] = str(settings.worker_grpc_ports[index])
        env[SHARED_GRPC_PORT] = str(settings.grpc_port)
    return env


def command_environment(config: str | None, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The command line's settings as AMS_* variables, for workers started without arguments: the
    same settings, as the environment ranks below the command line and above the file."""
    env = {f"AMS_{name.upper()}": str(value) for name, value in overrides.items() if value is not None}
    if config:
        env["AMS_CONFIG"] = os.path.abspath(config)
    return env


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"status {code}"


@dataclasses.dataclass
class _Worker:
    index: int
    env: dict[str, str]
    proc: Any = None  # a subprocess.Popen while it runs
    started: float = 0.0
    early: int = 0  # deaths in a row within EARLY_SECONDS of the start
    restart_at: float | None = None


class Supervisor:
    """Starts the workers, restarts those that die, stops them all on SIGTERM or SIGINT."""

    def __init__(
        self,
        environments: Sequence[Mapping[str, str]],
        stop_seconds: float,
        restart_seconds: float = 0.0,
        command: Sequence[str] = (sys.executable, "-m", "ams_app", "serve"),
        popen: Callable[..., Any] = subprocess.Popen,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.workers = [_Worker(index, dict(env)) for index, env in enumerate(environments)]
        self.stop_seconds = stop_seconds
        self.restart_seconds = restart_seconds  # the least time before a dead worker starts again
        self.command = list(command)
        self.popen = popen
        self.clock = clock
        self.sleep = sleep
        self.signalled: int | None = None

    def signal(self, signum: int, frame: Any = None) -> None:
        """A signal handler: the first SIGTERM or SIGINT stops the workers (run's loop sees it)."""
        if self.signalled is None:
            self.signalled = signum

    def _start(self, worker: _Worker) -> None:
        worker.proc = self.popen(self.command, env=worker.env, start_new_session=True)
        worker.started = self.clock()
        worker.restart_at = None
        log.info("worker %d started (pid %d)", worker.index, worker.proc.pid)

    def run(self) -> int:
        """Until a signal or a worker that keeps dying: the exit status of ``ams serve``."""
        for worker in self.workers:
            self._start(worker)
        while self.signalled is None:
            gave_up = self._look()
            if gave_up is not None:
                self._stop(signal.SIGTERM, "giving up")
                return gave_up
            self.sleep(POLL_SECONDS)
        return self._stop(self.signalled, f"signal {self.signalled}")

    def _look(self) -> int | None:
        """Reap and restart the workers; an exit status when one keeps dying at its start."""
        now = self.clock()
        for worker in self.workers:
            if worker.proc is None:
                if worker.restart_at is not None and now >= worker.restart_at:
                    self._start(worker)
                continue
            code = worker.proc.poll()
            if code is None:
                if worker.early and now - worker.started >= EARLY_SECONDS:
                    worker.early = 0  # it started this time
                continue
            lived = now - worker.started
            pid, worker.proc = worker.proc.pid, None
            if lived < EARLY_SECONDS:
                worker.early += 1
            else:
                worker.early = 0
            if worker.early >= GIVE_UP_AFTER:
                log.error(
                    "worker %d exited %d times in a row within %.0fs of its start (last: %s): stopping the"
                    " other workers and exiting; its log lines above say why (a port in use? settings it refuses?)",
                    worker.index,
                    worker.early,
                    EARLY_SECONDS,
                    _status(code),
                )
                return 2 if code == 2 else 1  # 2: settings refused (systemd does not restart the unit)
            delay = max(self.restart_seconds, min(MAX_BACKOFF, FIRST_BACKOFF * 2 ** max(worker.early - 1, 0)))
            worker.restart_at = now + delay
            log.warning(
                "worker %d (pid %d) exited unexpectedly, %s, after %.1fs: starting it again in %.1fs",
                worker.index,
                pid,
                _status(code),
                lived,
                delay,
            )
        return None

    def _stop(self, signum: int, reason: str) -> int:
        """Send ``signum`` to the running workers and wait for them (at most stop_seconds), then
        SIGKILL those left: 0 when every one stopped by itself with status 0."""
        running = [w for w in self.workers if w.proc is not None]
        log.info("%s: stopping %d workers (at most %.0fs, then SIGKILL)", reason, len(running), self.stop_seconds)
        for worker in running:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signum)
        deadline = self.clock() + self.stop_seconds
        clean = True
        while running and self.clock() < deadline:
            for worker in list(running):
                code = worker.proc.poll()
                if code is not None:
                    running.remove(worker)
                    if code != 0:
                        clean = False
                        log.warning("worker %d (pid %d) stopped with %s", worker.index, worker.proc.pid, _status(code))
            if running:
                self.sleep(POLL_SECONDS)
        for worker in running:
            clean = False
            log.error(
                "worker %d (pid %d) still running %.0fs after the signal: SIGKILL",
                worker.index,
                worker.proc.pid,
                self.stop_seconds,
            )
            worker.proc.kill()
            worker.proc.wait()
        log.info("stopped" if clean else "stopped, not cleanly")
        return 0 if clean else 1


def stop_seconds(settings: Settings) -> float:
    """How long the parent waits for its workers after a signal before it kills them: a worker's
    own stop is bounded by about twice shutdown_timeout (ams_app/serve.py); the systemd unit's
    TimeoutStopSec is longer (roles/ams/templates/ams.service.j2)."""
    return 2 * settings.shutdown_timeout + 10


def restart_seconds(settings: Settings) -> float:
    """How long a dead worker stays down before it starts again: with consume_owner, until
    ZooKeeper has ended its session and the claims in it (at the first tick past the session
    timeout: 2 s more, as ams_app/service/owner.py allows). Meanwhile the requests for its
    subscriptions find its port closed and wait for the claims to go, then are served by another
    worker; a new worker at the same address before then would be taken for their owner (and answer
    503, the subscription moving, as it is not)."""
    if settings.backend == "kafka" and settings.consume_owner:
        return settings.consume_session_seconds + 2
    return 0.0


def run_workers(settings: Settings, config: str | None = None, overrides: Mapping[str, Any] | None = None) -> int:
    """``ams serve`` with workers other than 1: start ``settings.worker_count`` workers and watch
    them until SIGTERM or SIGINT; the exit status."""
    from ams_app.logs import configure_logging

    configure_logging(settings)
    count = settings.worker_count
    common = {**os.environ, **command_environment(config, overrides or {})}
    environments = [{**common, **worker_environment(settings, index, os.getpid())} for index in range(count)]
    supervisor = Supervisor(environments, stop_seconds(settings), restart_seconds(settings))
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, supervisor.signal)
    grpc = settings.worker_grpc_ports
    log.info(
        "%d workers on port %d%s (shared), their own ports %d-%d%s",
        count,
        settings.port,
        f" and gRPC port {settings.grpc_port}" if settings.grpc_port else "",
        settings.worker_ports.start,
        settings.worker_ports.stop - 1,
        f" and gRPC ports {grpc.start}-{grpc.stop - 1}" if grpc else "",
    )
    return supervisor.run()
