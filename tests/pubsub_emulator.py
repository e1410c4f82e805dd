"""Google's Pub/Sub emulator (the Cloud SDK's jar) in a subprocess: the reference that `ams serve`'s
Pub/Sub gRPC API (docs/pubsub.md) is compared with, by tests and benchmarks/pubsub_client.py.

    with PubsubEmulator(tmp / "emulator") as emulator:
        os.environ["PUBSUB_EMULATOR_HOST"] = emulator.host  # before Google's clients are made

The emulator keeps everything in memory: ``data_dir`` is only its working directory, and its log
goes to ``<data_dir>-emulator.log`` beside it. It takes any project name (no ``--projects``) and no
credentials. Its JVM gets ``-Xmx`` (``heap``, 512 MB): without it the JVM's heap may grow to a
quarter of the machine's memory, and it does grow run after run (RSS 548 MB after three runs of
benchmarks/pubsub_client.py's 50,000 messages of 1 KB, 407 MB with 512 MB; 120 MB idle; one run
of them fits in a 128 MB heap).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from tests.helpers import free_port

#: Where a Cloud SDK keeps the emulator (``gcloud components install pubsub-emulator``, or the
#: Debian package google-cloud-cli-pubsub-emulator); PUBSUB_EMULATOR_JAR names another jar.
SDK_ROOTS = (Path("/usr/lib/google-cloud-sdk"), Path("/usr/share/google-cloud-sdk"), Path.home() / "google-cloud-sdk")
JAR_GLOB = "platform/pubsub-emulator/lib/cloud-pubsub-emulator-*-all.jar"
#: The emulator's heap bound (the JVM's -Xmx).
DEFAULT_HEAP = "512m"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
#: /google.pubsub.v1.Publisher/ListTopics with ``project = "projects/ready"``, encoded by hand (field
#: 1, a string), so that waiting for the emulator needs grpc only, not the Pub/Sub client's types.
_READY_PROJECT = b"projects/ready"
_LIST_TOPICS = b"\x0a" + bytes([len(_READY_PROJECT)]) + _READY_PROJECT


def _version_key(jar: Path) -> tuple[int, ...]:
    version = jar.name.removeprefix("cloud-pubsub-emulator-").removesuffix("-all.jar")
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


def emulator_jar() -> Path | None:
    """The emulator's jar: PUBSUB_EMULATOR_JAR when set (None when no such file), else the newest in
    a Cloud SDK (SDK_ROOTS, or the one of the ``gcloud`` on PATH); None when there is none."""
    override = os.environ.get("PUBSUB_EMULATOR_JAR")
    if override:
        return Path(override) if Path(override).is_file() else None
    roots = list(SDK_ROOTS)
    gcloud = shutil.which("gcloud")
    if gcloud:
        roots.append(Path(gcloud).resolve().parent.parent)  # <sdk>/bin/gcloud
    jars = [jar for root in roots for jar in root.glob(JAR_GLOB) if jar.is_file()]
    return max(jars, key=_version_key) if jars else None


def java_command() -> str | None:
    """``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else the ``java`` on PATH (the emulator's
    launcher script does the same); None when there is neither."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


class PubsubEmulator:
    """The emulator on ``address``:``port`` (a free port of loopback unless given), started and
    stopped like tests/helpers.py ``AmsServer``."""

    def __init__(
        self,
        data_dir: Path,
        *,
        jar: Path | None = None,
        java: str | None = None,
        heap: str = DEFAULT_HEAP,
        listen: tuple[str, int] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.jar = jar
        self.java = java
        self.heap = heap
        self.address, self.port = listen or ("127.0.0.1", free_port())
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-emulator.log"
        #: Seconds from the start of the JVM until a ListTopics was answered (set by start()).
        self.start_seconds: float | None = None

    @property
    def host(self) -> str:
        """``host:port``, the value of PUBSUB_EMULATOR_HOST for Google's clients."""
        return f"{self.address}:{self.port}"

    def command(self) -> list[str]:
        jar = self.jar or emulator_jar()
        if jar is None:
            raise RuntimeError(
                "no Pub/Sub emulator jar: install the Cloud SDK's pubsub-emulator or set PUBSUB_EMULATOR_JAR"
            )
        java = self.java or java_command()
        if java is None:
            raise RuntimeError("no java to run the Pub/Sub emulator with (set JAVA_HOME or put java on PATH)")
        return [java, f"-Xmx{self.heap}", "-jar", str(jar), f"--host={self.address}", f"--port={self.port}"]

    def start(self, timeout: float = START_TIMEOUT) -> PubsubEmulator:
        """Start the JVM and wait (at most ``timeout`` seconds) until a ListTopics call is answered."""
        import grpc

        cmd = self.command()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = started + timeout
        # a short reconnect backoff: the first attempts find the port closed while the JVM starts
        options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 250)]
        try:
            with grpc.insecure_channel(self.host, options=options) as channel:
                list_topics = channel.unary_unary("/google.pubsub.v1.Publisher/ListTopics")
                while True:
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"the Pub/Sub emulator exited with {self.proc.returncode}: {self.log()}")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RuntimeError(f"the Pub/Sub emulator did not answer in {timeout:.0f}s: {self.log()}")
                    try:
                        list_topics(_LIST_TOPICS, timeout=min(left, 1.0), wait_for_ready=True)
                        break
                    except grpc.RpcError:
                        time.sleep(0.05)
        except BaseException:
            self.kill()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def rss_bytes(self) -> int | None:
        """The JVM's resident memory now (/proc/PID/status VmRSS); None when it is not running."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait (the JVM exits with 143); SIGKILL when it takes longer than ``timeout``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> PubsubEmulator:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.proc is not None:
            self.stop()
