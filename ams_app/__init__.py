"""ams_app: the ARGO Messaging Service API v1 on Flask + gevent. Nothing happens at import.

The package holds only the version; the app is made in ams_app/app.py (the layout: README.md)."""

from __future__ import annotations

from importlib import metadata

try:
    # the installed distribution's version: a rolling upgrade shows on /v1/version (docs/ansible.md)
    __version__ = metadata.version("ams-app")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"
