"""Usage counters: reads see every count exactly once, even when a flush overtakes them."""

from __future__ import annotations

from typing import Any

from ams_app.models import Usage, UsageBatch
from ams_app.service.usage import UsageCounters, day_of
from ams_app.timeutil import now_ns


class OvertakenStore:
    """A store whose first read is overtaken by a flush: it answers what it held when the read
    started, while the flush moves the pending counts in."""

    def __init__(self) -> None:
        self.daily: dict[str, int] = {}
        self.counters: UsageCounters | None = None
        self.overtakes = 1

    def usage(self, kind: str, project_uuid: str, name: str) -> Usage:
        return Usage()

    def add_usage(self, batch: UsageBatch) -> None:
        for (project, _, _), n in batch.daily.items():
            self.daily[project] = self.daily.get(project, 0) + n

    def daily_totals(self, start: str, end: str) -> dict[str, int]:
        snapshot = dict(self.daily)
        if self.overtakes and self.counters is not None:
            self.overtakes -= 1
            self.counters.flush()
        return snapshot


def test_a_read_overtaken_by_a_flush_reads_again() -> None:
    store = OvertakenStore()
    counters = UsageCounters(store, 0)  # type: ignore[arg-type]
    store.counters = counters
    now = now_ns()
    counters.published("p", "t", 3, 30, now)
    today = day_of(now)
    assert counters.daily_totals(today, today) == {"p": 3}
    assert store.overtakes == 0  # the overtaking did happen
    assert counters.daily_totals(today, today) == {"p": 3}  # and counts once afterwards


def test_counts_not_flushed_yet_are_read_from_memory() -> None:
    store: Any = OvertakenStore()
    store.overtakes = 0
    counters = UsageCounters(store, 0)
    now = now_ns()
    counters.published("p", "t", 2, 20, now)
    counters.published("q", "t", 5, 50, now)
    today = day_of(now)
    assert counters.daily_totals(today, today) == {"p": 2, "q": 5}
    counters.flush()
    assert counters.daily_totals(today, today) == {"p": 2, "q": 5}
