"""Schemathesis against ``ams serve``, driven by the server's own ``/v1/openapi.json``, on both
backends (docs/testing.md "Fuzzing").

Every phase runs: the document's examples, coverage (boundary and invalid values of every
parameter and body), random generation, and the stateful phase, which chains operations through
the links schemathesis infers (create a topic, then publish to it, then delete it). Path
parameters hit real objects most of the time: a project, topics (one with a schema), a
subscription, a member and a registration are created first, drawn from dictionaries with
probability 0.75, and put back by tests/fuzz_hooks.py whenever a call may have removed them.

What must hold for every response: no 5xx, a status the document declares for the operation, the
declared Content-Type and schema, and a request that violates the document refused with a 4xx.
(``positive_data_acceptance`` is left out: many schema-valid values are refused on purpose for
reasons a JSON schema cannot say, such as an unknown page token or a start date after the end
date.) The number of examples is bounded (AMS_FUZZ_EXAMPLES, default 15 per operation), and the
seed is fixed (AMS_FUZZ_SEED) so that a failure is reproducible; what fuzzing finds becomes a
regular test in the suite.

The server under fuzzing sends push traffic (endpoint verification, deliveries) only to a closed
port on loopback: its HTTP(S) proxy is 127.0.0.1:9, so a generated endpoint never leaves the
machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import fuzz_hooks
from tests.conftest import BACKENDS
from tests.helpers import AmsServer

EXAMPLES = int(os.environ.get("AMS_FUZZ_EXAMPLES", "15"))
SEED = os.environ.get("AMS_FUZZ_SEED", "20261125")
CHECKS = (
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "use_after_free",
    "ensure_resource_availability",
    "ignored_auth",
)
#: a closed port on loopback: whatever the server sends through its proxy goes nowhere
NOWHERE = "http://127.0.0.1:9"


def toml_value(value: Any) -> str:
    return json.dumps(value)  # JSON strings, numbers and arrays are valid TOML values


def config(token: str, dictionaries: dict[str, list[str]]) -> str:
    lines = [
        f"headers = {{ {toml_value('x-api-key')} = {toml_value(token)} }}",
        "[generation]",
        f"max-examples = {EXAMPLES}",
        "[phases.stateful]",
        "max-steps = 20",
    ]
    for name, values in dictionaries.items():
        lines += [f"[dictionaries.{name}]", f"values = {toml_value(values)}"]
    lines.append("[parameters]")
    for name in dictionaries:
        lines.append(f'"path.{name}" = {{ dictionary = {toml_value(name)}, probability = 0.75 }}')
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fuzzing_finds_nothing(backend: str, make_server: Any, tls_files: tuple[str, str, str], tmp_path: Path) -> None:
    srv: AmsServer = make_server(
        backend=backend,
        https_proxy=NOWHERE,
        http_proxy=NOWHERE,
        no_proxy="",
        ams_push_scan_seconds="1",
    )
    ca = tls_files[2]
    env = {
        **{k: v for k, v in os.environ.items() if "proxy" not in k.lower()},
        "AMS_FUZZ_URL": srv.url,
        "AMS_FUZZ_TOKEN": srv.token,
        "AMS_FUZZ_CA": ca,
        "SCHEMATHESIS_HOOKS": str(Path(fuzz_hooks.__file__)),
    }
    ids = fuzz_hooks.Fixtures(srv.url, srv.token, ca).ensure()
    registration = srv.api().ok(
        "POST", "/registrations", {"name": "applicant", "email": "applicant@example.org", "first_name": "A"}
    )
    dictionaries = {
        "project": [fuzz_hooks.PROJECT],
        "topic": [fuzz_hooks.TOPIC, fuzz_hooks.SCHEMA_TOPIC],
        "subscription": [fuzz_hooks.SUBSCRIPTION],
        "schema": [fuzz_hooks.SCHEMA],
        "user": [fuzz_hooks.MEMBER],
        "uuid": [ids["member_uuid"], registration["uuid"]],
        "token": [ids["member_token"]],
    }
    toml = tmp_path / "schemathesis.toml"
    toml.write_text(config(srv.token, dictionaries))
    cmd = [
        str(Path(sys.executable).parent / "st"),
        "--config-file",
        str(toml),
        "run",
        f"{srv.url}/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--seed",
        SEED,
        "--tls-verify",
        ca,
        "--workers",
        "1",
        "--no-color",
        "--suppress-health-check",
        "all",
    ]
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=840, check=False)
    output = run.stdout + run.stderr
    print(output[output.find("WARNINGS") :])  # shown with -rP: phases, warnings, cases generated
    assert run.returncode == 0, f"schemathesis found problems (seed {SEED}):\n{output[-20000:]}"
    for phase in ("Coverage", "Fuzzing", "Stateful"):  # each phase ran and passed
        assert f"✅ {phase}" in output, output[-5000:]
    generated = re.search(r"(\d+) generated", output)
    assert generated, output[-5000:]
    assert int(generated.group(1)) >= 20 * EXAMPLES, output[-5000:]  # 64 operations and more
