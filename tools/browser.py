"""The browser of the console's end-to-end tests (tests/e2e, docs/console.md): Debian's ``chromium``,
driven by Playwright through ``executable_path``. Never ``playwright install``: that downloads
browser builds of Playwright's own, from hosts this project does not use.

    python -m tools.browser install   # apt-get install chromium fonts-liberation, when missing (idempotent)
    python -m tools.browser path      # print the chromium executable

The tests start it with ``launch_options()``: ``chromium.launch(**browser.launch_options())``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tools import toolkit

#: Debian's launcher: a shell script that sets Debian's flags and execs /usr/lib/chromium/chromium.
CHROMIUM = Path("/usr/bin/chromium")
#: Each package with a file that shows it is installed (a check of files only: quick when present).
PACKAGES: dict[str, Path] = {
    "chromium": CHROMIUM,
    # a font with metrics for the CSS fallbacks, so that screenshots look the same on every machine
    "fonts-liberation": Path("/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf"),
}
APT_TIMEOUT = 900.0
#: How long apt-get waits for another apt-get or dpkg (make services-up may be installing too).
APT_LOCK_SECONDS = 300


class BrowserError(RuntimeError):
    """The browser could not be installed or found; the message says why."""


def say(message: str) -> None:
    print(f"browser: {message}", file=sys.stderr, flush=True)


def missing_packages() -> list[str]:
    return [package for package, probe in PACKAGES.items() if not probe.exists()]


def install() -> Path:
    """Install what is missing of PACKAGES with apt-get (as root); the chromium executable."""
    missing = missing_packages()
    if not missing:
        return chromium_path()
    if os.geteuid() != 0:
        raise BrowserError(f"missing packages {' '.join(missing)}: run as root, or apt-get install them yourself")
    say(f"apt-get install {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = f"DPkg::Lock::Timeout={APT_LOCK_SECONDS}"
    hint = "apt-get is Debian's; on another system install chromium yourself"
    toolkit.run(
        ["apt-get", "-o", lock, "update"],
        timeout=APT_TIMEOUT,
        what="apt-get update",
        error=BrowserError,
        hint=hint,
        env=env,
    )
    toolkit.run(
        ["apt-get", "-o", lock, "install", "-y", "--no-install-recommends", *missing],
        timeout=APT_TIMEOUT,
        what="apt-get install",
        error=BrowserError,
        hint=hint,
        env=env,
    )
    still = missing_packages()
    if still:
        raise BrowserError(f"apt-get installed {' '.join(missing)}, but {' '.join(still)} still missing")
    return chromium_path()


def chromium_path() -> Path:
    """The chromium executable, installed by ``install``."""
    if not os.access(CHROMIUM, os.X_OK):
        raise BrowserError(f"{CHROMIUM} not found: run make browser (python -m tools.browser install)")
    return CHROMIUM


def launch_options(headless: bool = True) -> dict[str, Any]:
    """Keyword arguments of Playwright's ``chromium.launch`` that start Debian's chromium here.

    Without Chromium's sandbox (Playwright then passes ``--no-sandbox``): the tests run as root,
    where Chromium refuses to start with it ("Running as root without --no-sandbox is not
    supported"), and the sandbox needs user namespaces that a container may not grant. The pages
    are the console's own, on loopback. No ``channel``: that names Playwright's own builds."""
    return {"executable_path": str(chromium_path()), "headless": headless, "chromium_sandbox": False}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools.browser", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("command", choices=["install", "path"])
    args = parser.parse_args(argv)
    try:
        path = install() if args.command == "install" else chromium_path()
    except BrowserError as exc:
        print(f"browser: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
