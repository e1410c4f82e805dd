"""Run Molecule scenarios (``molecule test -s NAME``), several at once, and report each one.

``make molecule`` calls it. Scenarios run ``--jobs`` at a time (default 2: this machine's cores).
That is safe because no two scenarios share a container name (``ams-<scenario>``) or a port (each
has its own range, docs/ansible.md), even though every container uses the host's network.

The longest scenarios start first: each run's durations are kept in
``.cache/molecule/durations.json``, so the next run can order by them. Each scenario's output goes
to ``.cache/molecule/<name>.log``. A failed scenario prints what failed (each failing task, pytest's
failures) and the tail of its log, and the exit status is 1 when any scenario failed. SIGTERM or SIGINT stops
the scenarios still running as the time limit does (their process group killed, their hosts destroyed
under ``CI=true``) and starts no other: ``.ci/run`` runs the eleven-host scenario in the background
beside ``make test`` and stops it so when the run fails before it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".cache" / "molecule"
DURATIONS = LOGS / "durations.json"
BASE_CONFIG = ROOT / ".config" / "molecule" / "config.yml"
VENV_BIN = Path(sys.executable).parent
#: Lines of a failed scenario's log shown when it fails; what failed (``failure_excerpt``) comes at
#: the very end of the run (``main``), where a CI system that shows only the output's end shows it.
TAIL_LINES = 40
#: A scenario that runs longer than this is stopped and counts as failed. ``multinode`` takes about
#: 55 min beside ``make test`` (docs/ansible.md, "CI"); the limit leaves the whole of ``.ci/run``
#: under the 90 minutes a run may take.
SCENARIO_TIMEOUT = 72 * 60
#: How long the destroy of a scenario stopped at that limit may take.
DESTROY_TIMEOUT = 10 * 60


def say(message: str) -> None:
    print(f"molecule: {message}", flush=True)


def all_scenarios(root: Path = ROOT) -> list[str]:
    return sorted(p.parent.name for p in (root / "molecule").glob("*/molecule.yml"))


def longest_first(names: Sequence[str], durations: Mapping[str, float]) -> list[str]:
    """Known durations, longest first, then the unknown ones (which may be long) in name order (pure)."""
    unknown = sorted(n for n in names if n not in durations)
    known = sorted((n for n in names if n in durations), key=lambda n: -durations[n])
    return [*unknown, *known]


#: Seconds each scenario took here (docs/ansible.md), the order a fresh clone (CI) starts them in
#: before it has durations of its own: the eleven-host scenario first, the rest beside it.
EXPECTED_SECONDS: dict[str, float] = {"multinode": 2200, "ams": 760}


#: What marks a failure in a scenario's log: a task's ``fatal:`` or ``failed:`` (with the task's
#: header above it), molecule's ERROR lines, testinfra's FAILED tests and their tracebacks' ``E`` lines,
#: and molecule_run's own word that it stopped the scenario (time limit, signal).
_FAILURE_MARKS = ("fatal: ", "failed: [", "ERROR ", "FAILED ", "E   ", "molecule_run: stopped")
EXCERPT_LINES = 120


def failure_excerpt(lines: Sequence[str], limit: int = EXCERPT_LINES) -> list[str]:
    """The lines of a failed scenario's log that say what failed (pure): each failing task from its
    ``TASK [`` header to the failure line and the 10 lines after it, molecule's ERROR lines and
    pytest's failures, in log order, the last ``limit`` lines (an ignored failure comes before the one
    that ended the run). The log's tail alone shows only the destroy that follows a failure."""
    keep: set[int] = set()
    for i, line in enumerate(lines):
        text = line.lstrip()
        if not text.startswith(_FAILURE_MARKS) or text.startswith("FAILED - RETRYING"):
            continue  # an until-loop's retry is not a failure
        start = i
        while start > 0 and i - start < 30 and not lines[start].startswith("TASK ["):
            start -= 1
        if not lines[start].startswith("TASK ["):
            start = i
        keep.update(range(start, min(i + 11, len(lines))))
    out: list[str] = []
    previous = -2
    for i in sorted(keep):
        if i != previous + 1 and out:
            out.append("[...]")
        out.append(lines[i])
        previous = i
    return out[-limit:]


def _load_durations() -> dict[str, float]:
    """This checkout's last durations, over EXPECTED_SECONDS."""
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        data = {}
    measured = {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    return {**EXPECTED_SECONDS, **measured}


def _molecule(verb: str, name: str) -> list[str]:
    return [str(VENV_BIN / "molecule"), "--base-config", str(BASE_CONFIG), verb, "-s", name]


def must_destroy(*, ok: bool, stopped: bool, ci: bool) -> bool:
    """Whether molecule_run destroys a scenario's hosts itself. Molecule's test sequence stops at a
    failed step and leaves them up: useful at a desk (``molecule verify -s NAME`` again, then
    ``molecule destroy -s NAME``), but under CI they would keep the machine's cores busy beside the
    scenario still running, and stay after the run. A scenario stopped at the time limit never got
    to its destroy."""
    return stopped or (ci and not ok)


#: Set by SIGTERM or SIGINT (``main``): the running scenarios are stopped, no other starts.
STOP = threading.Event()
#: How often a running scenario's wait looks at STOP and the time limit.
WAIT_STEP = 0.5


def wait_or_stop(process: subprocess.Popen[bytes], limit: float, stop: threading.Event) -> str:
    """Wait for ``process`` (the leader of a session of its own) to exit: ``"exited"``. Past ``limit``
    seconds (``"timeout"``) or once ``stop`` is set (``"stopped"``), kill its whole process group,
    ansible-playbook and pytest with it, and reap it."""
    deadline = time.monotonic() + limit
    while True:
        try:
            process.wait(timeout=WAIT_STEP)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        why = "stopped" if stop.is_set() else "timeout" if time.monotonic() >= deadline else ""
        if why:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return why


def log_of(name: str) -> Path:
    """Where a scenario's output goes."""
    return LOGS / f"{name}.log"


def _run(name: str) -> tuple[str, bool, float, list[str]]:
    log = log_of(name)
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    argv = _molecule("test", name)
    started = time.monotonic()
    if STOP.is_set():
        say(f"{name}: not started (molecule_run was stopped)")
        return name, False, 0.0, []
    say(f"{name}: started (log: {log.relative_to(ROOT)})")
    with log.open("w") as out:
        # a session of its own: a scenario stopped at the limit takes its ansible-playbook and pytest along
        with subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        ) as scenario:
            how = wait_or_stop(scenario, SCENARIO_TIMEOUT, STOP)
        ok, stopped = how == "exited" and scenario.returncode == 0, how != "exited"
        if how == "timeout":
            out.write(f"\nmolecule_run: stopped after {SCENARIO_TIMEOUT}s\n")
        elif how == "stopped":
            out.write(f"\nmolecule_run: stopped by a signal after {time.monotonic() - started:.0f}s\n")
        if must_destroy(ok=ok, stopped=stopped, ci=os.environ.get("CI") == "true"):
            # what the run would have destroyed last: no container or network left behind
            out.write("\nmolecule_run: destroying its hosts\n")
            out.flush()
            destroy = _molecule("destroy", name)
            try:
                subprocess.run(
                    destroy,
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=DESTROY_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                out.write(f"\nmolecule_run: its destroy stopped after {DESTROY_TIMEOUT}s\n")
    elapsed = time.monotonic() - started
    if ok:
        say(f"{name}: passed in {elapsed:.0f}s")
        return name, ok, elapsed, []
    lines = log.read_text(errors="replace").splitlines()
    tail = lines[-TAIL_LINES:]
    say(f"{name}: FAILED after {elapsed:.0f}s; the end of {log.relative_to(ROOT)}:\n" + "\n".join(tail))
    return name, ok, elapsed, failure_excerpt(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="molecule_run.py", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: every molecule/*/molecule.yml)")
    parser.add_argument("--jobs", type=int, default=2, help="scenarios at once (default 2)")
    parser.add_argument(
        "--except",
        dest="excluded",
        action="append",
        default=[],
        metavar="NAME",
        help="leave this scenario out (repeatable; .ci/run runs multinode on its own)",
    )
    args = parser.parse_args(argv)
    known = all_scenarios()
    named = args.scenarios or known
    unknown = [n for n in [*named, *args.excluded] if n not in known]
    if not named or unknown:
        print(f"molecule_run.py: no such scenario {unknown} (known: {known})", file=sys.stderr)
        return 2
    names = [n for n in named if n not in args.excluded]
    if not names:
        say("no scenario left to run")
        return 0
    LOGS.mkdir(parents=True, exist_ok=True)
    durations = _load_durations()
    order = longest_first(names, durations)
    say(f"{len(order)} scenarios, {max(1, args.jobs)} at a time: {' '.join(order)}")
    started = time.monotonic()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: STOP.set())
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(_run, order))
    durations.update({name: round(elapsed, 1) for name, ok, elapsed, _ in results if ok})
    DURATIONS.write_text(json.dumps(durations, indent=1, sort_keys=True) + "\n")
    failed = [name for name, ok, _, _ in results if not ok]
    for name, ok, _, excerpt in results:
        if not ok:  # last, so that the end of the run's output says what failed
            what = "\n".join(excerpt) if excerpt else "(no failing task or test in its log: see the log's end above)"
            say(f"{name}: what failed, from {log_of(name).relative_to(ROOT)}:\n{what}")
    say(f"{len(results) - len(failed)} passed, {len(failed)} failed, in {time.monotonic() - started:.0f}s")
    if failed:
        say(f"failed: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
