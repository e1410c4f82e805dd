"""The merge of live daily counters with the Spark job's daily figures (usage_daily)."""

from __future__ import annotations

from pathlib import Path

from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.backends.store import DailyUsage, daily_series, merge_daily, project_totals, utc_today
from ams_app.models import UsageBatch

TODAY = "2026-03-10"


def test_spark_replaces_past_days_per_topic_and_never_adds() -> None:
    live = [(("p", "a", "2026-03-09"), 100), (("p", "b", "2026-03-09"), 5), (("p", "a", "2026-03-08"), 7)]
    spark = [(("p", "a", "2026-03-09"), 10), (("p", "a", "2026-03-07"), 3)]
    assert merge_daily(live, spark, TODAY) == {
        ("p", "a", "2026-03-09"): 10,  # replaced, not 110
        ("p", "b", "2026-03-09"): 5,  # no Spark figure of that topic: live
        ("p", "a", "2026-03-08"): 7,  # no Spark figure of that day: live
        ("p", "a", "2026-03-07"): 3,  # only Spark
    }


def test_today_and_later_stay_live() -> None:
    live = [(("p", "a", TODAY), 4)]
    spark = [(("p", "a", TODAY), 999), (("p", "a", "2026-03-11"), 1)]
    assert merge_daily(live, spark, TODAY) == {("p", "a", TODAY): 4}


def test_a_zero_figure_replaces_too() -> None:
    assert merge_daily([(("p", "a", "2026-03-01"), 8)], [(("p", "a", "2026-03-01"), 0)], TODAY) == {
        ("p", "a", "2026-03-01"): 0
    }


def test_series_and_totals() -> None:
    merged = {
        ("p", "a", "2026-03-09"): 10,
        ("p", "b", "2026-03-09"): 5,
        ("p", "a", "2026-03-08"): 7,
        ("q", "a", TODAY): 1,
    }
    assert daily_series({k: v for k, v in merged.items() if k[0] == "p"}, 30) == [("2026-03-09", 15), ("2026-03-08", 7)]
    assert daily_series(merged, 1) == [(TODAY, 1)]
    assert project_totals(merged) == {"p": 22, "q": 1}


def test_embedded_store_merges(tmp_path: Path) -> None:
    store = SqliteMetadataStore(str(tmp_path / "metadata.db"))
    try:
        today, past = utc_today(), "2000-01-02"
        store.add_usage(UsageBatch(daily={("p", "a", today): 3, ("p", "a", past): 50, ("p", "b", past): 2}))
        store.replace_daily_usage(past, [DailyUsage("p", "a", 20, 200), DailyUsage("q", "a", 1, 1)])
        store.replace_daily_usage(today, [DailyUsage("p", "a", 999, 1)])
        assert store.daily_messages("p", "a", 30) == [(today, 3), (past, 20)]
        assert store.daily_messages("p", None, 30) == [(today, 3), (past, 22)]
        assert store.daily_totals(past, today) == {"p": 25, "q": 1}
        assert store.daily_totals(past, past) == {"p": 22, "q": 1}
        store.replace_daily_usage(past, [])  # a rerun replaces the day
        assert store.daily_messages("p", None, 30) == [(today, 3), (past, 52)]
        store.replace_daily_usage(past, [DailyUsage("p", "a", 20, 200)])
        store.delete_project("p")
        assert store.daily_totals(past, today) == {}
    finally:
        store.close()
