"""The release records: CHANGELOG.md cut into released sections (Keep a Changelog, semantic
versions), each with its headings once, and the version pyproject.toml builds released there and
given its upgrade notes in docs/production.md, "Upgrading"."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$")
KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security", "Performance"}


def _sections() -> list[tuple[str, list[str]]]:
    """(the ``## `` heading, its ``### `` headings), in the file's order."""
    out: list[tuple[str, list[str]]] = []
    for line in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            out.append((line, []))
        elif line.startswith("### "):
            assert out, f"{line!r} before any release heading"
            out[-1][1].append(line[4:])
    return out


def _version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_changelog_is_cut_into_releases_with_each_heading_once() -> None:
    sections = _sections()
    assert sections[0][0] == "## [Unreleased]"
    released = [RELEASE.match(heading) for heading, _ in sections[1:]]
    assert all(released), [heading for heading, _ in sections[1:]]
    versions = [tuple(int(n) for n in m.group(1).split(".")) for m in released if m]
    assert versions == sorted(versions, reverse=True)  # newest first
    dates = [m.group(2) for m in released if m]
    assert dates == sorted(dates, reverse=True)
    for heading, kinds in sections:
        assert len(kinds) == len(set(kinds)), f"{heading}: a heading twice: {kinds}"
        assert set(kinds) <= KINDS, f"{heading}: {sorted(set(kinds) - KINDS)}"


def test_the_version_built_is_released_with_its_upgrade_notes() -> None:
    version = _version()
    assert any(heading.startswith(f"## [{version}] - ") for heading, _ in _sections())
    upgrading = (ROOT / "docs" / "production.md").read_text(encoding="utf-8").split("### Upgrading", 1)[1]
    assert f"- **{version}** (" in upgrading.split("\n## ", 1)[0]
