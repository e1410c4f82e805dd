"""The embedded backend: SQLite databases under ``data_dir``, no servers."""

from __future__ import annotations

import os

from ams_app.backends.sqlite.log import SqliteMessageLog
from ams_app.backends.sqlite.store import SqliteMetadataStore
from ams_app.settings import Settings
from ams_app.tokenseal import Keyring


def open_embedded(settings: Settings, keyring: Keyring | None) -> tuple[SqliteMetadataStore, SqliteMessageLog]:
    """The embedded pair; users' tokens sealed under ``keyring`` (None: in clear)."""
    os.makedirs(settings.data_dir, mode=0o700, exist_ok=True)
    store = SqliteMetadataStore(os.path.join(settings.data_dir, "metadata.db"), keyring)
    log = SqliteMessageLog(
        os.path.join(settings.data_dir, "messages.db"),
        retention_seconds=settings.log_retention_seconds,
    )
    return store, log
