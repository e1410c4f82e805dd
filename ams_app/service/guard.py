"""Fail fast while a backend is down (docs/production.md "Backend outages").

A backend that stops answering costs every request its whole timeout: server selection in
pymongo, a delivery report or a fetch in librdkafka (``kafka_timeout_seconds``, 30 s by
default). The service's health check pings each backend every 2 s (ams_app/service/core.py).
When a ping fails, :meth:`Guarded.abandon` fails the calls already waiting on that backend, and
while the last ping failed every new call is refused at once; both answer
``503 <backend> is unavailable``. The first ping that succeeds lets calls through again: recovery
needs no restart.

A call abandoned this way may still complete inside the backend (a publish may be stored after
all): the client, told 503, sends it again, and at-least-once delivery holds.

A call that fails with the backend's own ``BackendUnavailable`` (ams_app/backends/errors.py; the
client is told ``503 Backend Error``) before the health check
has found the outage pings the backend once, for at most ``CONFIRM_SECONDS``: when that ping fails
too, the answer is ``503 <backend> is unavailable``, naming the cause, and the health check is asked
to look again at once (``recheck``). A backend that answers the ping keeps its own error (a
partition without a leader, say).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
from gevent import getcurrent

from ams_app.backends.errors import BackendUnavailable
from ams_app.errors import AmsError

if TYPE_CHECKING:
    from ams_app.telemetry import Telemetry

#: Calls that must reach the backend whatever the health check last found.
PASS_THROUGH = frozenset({"ping", "close"})
#: How long a failed call's confirming ping may take; a backend that is up answers in milliseconds.
CONFIRM_SECONDS = 1.0


class Guarded:
    """``target`` with every method refused while ``is_down()`` says so; with ``telemetry``, each
    call's duration and failures are recorded under ``backend`` (docs/monitoring.md)."""

    def __init__(
        self,
        target: Any,
        name: str,
        is_down: Callable[[], bool],
        recheck: Callable[[], None] = lambda: None,
        *,
        telemetry: Telemetry | None = None,
        backend: str = "",
    ) -> None:
        self._target = target
        self._name = name
        self._is_down = is_down
        self._recheck = recheck
        self._telemetry = telemetry
        self._backend = backend or name
        self._waiting: set[Any] = set()  # greenlets inside a call to the backend

    def unavailable(self) -> AmsError:
        return AmsError.unavailable(f"{self._name[0].upper()}{self._name[1:]} is unavailable")

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr in PASS_THROUGH or attr.startswith("_") or not callable(value):
            return value
        is_down, waiting, unavailable, gone = self._is_down, self._waiting, self.unavailable, self._gone
        telemetry, backend = self._telemetry, self._backend
        if telemetry is not None:
            from ams_app.telemetry import error_kind

            timing = telemetry.backend_calls.labels(backend, attr)
            errors = telemetry.backend_errors

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if is_down():
                if telemetry is not None:
                    errors.labels(backend, "refused").inc()
                raise unavailable()
            current = getcurrent()
            waiting.add(current)
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            except BaseException as exc:
                if telemetry is not None:
                    errors.labels(backend, error_kind(exc)).inc()
                if isinstance(exc, BackendUnavailable) and gone():
                    raise unavailable() from exc
                raise
            finally:
                waiting.discard(current)
                if telemetry is not None:
                    timing.observe(time.perf_counter() - start)

        self.__dict__[attr] = guarded  # methods do not change: built once, found directly next time
        return guarded

    def _gone(self) -> bool:
        """After a call failed with the backend's 503: is the backend down (found so, or not
        answering a ping now)? A ping that fails also asks the health check to look again."""
        if self._is_down():
            return True
        try:
            with gevent.Timeout(CONFIRM_SECONDS):
                self._target.ping()
            return False
        except (Exception, gevent.Timeout):
            self._recheck()
            return True

    def abandon(self) -> int:
        """Fail every call of a greenlet of this hub that waits on the backend now (it was just
        found down); returns how many. Each is told 503 where it waits, unless it has left the
        call by the time its turn comes."""
        hub = gevent.get_hub()
        waiting = [g for g in self._waiting if g.parent is hub]
        for g in waiting:
            hub.loop.run_callback(self._throw, g)
        return len(waiting)

    def _throw(self, g: Any) -> None:
        if g in self._waiting and not g.dead:
            with contextlib.suppress(Exception):  # it may have ended meanwhile
                g.throw(self.unavailable())
