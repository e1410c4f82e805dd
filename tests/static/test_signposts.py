"""Every pointer a reader follows leads somewhere in the repository: no citation of documents the
project does not ship, and every ``docs/*.md`` named in code, docs or roles exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Documents that were the team's references while building, not part of what we ship. The
#: project's own docs/authn.md may be named (as docs/authn.md, or as a link within docs/).
_FOREIGN = re.compile(r"ams-api\.md|house[ -]style|\.\./shared/|(?<!docs/)(?<![(\[])authn\.md")
_DOC = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)")


def _tracked_text() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    out = []
    for name in names:
        path = ROOT / name
        if name == "CHANGELOG.md" or not path.is_file():  # the changelog records history as it was
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        out.append(path)
    return out


def test_no_citation_of_documents_the_project_does_not_ship() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _tracked_text()
        if path.name != Path(__file__).name
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _FOREIGN.search(line)
    ]
    assert found == []


def test_every_docs_page_named_exists() -> None:
    missing = sorted(
        {
            f"{path.relative_to(ROOT)}: docs/{name}"
            for path in _tracked_text()
            for name in _DOC.findall(path.read_text(encoding="utf-8"))
            if not (ROOT / "docs" / name).is_file()
        }
    )
    assert missing == []
