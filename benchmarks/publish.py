"""Publishing through `ams serve` against the raw Kafka producer, on the same broker, in one run.

    make services-up
    .venv/bin/python -m benchmarks.publish [--seconds 5] [--rounds 3] [--workers 1]
                                           [--backends kafka,embedded] [--plain] [--against REV]

Two loads, each measured round by round, alternating what is measured so that the machine's drift
hits every row alike; the medians of the rounds are printed, with each row's ratio to the raw
producer:

- **batch**: 4 clients, each sending 100 messages of 1 KB per request, one request at a time;
- **single**: 1 client sending 1 message of 100 B per request.

The raw producer is confluent-kafka with the service's own producer settings (acks=all,
idempotence, linger.ms 1), one producer per client thread, each "request" a produce of the batch
and a flush (its delivery reports). The service is started here (tests/helpers.AmsServer) over HTTPS
with a throwaway certificate (``--plain``: HTTP), and loaded by a Go program
(benchmarks/loadgen/main.go, keep-alive connections, standard library only, built into
.cache/bin/ams-loadgen on first use), so that the load generator costs the two cores as little as
it can. Also printed: each server's CPU seconds per 1,000 messages and its processes' resident
memory after the run (``--workers N`` starts ``ams serve --workers N`` for backend kafka;
docs/production.md "A process per core"). ``--against REV`` adds, for each backend, a service
running the code of the git revision REV (``git archive``), measured in the same rounds: a change
compared with what it changes, side by side. The backend ``embedded-memory`` is the embedded
backend with its data directory in /dev/shm, where an fsync costs nothing: beside ``embedded``, it
says what the disk's fsync adds to a publish (never a way to run the service).

Results and how to read them: docs/benchmarks.md "Publishing against the raw producer".
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.helpers import ROOT, AmsServer, service_settings

LOADGEN = ROOT / ".cache" / "bin" / "ams-loadgen"
LOADS = {"batch": (4, 100, 1024), "single": (1, 1, 100)}
#: The embedded backend on tmpfs, to tell the disk's part (the module's doc).
MEMORY = "embedded-memory"


def loadgen() -> Path:
    """The Go load generator, built when missing or older than its source."""
    source = ROOT / "benchmarks" / "loadgen"
    newest = max(p.stat().st_mtime for p in source.iterdir())
    if not LOADGEN.exists() or LOADGEN.stat().st_mtime < newest:
        LOADGEN.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "build", "-o", str(LOADGEN), "."], cwd=source, check=True, timeout=600)
    return LOADGEN


# ----------------------------------------------------------------------------- raw producer --
def raw(bootstrap: str, clients: int, batch: int, size: int, seconds: float) -> dict[str, float]:
    """The broker's own pace: ``clients`` threads, each with a producer, producing ``batch``
    records of ``size`` bytes and flushing, over and over, for ``seconds``."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    value = os.urandom(size)
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 1}

    def client() -> None:
        producer = Producer(config)
        failed = [0]

        def report(err: object, _msg: object) -> None:
            if err is not None:
                failed[0] += 1

        def once() -> float:
            t0 = time.perf_counter()
            for _ in range(batch):
                producer.produce(topic, value, partition=0, on_delivery=report)
            producer.flush(30)
            return time.perf_counter() - t0

        warm_until = time.monotonic() + 1
        while time.monotonic() < warm_until:
            once()
        mine = []
        stop_at = time.monotonic() + seconds
        while time.monotonic() < stop_at:
            mine.append(once())
        with lock:
            latencies.extend(mine)
            failures[0] += failed[0]

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0 - 1
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    assert failures[0] == 0, f"{failures[0]} records failed"
    return figures(len(latencies) * batch / elapsed, latencies)


def figures(rate: float, latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "rate": rate,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
    }


# ---------------------------------------------------------------------------------- service --
def family(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    found = [pid]
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        found += family(int(child))
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def checkout(rev: str, tmp: Path) -> Path:
    """The tree of the git revision ``rev``, unpacked under ``tmp`` in a folder named by its short hash."""
    short = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    target = tmp / short
    target.mkdir()
    archive = subprocess.run(["git", "archive", short], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


class Service:
    """One ``ams serve`` with a project, a topic and a subscription, and the load generator."""

    def __init__(
        self, backend: str, workers: int, tls: tuple[str, str, str] | None, tmp: Path, source: Path | None = None
    ) -> None:
        self.backend = backend
        env = (
            {"AMS_LOG_LEVEL": "WARNING", "AMS_WORKERS": str(workers)} if workers != 1 else {"AMS_LOG_LEVEL": "WARNING"}
        )
        self.tls = tls
        self.memory: tempfile.TemporaryDirectory[str] | None = None
        root = tmp
        if backend == MEMORY:  # tmpfs: fsync is free
            self.memory = tempfile.TemporaryDirectory(dir="/dev/shm", prefix="ams-bench-")
            root = Path(self.memory.name)
        data = root / f"data-{backend}{'-' + source.name if source else ''}"
        self.server = AmsServer(
            data,
            env=env,
            backend="embedded" if backend == MEMORY else backend,
            tls=(tls[1], tls[2]) if tls else None,
            source=source,
        )
        self.bodies = tmp

    def __enter__(self) -> Service:
        self.server.start()
        api = self.server.api()
        api.ok("POST", "/projects/bench", {})
        api.ok("PUT", "/projects/bench/topics/t")
        api.ok("PUT", "/projects/bench/subscriptions/s", {"topic": "projects/bench/topics/t"})
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        if self.memory is not None:
            self.memory.cleanup()

    def run(self, clients: int, batch: int, size: int, seconds: float) -> dict[str, float]:
        data = base64.b64encode(os.urandom(size)).decode()
        body = self.bodies / f"body-{batch}-{size}.json"
        body.write_text(json.dumps({"messages": [{"data": data}] * batch}))
        assert self.server.proc is not None
        pids = family(self.server.proc.pid)
        cpu0 = cpu_seconds(pids)
        cmd = [str(LOADGEN), "-url", f"{self.server.url}/projects/bench/topics/t:publish", "-body", str(body)]
        cmd += ["-key", self.server.token, "-clients", str(clients), "-seconds", str(seconds)]
        if self.tls:
            cmd += ["-ca", self.tls[0]]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 120)
        out = json.loads(done.stdout)
        cpu = cpu_seconds(pids) - cpu0
        assert out["failures"] == 0, out
        rate = out["requests"] * batch / out["seconds"]
        return {
            "rate": rate,
            "p50_ms": out["p50_ms"],
            "p99_ms": out["p99_ms"],
            # the warm-up second is in the CPU too: per message over all that was sent
            "cpu_ms_per_1000": cpu / (rate * (out["seconds"] + 1)) * 1e6,
            "rss_mib": sum(rss_mib(p) for p in family(self.server.proc.pid)),
            "processes": len(family(self.server.proc.pid)),
        }


def throwaway_tls(tmp: Path) -> tuple[str, str, str]:
    """(CA file, certificate chain file, key file) for 127.0.0.1."""
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    ca.cert_pem.write_to_path(str(paths[0]))
    os.environ["REQUESTS_CA_BUNDLE"] = str(paths[0])  # the set-up calls (requests) trust it too
    cert.private_key_and_cert_chain_pem.write_to_path(str(paths[1]))
    cert.private_key_pem.write_to_path(str(paths[2]))
    return str(paths[0]), str(paths[1]), str(paths[2])


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.publish", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5, help="measured seconds of each load, each round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="ams serve --workers, backend kafka")
    parser.add_argument("--backends", default="kafka,embedded", help=f"comma-separated: kafka, embedded, {MEMORY}")
    parser.add_argument("--loads", default="batch,single", help="comma-separated: batch, single")
    parser.add_argument("--plain", action="store_true", help="HTTP instead of HTTPS")
    parser.add_argument("--against", metavar="REV", help="also measure the code of this git revision")
    args = parser.parse_args()
    bootstrap = service_settings().get("AMS_KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        parser.error("no Kafka: run `make services-up` first")
    loadgen()
    backends = [b for b in args.backends.split(",") if b]
    loads = [name for name in args.loads.split(",") if name]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        tls = None if args.plain else throwaway_tls(tmp)
        workers = {b: args.workers if b == "kafka" else 1 for b in backends}
        labels = list(backends)
        services = {b: Service(b, workers[b], tls, tmp).__enter__() for b in backends}
        if args.against:
            source = checkout(args.against, tmp)
            for b in backends:
                label = f"{b} @{source.name}"
                labels.append(label)
                services[label] = Service(b, workers[b], tls, tmp, source).__enter__()
        try:
            for round_ in range(args.rounds):
                for name in loads:
                    load = LOADS[name]
                    runs: list[tuple[str, Callable[[], dict[str, float]]]] = [
                        ("raw producer", partial(raw, bootstrap, *load, args.seconds))
                    ]
                    runs += [(b, partial(services[b].run, *load, args.seconds)) for b in labels]
                    if round_ % 2:
                        runs.reverse()
                    for label, measure in runs:
                        result = measure()
                        results.setdefault((name, label), []).append(result)
                        print(
                            f"round {round_ + 1} {name:6} {label:20} {result['rate']:>10,.0f} msg/s "
                            f"p50 {result['p50_ms']:.2f} ms",
                            flush=True,
                        )
        finally:
            for service in services.values():
                service.__exit__()

    print()
    print(
        f"cores {os.cpu_count()}, {args.rounds} rounds of {args.seconds:g} s, "
        f"{'HTTP' if args.plain else 'HTTPS'}, ams serve --workers {args.workers} (kafka); medians:"
    )
    header = "| load | what | msg/s | of raw | p50 ms | p99 ms | server CPU s / 1,000 msgs | RSS MiB (processes) |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for name in loads:
        clients, batch, size = LOADS[name]
        load = f"{clients}x{batch}x{size} B"
        base = statistics.median(r["rate"] for r in results[(name, "raw producer")])
        for label in ["raw producer", *labels]:
            rows = results[(name, label)]
            rate = statistics.median(r["rate"] for r in rows)
            p50 = statistics.median(r["p50_ms"] for r in rows)
            p99 = statistics.median(r["p99_ms"] for r in rows)
            if label == "raw producer":
                print(f"| {load} | {label} | {rate:,.0f} | 100 % | {p50:.2f} | {p99:.2f} | | |")
                continue
            cpu = statistics.median(r["cpu_ms_per_1000"] for r in rows) / 1000
            rss = rows[-1]["rss_mib"]
            what = label if label.startswith("embedded") else f"{label}, {args.workers} worker(s)"
            print(
                f"| {load} | {what} | {rate:,.0f} | {rate / base:.1%} | {p50:.2f} | {p99:.2f} | "
                f"{cpu:.3f} | {rss:.0f} ({rows[-1]['processes']:.0f}) |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
