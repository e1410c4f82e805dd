"""The embedded data directory's lock: flock(2) on ``{data_dir}/lock``. Every process with the
embedded backend open holds it shared; a restore (ams_app/backup.py) holds it exclusively, so that
it never replaces files a running ams has open, and nothing opens them while it writes. A restore
that did not finish leaves ``RESTORE-IN-PROGRESS`` in the directory, and the store refuses to open
until a restore completes (docs/production.md, "Backup and restore")."""

from __future__ import annotations

import fcntl
import os

from ams_app.backends.errors import StoreBusy

LOCK_FILE = "lock"
RESTORING_MARK = "RESTORE-IN-PROGRESS"


class DataDirLock:
    """Held from construction until ``close`` (or the end of the process)."""

    def __init__(self, data_dir: str, *, exclusive: bool) -> None:
        # read-only and readable by all: whoever made it (root running `ams admin`, or the service's
        # user), every other process can open it to lock it; it holds nothing
        path = os.path.join(data_dir, LOCK_FILE)
        self.fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            if exclusive:
                raise StoreBusy(
                    f"{data_dir} is in use by a running ams (serve, push-worker, admin, backup): "
                    "stop it before the restore"
                ) from None
            raise StoreBusy(f"a restore into {data_dir} is running: wait for it to finish") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_data_dir(data_dir: str) -> DataDirLock:
    """The shared lock of a process opening the embedded backend in ``data_dir``; StoreBusy when a
    restore runs or did not finish."""
    lock = DataDirLock(data_dir, exclusive=False)
    if os.path.exists(os.path.join(data_dir, RESTORING_MARK)):
        lock.close()
        raise StoreBusy(
            f"a restore into {data_dir} did not finish: run `ams restore` again "
            "(docs/production.md, 'Backup and restore')"
        )
    return lock
