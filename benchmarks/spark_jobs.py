"""Throughput of the Spark jobs (spark/jobs) on the standalone cluster of tools/spark_cluster.py.

    .venv/bin/python -m benchmarks.spark_jobs [--messages 20000] [--batch 1000] [--size 64] [--topics 2]

(needs `make services-up`; starts the Spark cluster when it is not up, and leaves it up.)

Starts `ams serve` on the Kafka backend in a database of its own, publishes --messages messages
of --size bytes through the API (batches of --batch, spread over --topics topics), then submits
``usage_report`` (today, UTC) and ``archive`` with tools/spark_cluster.py and prints, per job, the
spark-submit wall time and the job's own processing time (``run``, as the job prints it: without
the JVM start and the session's start and stop), in messages per second.
"""

from __future__ import annotations

import argparse
import base64
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.helpers import ROOT, AmsServer, load_tool, service_settings, services_reachable

spark_cluster = load_tool("spark_cluster")

_REPORT = re.compile(r"^(?P<job>\w+): (?P<messages>\d+) messages in (?P<seconds>[\d.]+) s", re.M)


def submit(job: str, args: list[str]) -> tuple[float, int, float]:
    """(wall seconds of spark-submit, messages, the job's own seconds)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tools.spark_cluster", "submit", job, *args],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
        cwd=ROOT,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-5000:])
        raise SystemExit(f"{job} failed with {done.returncode}")
    match = _REPORT.search(done.stdout)
    if match is None:
        raise SystemExit(f"{job} printed no figures: {done.stdout[-2000:]}")
    return wall, int(match["messages"]), float(match["seconds"])


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_jobs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1000, help="messages per publish request")
    parser.add_argument("--size", type=int, default=64, help="bytes of data per message (before base64)")
    parser.add_argument("--topics", type=int, default=2)
    opts = parser.parse_args()

    missing = services_reachable(service_settings())
    if missing:
        raise SystemExit(missing)
    spark_cluster.start_cluster()

    with tempfile.TemporaryDirectory(prefix="ams-spark-bench-") as tmp:
        root = Path(tmp)
        srv = AmsServer(root / "data", backend="kafka").start()
        try:
            api = srv.api()
            project = api.new_project("bench")
            topics = [f"t{i}" for i in range(opts.topics)]
            for topic in topics:
                api.ok("PUT", f"/projects/{project}/topics/{topic}")
            api.ok("PUT", f"/projects/{project}/subscriptions/s", {"topic": f"projects/{project}/topics/{topics[0]}"})
            data = base64.b64encode(b"x" * opts.size).decode()
            started = time.monotonic()
            sent = 0
            while sent < opts.messages:
                n = min(opts.batch, opts.messages - sent)
                topic = topics[(sent // opts.batch) % len(topics)]
                api.ok("POST", f"/projects/{project}/topics/{topic}:publish", {"messages": [{"data": data}] * n})
                sent += n
            published = time.monotonic() - started
            print(f"published {sent} messages of {opts.size} bytes in {published:.1f} s through the API")

            common = ["--bootstrap-servers", srv.env["AMS_KAFKA_BOOTSTRAP_SERVERS"]]
            common += ["--mongo-uri", srv.env["AMS_MONGO_URI"], "--mongo-database", srv.env["AMS_MONGO_DATABASE"]]
            day = datetime.now(UTC).date().isoformat()
            runs = [
                ("usage_report", [*common, "--output-dir", str(root / "usage"), "--day", day]),
                ("archive", [*common, "--output-dir", str(root / "archive")]),
            ]
            print(f"{'job':<14}{'messages':>10}{'submit s':>10}{'msg/s':>10}{'run s':>8}{'msg/s':>10}")
            for job, args in runs:
                wall, messages, own = submit(job, args)
                if messages != sent:
                    raise SystemExit(f"{job} processed {messages} messages, {sent} were published")
                print(f"{job:<14}{messages:>10}{wall:>10.1f}{messages / wall:>10.0f}{own:>8.1f}{messages / own:>10.0f}")
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
