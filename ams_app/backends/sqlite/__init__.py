"""The embedded backend: SQLite databases under ``data_dir``, no servers."""

from __future__ import annotations

import os

from ams_app.backends.sqlite.log import SqliteMessageLog
from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.settings import Settings


def open_embedded(settings: Settings) -> tuple[SqliteMetadataStore, SqliteMessageLog]:
    os.makedirs(settings.data_dir, mode=0o700, exist_ok=True)
    store = SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"))
    log = SqliteMessageLog(
        os.path.join(settings.data_dir, "messages.db"),
        retention_seconds=settings.log_retention_seconds,
    )
    return store, log
