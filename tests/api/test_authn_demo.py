"""``make authn-demo`` (tools/authn_demo.py) as a user runs it: AMS on 127.0.0.2:443 and ``ams authn``
beside it, a client certificate bound, argo-ams-library's certificate mode publishing and pulling;
then ``down`` stops both (docs/authn.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import requests

from tests.helpers import ROOT
from tests.openapi_check import ResponseChecker, load_document


def test_the_demo_starts_gets_a_token_with_a_certificate_and_stops(
    tmp_path: Path, openapi_checker: ResponseChecker
) -> None:
    openapi_checker.others[8443] = ResponseChecker(load_document("ams_app.authn"))  # AuthN's answers
    env = {**os.environ, "AMS_AUTHN_DEMO_DIR": str(tmp_path / "demo")}
    tool = [sys.executable, "-m", "tools.authn_demo"]
    try:
        up = subprocess.run([*tool, "up"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "pulled 1 message(s)" in up.stdout
        ca = str(tmp_path / "demo" / "pki" / "ca.pem")
        cert = (str(tmp_path / "demo" / "pki" / "client.pem"), str(tmp_path / "demo" / "pki" / "client.key"))
        r = requests.get(
            "https://127.0.0.2:8443/v1/service-types/ams/hosts/127.0.0.2:authx509", cert=cert, verify=ca, timeout=30
        )
        assert r.status_code == 200
        assert len(r.json()["token"]) == 64
        again = subprocess.run([*tool, "up"], env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert again.returncode == 0, again.stdout + again.stderr  # a second `up` finds it all there
        assert "already running" in again.stdout
    finally:
        down = subprocess.run([*tool, "down"], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
        openapi_checker.others.pop(8443, None)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "ams stopped" in down.stdout
    assert "authn stopped" in down.stdout
