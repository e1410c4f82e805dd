"""Usage counters: reads see every count exactly once, even when a flush overtakes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

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


@given(st.integers(0, 4_102_444_800 * 10**9))  # to 2100
def test_a_day_is_named_as_the_calendar_names_it(ns: int) -> None:
    assert day_of(ns) == datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%d")


def test_the_last_nanosecond_of_a_day_is_in_it() -> None:
    midnight = 1_796_083_200 * 10**9  # 2026-12-01T00:00:00Z
    assert (day_of(midnight - 1), day_of(midnight)) == ("2026-11-30", "2026-12-01")
