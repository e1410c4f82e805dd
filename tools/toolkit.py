"""What tools/services.py and tools/image.py share: running a command with a bound and a
readable error. tools/ is no package: each tool puts this folder on sys.path to import it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

LOG_TAIL_LINES = 40


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    what: str,
    error: type[Exception],
    hint: str = "",
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end within ``timeout`` s; a failure, a timeout or a missing program
    raises ``error`` with what was tried and the tail of its output."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        raise error(f"{what}: no result after {timeout:.0f}s ({' '.join(argv)})") from exc
    except FileNotFoundError as exc:
        raise error(f"{what}: {argv[0]} not found{f' ({hint})' if hint else ''}") from exc
    if done.returncode != 0:
        out = (done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:]
        raise error(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n" + "\n".join(out))
    return done
