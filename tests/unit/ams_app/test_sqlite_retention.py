"""A topic's own retention on the embedded log (messageRetentionDuration): its messages go when
they are older than it, whatever the log's retention; the others follow the log's."""

from __future__ import annotations

from pathlib import Path

import time_machine

from ams_app.backends.log import NewMessage
from ams_app.backends.sqlite.log import SqliteMessageLog

HOUR = 3600


def test_a_topic_with_its_own_retention_loses_its_old_messages_alone(tmp_path: Path) -> None:
    with time_machine.travel("2026-11-27 10:00:00", tick=False) as clock:
        log = SqliteMessageLog(str(tmp_path / "log.db"), retention_seconds=0)  # the log keeps forever
        try:
            log.create_topic("p.short", retention_seconds=HOUR)
            log.create_topic("p.forever")
            for key in ("p.short", "p.forever"):
                log.append(key, [NewMessage("eA==", {})])
            clock.shift(HOUR - 1)
            assert log.purge_expired() == 0
            for key in ("p.short", "p.forever"):
                log.append(key, [NewMessage("eQ==", {})])
            clock.shift(2)
            assert log.purge_expired() == 1
            assert log.bounds("p.short") == (1, 2)
            assert log.bounds("p.forever") == (0, 2)
        finally:
            log.close()


def test_the_logs_retention_spares_a_topic_that_keeps_longer(tmp_path: Path) -> None:
    with time_machine.travel("2026-11-27 10:00:00", tick=False) as clock:
        log = SqliteMessageLog(str(tmp_path / "log.db"), retention_seconds=HOUR)
        try:
            log.create_topic("p.long", retention_seconds=24 * HOUR)
            log.create_topic("p.usual")
            for key in ("p.long", "p.usual"):
                log.append(key, [NewMessage("eA==", {})])
            clock.shift(2 * HOUR)
            assert log.purge_expired() == 1
            assert log.bounds("p.long") == (0, 1)
            assert log.bounds("p.usual") == (1, 1)
        finally:
            log.close()
