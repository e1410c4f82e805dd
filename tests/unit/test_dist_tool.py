"""``make dist`` (tools/dist.py): the release's wheel (with the built web console) and sdist, built
from this tree, and a SHA256SUMS that ``sha256sum -c`` accepts."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tools import dist
from tools.dist import ROOT


def test_the_release_is_built_with_its_checksums(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    (out).mkdir()
    version = dist.release()
    stale = out / f"ams_app-{version}-py3-none-any.whl"
    stale.write_bytes(b"an earlier build")  # replaced, not kept beside
    done = subprocess.run(
        [sys.executable, "-m", "tools.dist", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    wheel, sdist = out / f"ams_app-{version}-py3-none-any.whl", out / f"ams_app-{version}.tar.gz"
    assert sorted(p.name for p in out.iterdir()) == sorted(["SHA256SUMS", wheel.name, sdist.name])
    checked = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count(": OK") == 2
    with zipfile.ZipFile(wheel) as built:
        names = set(built.namelist())
        metadata = built.read(f"ams_app-{version}.dist-info/METADATA").decode()
    assert {"ams_app/cli.py", "ams_app/openapi.yaml", "ams_app/migrate/argo.py", "spark/__init__.py"} <= names
    # the built console (make console, which tools.dist runs first), exactly: no earlier build's assets
    built = ROOT / "ams_app" / "console_dist"
    assert "ams_app/console_dist/index.html" in names
    shipped = {name for name in names if name.startswith("ams_app/console_dist/assets/")}
    assert shipped == {f"ams_app/console_dist/assets/{p.name}" for p in (built / "assets").iterdir()}
    assert any(name.endswith(".js") for name in shipped)
    assert f"\nVersion: {version}\n" in metadata
    with tarfile.open(sdist) as source:
        assert f"ams_app-{version}/pyproject.toml" in source.getnames()
