"""What a backend raises when a call fails for a reason of its own. The backends know nothing of
HTTP: the service's guard (ams_app/service/guard.py) and the HTTP layer (ams_app/errors_http.py)
say what a client is told."""

from __future__ import annotations


class BackendError(Exception):
    """A backend call failed."""


class BackendUnavailable(BackendError):
    """The backend did not answer or failed the call (a broker down, a partition without a leader,
    a timeout); the same call may succeed later. Clients are told ``503``."""


class MessageTooLarge(BackendError):
    """The backend refuses a message of this size (Kafka's ``message.max.bytes``). Clients are
    told ``413``."""


class LayoutRefused(RuntimeError):
    """The metadata database is not one this release may open: written by a newer release (a
    layout version above this one's), or in the original ARGO AMS's layout. Not a BackendError:
    the process stops with the reason, it does not serve (docs/production.md, "Upgrading")."""


class StoreBusy(RuntimeError):
    """The embedded data directory cannot be opened now: a restore holds it, or left it unfinished,
    or (for a restore) a running ams has it open. The process stops with the reason
    (docs/production.md, "Backup and restore")."""
