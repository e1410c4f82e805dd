"""Publish and pull throughput of `ams serve` on either backend, over loopback HTTP.

    .venv/bin/python -m benchmarks.api_throughput [--seconds 10] [--clients 4] [--batch 50] [--size 512]
                                                  [--backend embedded|kafka] [--publish-only]

(--backend kafka needs `make services-up`.)

Starts its own server on a free port with a fresh data directory, runs publishers for
--seconds, then consumers (pull + ack) until the subscription is drained, and prints
messages per second and request latencies, and the server's CPU seconds per 1,000 messages
published (steadier than a rate on a shared machine). --publish-only skips the drain. Bounded in
time and count; loopback only.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.helpers import AmsServer


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.api_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50, help="messages per publish request")
    parser.add_argument("--size", type=int, default=512, help="bytes of data per message")
    parser.add_argument("--backend", choices=["embedded", "kafka"], default="embedded")
    parser.add_argument("--publish-only", action="store_true", help="measure publishing, skip the drain")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        server = AmsServer(Path(tmp) / "data", env={"AMS_LOG_LEVEL": "WARNING"}, backend=args.backend).start()
        try:
            api = server.api()
            api.ok("POST", "/projects/bench", {})
            api.ok("PUT", "/projects/bench/topics/t")
            api.ok(
                "PUT",
                "/projects/bench/subscriptions/s",
                {"topic": "projects/bench/topics/t", "ackDeadlineSeconds": 600},
            )
            data = base64.b64encode(os.urandom(args.size)).decode()
            body = {"messages": [{"data": data, "attributes": {"k": "v"}}] * args.batch}
            pub_lat: list[float] = []
            published = [0]
            pull_lat: list[float] = []
            consumed = [0]
            lock = threading.Lock()
            stop_at = time.monotonic() + args.seconds

            def publisher() -> None:
                client = server.api()
                while time.monotonic() < stop_at:
                    t0 = time.perf_counter()
                    r = client.post("/projects/bench/topics/t:publish", body)
                    assert r.status_code == 200, r.text
                    with lock:
                        pub_lat.append(time.perf_counter() - t0)
                        published[0] += args.batch

            assert server.proc is not None
            cpu0 = cpu_seconds(server.proc.pid)
            t0 = time.monotonic()
            threads = [threading.Thread(target=publisher) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            pub_secs = time.monotonic() - t0
            pub_cpu = cpu_seconds(server.proc.pid) - cpu0
            if args.publish_only:
                return report(args, published[0], pub_secs, pub_lat, pub_cpu, None)

            def consumer() -> None:
                client = server.api()
                while True:
                    t1 = time.perf_counter()
                    got = client.pull("bench", "s", args.batch, immediately=True)
                    if not got:
                        return
                    assert client.ack("bench", "s", [got[-1]["ackId"]]).status_code == 200
                    with lock:
                        pull_lat.append(time.perf_counter() - t1)
                        consumed[0] += len(got)

            t0 = time.monotonic()
            threads = [threading.Thread(target=consumer) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            pull_secs = time.monotonic() - t0
            assert consumed[0] == published[0], (consumed[0], published[0])
        finally:
            server.stop()

    return report(args, published[0], pub_secs, pub_lat, pub_cpu, (consumed[0], pull_secs, pull_lat))


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(
    args: argparse.Namespace,
    published: int,
    pub_secs: float,
    pub_lat: list[float],
    pub_cpu: float,
    drained: tuple[int, float, list[float]] | None,
) -> int:
    print(f"backend={args.backend} clients={args.clients} batch={args.batch} size={args.size}B cores={os.cpu_count()}")
    print(
        f"publish: {published} msgs in {pub_secs:.1f}s = {published / pub_secs:,.0f} msg/s; "
        f"request p50 {statistics.median(pub_lat) * 1000:.2f} ms, p99 {percentile(pub_lat, 0.99) * 1000:.2f} ms; "
        f"server CPU {pub_cpu / published * 1000:.3f} s per 1,000 msgs"
    )
    if drained is not None:
        consumed, pull_secs, pull_lat = drained
        print(
            f"pull+ack: {consumed} msgs in {pull_secs:.1f}s = {consumed / pull_secs:,.0f} msg/s; "
            f"pull+ack p50 {statistics.median(pull_lat) * 1000:.1f} ms, p99 {percentile(pull_lat, 0.99) * 1000:.1f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
