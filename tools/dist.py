"""``make dist``: the release's artifacts, built from this tree into one directory (dist/ by default):
the wheel and the source distribution of ``ams-app`` at pyproject.toml's version, and ``SHA256SUMS``
over them, in the format ``sha256sum -c`` checks (docs/production.md, "Releases").

    .venv/bin/python -m tools.dist [--out dist]

Built with setuptools' own build backend from the virtualenv (no isolated build environment, so no
network), after the web console's build (``make console``, npm: the wheel ships it); an earlier build
of the same version in the directory is replaced."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tomllib
from pathlib import Path

from tools import console_build

ROOT = Path(__file__).resolve().parent.parent


class DistError(RuntimeError):
    """The release could not be built; the message says why."""


def release() -> str:
    """The version being built (pyproject.toml)."""
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def build(out: Path) -> list[Path]:
    """The sdist and the wheel in ``out``, and SHA256SUMS beside them; the two artifacts."""
    from setuptools import build_meta  # type: ignore[import-untyped]

    out = out.resolve()
    console_build.build(DistError)  # the wheel ships the built console
    out.mkdir(parents=True, exist_ok=True)
    version = release()
    for old in [*out.glob(f"ams_app-{version}*"), out / "SHA256SUMS"]:
        old.unlink(missing_ok=True)
    here = Path.cwd()
    os.chdir(ROOT)  # the backend builds the project in the working directory
    try:
        made = [out / build_meta.build_sdist(str(out)), out / build_meta.build_wheel(str(out))]
    finally:
        os.chdir(here)
    sums = "".join(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n" for path in made)
    (out / "SHA256SUMS").write_text(sums)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools.dist", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "dist"), help="where to put them (default dist/)")
    args = parser.parse_args(argv)
    try:
        made = build(Path(args.out))
    except DistError as exc:
        print(f"dist: {exc}", file=sys.stderr)
        return 1
    for path in made:
        print(path)
    print(Path(args.out).resolve() / "SHA256SUMS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
