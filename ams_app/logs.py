"""Logging of the service's processes (``ams serve``, ``ams push-worker``, the AuthN service):
one line per record on stdout, for journald."""

from __future__ import annotations

import logging
import sys

from ams_app.settings import Settings


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        stream=sys.stdout,
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
