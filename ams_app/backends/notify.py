"""In-process wake-ups for long-poll pulls, shared by the message logs."""

from __future__ import annotations

from gevent.event import Event


class AppendNotifier:
    """Wakes the pulls waiting on a topic when this process appends to it.

    A marker per topic changes on every append: a pull reads it before looking at the log and
    hands it back to ``wait``, which returns at once if an append came in between (no lost
    wake-up). Appends by other processes or nodes are seen by waking every ``recheck`` seconds.
    """

    def __init__(self, recheck: float) -> None:
        self.recheck = recheck
        self._events: dict[str, Event] = {}
        self._markers: dict[str, int] = {}

    def marker(self, key: str) -> int:
        return self._markers.get(key, 0)

    def notify(self, key: str) -> None:
        self._markers[key] = self._markers.get(key, 0) + 1
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def wait(self, key: str, marker: int, timeout: float) -> None:
        if self._markers.get(key, 0) != marker:
            return
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = Event()
        event.wait(min(timeout, self.recheck))

    def wake_all(self) -> None:
        for event in self._events.values():
            event.set()
