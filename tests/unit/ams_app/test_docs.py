"""The configuration reference documents every setting, with its real default and legal values."""

from __future__ import annotations

import dataclasses
import re

import pytest

from ams_app.settings import Settings, constraint
from tests.helpers import ROOT

DOC = (ROOT / "docs" / "configuration.md").read_text()
ROWS = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", DOC, re.MULTILINE))
MEANINGS = dict(re.findall(r"^\| `(\w+)` \| [^|]+ \| (.*) \|$", DOC, re.MULTILINE))
FIELDS = dataclasses.fields(Settings)


def test_the_table_lists_exactly_the_settings() -> None:
    assert set(ROWS) == {f.name for f in FIELDS}


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_documented_default(field: dataclasses.Field) -> None:  # type: ignore[type-arg]
    shown = ROWS[field.name].strip().strip("`")
    default = field.default
    if default in (None, ""):
        assert shown == "—"
    elif isinstance(default, bool):
        assert shown == str(default).lower()
    elif isinstance(default, int | float):
        assert float(shown) == float(default)
    else:
        assert shown == default


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_documented_legal_values(field: dataclasses.Field) -> None:  # type: ignore[type-arg]
    """A row says "Allowed: ..." in exactly the words of the setting's declared constraint, and
    only a constrained setting's row says it."""
    meaning = MEANINGS[field.name]
    rule = constraint(field.name)
    if rule is None:
        assert "Allowed:" not in meaning
    else:
        assert meaning.count("Allowed:") == 1, meaning
        assert f"Allowed: {rule.describe(markdown=True)}." in meaning
