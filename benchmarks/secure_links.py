"""What securing the internal links costs: publish and pull throughput of one `ams serve` on the
Kafka backend with plaintext links (`make services-up`) against the same with every link secured
(tools/secure_services.py: SASL_SSL/SCRAM to Kafka, TLS with a certificate to ZooKeeper, TLS and a
login to FerretDB, users' tokens sealed), in alternating rounds of benchmarks/api_throughput.py.
Its pull+ack phase has four threads contend for one subscription's cursor; --consume measures
consuming instead, in alternating rounds of benchmarks/consume.py (a cluster of NODES `ams serve`,
CONSUMERS processes pulling and acknowledging one subscription, consume_owner on, one run a round),
its nodes on the secured services in the secured rounds (consume.py's node_env()).

    .venv/bin/python -m benchmarks.secure_links [--rounds 2] [--seconds 10] [--clients 4]
                                                [--batch 50] [--size 1024] [--publish-only]
    .venv/bin/python -m benchmarks.secure_links --consume [--rounds 2] [--nodes 3] [--consumers 4]
                                                [--messages 20000] [--size 1024]

(needs `make services-up` for the plaintext rounds; --consume stops the cluster of tools/cluster.py
after each round, so that no two rounds share nodes). Prints each round's lines, then the medians
side by side: publish msg/s, request p50/p99 (ms), server CPU (s), pull msg/s; with --consume,
consume msg/s and the p50/p99 of a pull+ack pair (ms). Bounded in time and count; loopback only.
Figures: docs/production.md, "Security".
"""

from __future__ import annotations

import argparse
import ast
import base64
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.consume import NODE_SECURITY_ENV
from tests.helpers import ROOT, free_port
from tools import cluster
from tools.secure_services import SecureServices

PUBLISH = re.compile(r"publish: .* = ([\d,]+) msg/s; request p50 ([\d.]+) ms, p99 ([\d.]+) ms; server CPU ([\d.]+) s")
PULL = re.compile(r"pull\+ack: .* = ([\d,]+) msg/s")
CONSUMED = re.compile(r"^fresh run 1: (\{.*\})$", re.MULTILINE)  # benchmarks/consume.py's figures of a run
#: Seconds one consume round may take: benchmarks/consume.py's own bound on a run, plus its start and fill.
CONSUME_TIMEOUT = 900 + 300


def secure_env(services: SecureServices, keyring: Path) -> dict[str, str]:
    """The environment that points api_throughput's server at the secured services."""
    settings = services.ams_settings()
    return {
        # tests/helpers.py service_settings(): where the Kafka backend's servers are
        "AMS_TEST_KAFKA_BOOTSTRAP_SERVERS": f"localhost:{services.client_port}",
        "AMS_TEST_MONGO_URI": settings["AMS_MONGO_URI"],
        "AMS_TEST_ZOOKEEPER_HOSTS": settings["AMS_ZOOKEEPER_HOSTS"],
        "AMS_TEST_KAFKA_ZNODE": settings["AMS_KAFKA_ZNODE"],
        **{k: v for k, v in settings.items() if k not in ("AMS_MONGO_URI", "AMS_ZOOKEEPER_HOSTS", "AMS_KAFKA_ZNODE")},
        "AMS_TOKEN_KEY_FILE": str(keyring),
    }


def run_round(args: argparse.Namespace, env: dict[str, str]) -> tuple[str, dict[str, float]]:
    argv = [sys.executable, "-m", "benchmarks.api_throughput", "--backend", "kafka"]
    argv += ["--seconds", str(args.seconds), "--clients", str(args.clients), "--batch", str(args.batch)]
    argv += ["--size", str(args.size)] + (["--publish-only"] if args.publish_only else [])
    done = subprocess.run(
        argv, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=args.seconds * 20 + 300
    )
    if done.returncode != 0:
        raise SystemExit(f"api_throughput failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    figures: dict[str, float] = {}
    if found := PUBLISH.search(done.stdout):
        rate, p50, p99, cpu = found.groups()
        figures |= {"publish": float(rate.replace(",", "")), "p50": float(p50), "p99": float(p99), "cpu": float(cpu)}
    if found := PULL.search(done.stdout):
        figures["pull"] = float(found.group(1).replace(",", ""))
    return done.stdout.strip(), figures


def run_consume_round(args: argparse.Namespace, env: dict[str, str]) -> tuple[str, dict[str, float]]:
    """One run of benchmarks/consume.py on a cluster of its own, stopped at the end whatever happened."""
    argv = [sys.executable, "-m", "benchmarks.consume", "--runs", "1", "--nodes", str(args.nodes)]
    argv += ["--consumers", str(args.consumers), "--messages", str(args.messages), "--size", str(args.size)]
    unpassed = sorted(key for key in env if not key.startswith("AMS_TEST_") and key not in NODE_SECURITY_ENV)
    if unpassed:
        raise SystemExit(f"benchmarks/consume.py would not pass {unpassed} on to its nodes (NODE_SECURITY_ENV)")
    try:
        done = subprocess.run(
            argv, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=CONSUME_TIMEOUT
        )
    finally:
        cluster.stop_cluster()  # consume.py stops it too, unless it was killed
    found = CONSUMED.search(done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"consume failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    run = ast.literal_eval(found.group(1))
    figures = {"consume": float(run["msg_per_s"]), "p50": float(run["pair_p50_ms"]), "p99": float(run["pair_p99_ms"])}
    return done.stdout.strip(), figures


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.secure_links",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--publish-only", action="store_true")
    parser.add_argument("--consume", action="store_true", help="consume on a cluster instead (benchmarks/consume.py)")
    parser.add_argument("--nodes", type=int, default=3, help="with --consume: the cluster's nodes")
    parser.add_argument("--consumers", type=int, default=4, help="with --consume: consumer processes")
    parser.add_argument("--messages", type=int, default=20_000, help="with --consume: messages a round consumes")
    args = parser.parse_args()
    run = run_consume_round if args.consume else run_round

    with tempfile.TemporaryDirectory() as tmp:
        services = SecureServices(Path(tmp) / "secure", *[free_port() for _ in range(5)])
        keyring = Path(tmp) / "tokens.keys"
        keyring.write_text(f"bench:{base64.b64encode(os.urandom(32)).decode()}\n")
        keyring.chmod(0o600)
        services.start()
        results: dict[str, list[dict[str, float]]] = {"plaintext": [], "secured": []}
        try:
            for number in range(1, args.rounds + 1):
                for mode, env in (("plaintext", {}), ("secured", secure_env(services, keyring))):
                    text, figures = run(args, env)
                    print(f"--- round {number}, {mode}\n{text}", flush=True)
                    results[mode].append(figures)
        finally:
            services.stop()
    print("\nmedians:")
    for mode, rounds in results.items():
        line = ", ".join(f"{key} {statistics.median(r[key] for r in rounds):,.2f}" for key in rounds[0])
        print(f"  {mode:9} {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
