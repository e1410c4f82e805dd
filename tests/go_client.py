"""Google's Go Pub/Sub client (cloud.google.com/go/pubsub/v2) as a test driver: builds tests/go/pubsub
and runs its scenario (topic, subscription, publish N, StreamingPull until all N, ack, check, delete)
against a Pub/Sub v1 gRPC endpoint.

The binary is told where to go by its environment (see tests/go/pubsub/main.go):
``PUBSUB_EMULATOR_HOST`` (plaintext) or ``AMS_GRPC_ENDPOINT`` + ``AMS_GRPC_CA_FILE`` (TLS), ``AMS_TOKEN``
(sent as ``x-goog-api-key``), ``PUBSUB_PROJECT``. It prints one JSON line:
``{"published", "received_distinct", "duplicates", "mismatched", "publish_time_missing", "streams_opened",
"topic", "subscription", "publish_ms", "receive_ms", "ok", "error"}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

GO_DIR = Path(__file__).resolve().parent / "go" / "pubsub"
SOURCES = ("go.mod", "go.sum", "main.go")
BINARY_PREFIX = "pubsub-scenario-"
FALLBACK_GO = Path("/usr/local/go/bin/go")
# What the scenario binary inherits from this process; everything else comes from run()'s env, so a stray
# PUBSUB_EMULATOR_HOST in a developer's shell cannot redirect it.
INHERITED_ENV = ("PATH", "HOME", "TMPDIR")


class GoClientError(RuntimeError):
    """The Go scenario could not be built or run, or its run was not ok."""


def go_command() -> str:
    """The go tool: on PATH, else the image's /usr/local/go/bin/go."""
    found = shutil.which("go")
    if found:
        return found
    if FALLBACK_GO.is_file():
        return str(FALLBACK_GO)
    raise GoClientError("no go tool on PATH nor at /usr/local/go/bin/go")


def source_key() -> str:
    """A hash of main.go, go.mod and go.sum: the binary is rebuilt when any of them changes."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0")
        digest.update((GO_DIR / name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def build(cache_dir: Path, *, gocache: Path | None = None, timeout: float = 900.0) -> Path:
    """The scenario binary in ``cache_dir``, built when its sources changed since the last build.

    Go's build cache goes to ``gocache`` (default ``cache_dir/go-build``) so that a warm cache can be kept
    with the binary; modules come from the default GOMODCACHE, through the ordinary GOPROXY. go.sum is
    complete, so the build runs with ``-mod=readonly`` and never rewrites go.mod/go.sum. On failure the
    compiler's output is in the exception.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    binary = cache_dir / f"{BINARY_PREFIX}{source_key()}"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    env = dict(os.environ)
    env["GOCACHE"] = str(gocache if gocache is not None else cache_dir / "go-build")
    env["GOFLAGS"] = "-mod=readonly"
    env["GOTOOLCHAIN"] = "local"  # never fetch a toolchain: go.mod asks for go 1.26
    env["CGO_ENABLED"] = "0"
    # Built under a temporary name and renamed, so parallel workers never run a half-written file.
    fd, tmp_name = tempfile.mkstemp(prefix=".build-", dir=cache_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        try:
            proc = subprocess.run(
                [go_command(), "build", "-trimpath", "-o", str(tmp), "."],
                cwd=GO_DIR,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise GoClientError(f"go build timed out after {timeout:g} s:\n{_text(exc.stderr)}") from exc
        if proc.returncode != 0:
            raise GoClientError(f"go build failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        tmp.chmod(0o755)
        os.replace(tmp, binary)
    finally:
        tmp.unlink(missing_ok=True)
    for old in cache_dir.glob(f"{BINARY_PREFIX}*"):
        if old != binary:
            old.unlink(missing_ok=True)
    return binary


def run(
    binary: Path,
    env: Mapping[str, str],
    timeout: float,
    args: Sequence[str] = (),
    *,
    check: bool = True,
) -> dict[str, Any]:
    """Run the scenario with ``env`` (on top of PATH/HOME/TMPDIR only) and flags ``args`` (``-n``,
    ``-timeout``, ``-linger``, ``-trace``, ...), and return its JSON line as a dict.

    Raises GoClientError, with the program's stderr, when it cannot be run, overruns ``timeout`` seconds,
    prints no JSON line, or (with ``check``) reports ``ok: false``. With ``check=False`` a not-ok result
    is returned (for tests that expect a refusal); its stderr is then under the key ``stderr``.
    """
    full_env = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
    full_env.update(env)
    try:
        proc = subprocess.run(
            [str(binary), *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise GoClientError(
            f"{binary.name} {' '.join(args)} ran over {timeout:g} s (killed: its topic and subscription stay)\n"
            f"stdout:\n{_text(exc.stdout)}\nstderr:\n{_text(exc.stderr)}"
        ) from exc
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        result: Any = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or "ok" not in result:
        raise GoClientError(
            f"{binary.name} {' '.join(args)} exited {proc.returncode} without a JSON result\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    consistent = (proc.returncode == 0) == (result["ok"] is True)
    if not consistent or (check and not result["ok"]):
        raise GoClientError(
            f"{binary.name} {' '.join(args)} exited {proc.returncode}: {result.get('error') or 'not ok'}\n"
            f"result: {json.dumps(result)}\nstderr:\n{proc.stderr}"
        )
    if not result["ok"]:
        result["stderr"] = proc.stderr
    return result


def _text(data: str | bytes | None) -> str:
    """TimeoutExpired's captured output, which may be bytes even with text=True."""
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data
