"""The web console's build (``make console``, docs/console.md) for the tools that build the ams-app
wheel (tools/artifacts.py, tools/dist.py): a wheel without the console would serve a 404 at
/console, so a failed build fails theirs.

The rules of the build (npm ci when the lock changed, npm run build when a source did) are the
Makefile's; this runs them and checks what they left in the package."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tools import toolkit

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "ams_app" / "console_dist"
INDEX = DIST / "index.html"
#: setuptools' copy of the package for an in-tree wheel build, which it never empties: the assets of
#: every earlier build (other hashed names) would ship in the next wheel.
BUILD_COPY = ROOT / "build" / "lib" / "ams_app" / "console_dist"
#: npm ci, the first time, then the TypeScript check and Vite's build.
BUILD_TIMEOUT = 1800.0
_REFERENCE = re.compile(r"""(?:src|href)="/console/(assets/[^"?#]+)\"""")


def build(error: type[Exception]) -> Path:
    """``make console`` (skipped while up to date), then check that index.html exists and that
    every asset it names is there, and forget setuptools' copy of an earlier build; the directory
    of the built files. Raises ``error``."""
    toolkit.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "console"],
        timeout=BUILD_TIMEOUT,
        what="make console (the web console's npm build)",
        error=error,
        hint="apt-get install make",
    )
    problems = check(DIST)
    if problems:
        raise error("make console: " + "; ".join(problems))
    shutil.rmtree(BUILD_COPY, ignore_errors=True)
    return DIST


def check(dist: Path) -> list[str]:
    """What is wrong with the build in ``dist``: no index.html, or assets it names that are missing."""
    index = dist / "index.html"
    if not index.is_file():
        return [f"no {index}"]
    named = _REFERENCE.findall(index.read_text(encoding="utf-8"))
    problems = [f"index.html names {name}, which is not in {dist}" for name in named if not (dist / name).is_file()]
    if not named:
        problems.append("index.html names no file of assets/")
    return problems
