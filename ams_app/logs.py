"""Logging of the service's processes (``ams serve``, ``ams push-worker``, the AuthN service):
one line per record on stdout, for journald."""

from __future__ import annotations

import logging
import sys

from ams_app.settings import Settings


def configure_logging(settings: Settings, tag: str = "") -> None:
    """``tag``: a word before each line's logger name, such as a node's worker (``w0``)."""
    logging.basicConfig(
        stream=sys.stdout,
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s {tag + ' ' if tag else ''}%(name)s %(message)s",
    )
