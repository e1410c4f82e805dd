"""What the tools share: running a command with a bound and a readable error (services.py,
cluster.py, image.py, artifacts.py, spark_cluster.py), and the background processes that
services.py, cluster.py and spark_cluster.py start, find again by pid file, probe and stop."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

LOG_TAIL_LINES = 40


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    what: str,
    error: type[Exception],
    hint: str = "",
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end within ``timeout`` s; a failure, a timeout or a missing program
    raises ``error`` with what was tried and the tail of its output."""
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=env, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        raise error(f"{what}: no result after {timeout:.0f}s ({' '.join(argv)})") from exc
    except FileNotFoundError as exc:
        raise error(f"{what}: {argv[0]} not found{f' ({hint})' if hint else ''}") from exc
    if done.returncode != 0:
        out = (done.stdout + done.stderr).strip().splitlines()[-LOG_TAIL_LINES:]
        raise error(f"{what} failed (exit {done.returncode}): {' '.join(argv)}\n" + "\n".join(out))
    return done


#: Where Debian puts system daemons' programs (haproxy), off the PATH of a shell that is not root's.
SYSTEM_BIN_DIRS = ("/usr/sbin", "/sbin")


def which(command: str, *extra_dirs: str) -> str | None:
    """``command`` on the PATH, else in the system directories or ``extra_dirs``."""
    path = os.pathsep.join([os.environ.get("PATH", ""), *SYSTEM_BIN_DIRS, *extra_dirs])
    return shutil.which(command, path=path)


def env_port(env: Mapping[str, str], name: str, default: int, error: type[Exception]) -> int:
    """The TCP port in ``env[name]``, ``default`` when it is unset or blank; else ``error``."""
    text = env.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise error(f"{name}={text!r} is not a TCP port")
    return int(text)


# ============================================================================================
# Maven: jars from Maven Central (the broker of tools/services.py, Spark's Kafka connector)
# ============================================================================================
#: maven-dependency-plugin release pinned in the poms (copy-dependencies).
DEPENDENCY_PLUGIN_VERSION = "3.6.1"


def render_pom(artifact_id: str, version: str, comment: str, dependencies: Sequence[tuple[str, str, str]]) -> str:
    """A pom (packaging pom) whose runtime dependencies are ``dependencies`` (group, artifact, version)."""
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in dependencies
    )
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <!-- {comment} -->
  <modelVersion>4.0.0</modelVersion>
  <groupId>ams-app.tools</groupId>
  <artifactId>{artifact_id}</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>{DEPENDENCY_PLUGIN_VERSION}</version>
      </plugin>
    </plugins>
  </build>
</project>
"""


def copy_dependencies(mvn: str, pom: Path, output: Path, *, timeout: float, error: type[Exception]) -> None:
    """``mvn dependency:copy-dependencies`` of ``pom``: its runtime jars into ``output`` (emptied first)."""
    shutil.rmtree(output, ignore_errors=True)
    run(
        [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={output}",
            "-DincludeScope=runtime",
        ],
        timeout=timeout,
        what="mvn dependency:copy-dependencies",
        error=error,
        cwd=pom.parent,
    )


# ============================================================================================
# background processes: a pid file, a marker in the command line, a log
# ============================================================================================
#: Children started by this process, kept so that their Popen objects live as long as they do
#: (a Popen collected while its child runs warns) and so that ``alive`` knows them.
CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def read_pid(pid_file: Path) -> int | None:
    try:
        text = pid_file.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def reap(pid: int) -> None:
    """Collect a dead child of this process (a test that started the service), if it is one."""
    proc = CHILDREN.pop(pid, None)
    if proc is not None:
        proc.poll()  # reaps it and tells its Popen, which then has nothing to warn about
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and its command line holds ``marker`` (so a reused pid is not ours)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        # a dead thread-group leader whose other threads still exit still holds its sockets
        with contextlib.suppress(OSError):
            if len(os.listdir(f"/proc/{pid}/task")) > 1:
                return True
        reap(pid)
        return False
    # a child caught between fork and exec has no command line yet: ours, if we spawned it
    return marker in cmdline or (not cmdline.strip() and pid in CHILDREN)


def running(pid_file: Path, marker: str) -> int | None:
    pid = read_pid(pid_file)
    return pid if pid is not None and alive(pid, marker) else None


def spawn(
    argv: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    started_by: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Start ``argv`` in its own session, output appended to ``log``; write its pid to ``pid_file``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} started by {started_by}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd or log.parent,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # a Ctrl-C in the terminal that ran `up` does not reach it
            close_fds=True,
        )
    CHILDREN[proc.pid] = proc
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid, marker):
            return True
        time.sleep(0.1)
    return not alive(pid, marker)


def terminate(name: str, pid_file: Path, marker: str, timeout: float, say: Callable[[str], None]) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. Returns whether something was running."""
    pid = running(pid_file, marker)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_gone(pid, marker, timeout):
        say(f"{name} (pid {pid}) still running {timeout:.0f}s after SIGTERM: SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, marker, 10.0)
    pid_file.unlink(missing_ok=True)
    return True


def kill(pid_file: Path, marker: str) -> bool:
    """SIGKILL at once. Returns whether something was running."""
    pid = running(pid_file, marker)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, marker, 10.0)
    pid_file.unlink(missing_ok=True)
    return pid is not None


def wait_until(
    what: str,
    ready: Callable[[], bool],
    *,
    timeout: float,
    pid: int,
    marker: str,
    log: Path,
    error: type[Exception],
    interval: float = 0.25,
) -> None:
    """Poll ``ready`` (an exception means "not yet") until it is true; ``error`` with the end of
    ``log`` when the process ``pid`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive(pid, marker):
            raise error(f"{what} (pid {pid}) exited while starting; last lines of {log}:\n{tail(log)}")
        try:
            if ready():
                return
        except Exception:  # a probe that fails just means "not yet"
            pass
        if time.monotonic() > deadline:
            raise error(f"{what} (pid {pid}) not ready after {timeout:.0f}s; last lines of {log}:\n{tail(log)}")
        time.sleep(interval)


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on ``host``:``port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def answers(probe: Callable[[], bool]) -> bool:
    """``probe()``, with an exception taken as "no" (a server not up yet, or gone)."""
    try:
        return probe()
    except Exception:  # a failing probe means "no"
        return False


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log (read from its last 64 KiB)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(data.splitlines()[-lines:])


@contextlib.contextmanager
def locked(directory: Path, error: type[Exception], wait: float = 300.0) -> Iterator[None]:
    """One tool run at a time per ``directory`` (``directory/.lock``); ``error`` after ``wait`` s."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as f:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise error(f"{directory}/.lock held by another process for {wait:.0f}s") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
