"""The two seams between the service layer and storage: a metadata store and a message log."""

from __future__ import annotations

from ams_app.backends.log import MessageLog
from ams_app.backends.store import MetadataStore
from ams_app.settings import Settings


def open_backends(settings: Settings) -> tuple[MetadataStore, MessageLog]:
    """Open the backend pair the settings name."""
    if settings.backend == "embedded":
        from ams_app.backends.sqlite import open_embedded

        return open_embedded(settings)
    raise ValueError(f"unknown backend {settings.backend!r}")
