"""Under CI=true a skipped test fails the run; pytest's "no tests" exit status fails .ci/run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def run_pytest(tmp_path: Path, source: str, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(source)
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


SKIPPING = "import pytest\n\ndef test_needs_a_service():\n    pytest.skip('kafka is not installed')\n"


def test_a_skip_fails_under_ci(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, SKIPPING, "true")
    assert done.returncode == 1, done.stdout
    assert "skipped under CI=true: " in done.stdout


def test_a_skip_is_a_skip_outside_ci(tmp_path: Path) -> None:
    assert run_pytest(tmp_path, SKIPPING, "").returncode == 0


def test_no_tests_is_a_failure(tmp_path: Path) -> None:
    assert run_pytest(tmp_path, "", "true").returncode == 5
