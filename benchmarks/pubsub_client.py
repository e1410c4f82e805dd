"""Google's own Python client (google-cloud-pubsub) against Pub/Sub v1 gRPC servers: Google's
emulator, and `ams serve`'s Pub/Sub API (docs/pubsub.md) on either backend. Publish, then drain
with four streaming pulls sharing one subscription.

    .venv/bin/python -m benchmarks.pubsub_client [--targets emulator,embedded,kafka3] [--messages 50000]
                                                 [--size 1024] [--runs 1] [--streams 4] [--in-flight 10000]
                                                 [--settle 2] [--timeout 300] [--heap 512m]

(kafka3 needs `make services-up`; emulator needs the Cloud SDK's pubsub-emulator and a java,
tests/pubsub_emulator.py.)

Each target is started by the benchmark, on loopback, and stopped at the end:

- ``emulator``: Google's Pub/Sub emulator (tests/pubsub_emulator.py, its heap bounded by --heap).
- ``embedded``: one `ams serve` on the embedded backend (tests/helpers.py AmsServer).
- ``kafka3``: three `ams serve` nodes on the Kafka backend sharing one MongoDB database of their own
  (dropped at the end), with the settings tools/cluster.py gives its nodes (a node name each, one
  consume owner per subscription, a gRPC port each), started here rather than by tools/cluster.py so
  that the benchmark owns their lifetime. The publisher talks to node 1, stream i to node i mod 3.

On `ams serve` the nodes listen for gRPC on AMS_GRPC_PORT, and calls without credentials act as the
service admin AMS_GRPC_EMULATOR_USER (``ams admin bootstrap`` makes it before the first node starts);
the project is made through the REST API with the service token. Every client reaches its target as
Google's clients reach the emulator: PUBSUB_EMULATOR_HOST (plaintext, no credentials).

Each run makes a topic and a subscription (ack deadline 60 s) with the client's own admin calls, then:

- publish: one PublisherClient, batches of 100 messages (at most 10 ms of waiting), MESSAGES of SIZE
  random bytes (the same bytes every time), at most IN_FLIGHT of them not yet answered (the client's
  publish flow control, blocking); msg/s from the first publish() to the last future's answer.
- subscribe: STREAMS processes, each with a SubscriberClient of its own and one subscribe() with the
  default flow control (1,000 messages, 100 MiB outstanding per stream), acknowledging every message
  in its callback. The streams start together once every process has made its client; msg/s from the
  first message received (by any stream) until the last of the published message ids came. They
  keep running SETTLE seconds more; ``duplicates`` counts the deliveries beyond one per message over
  the whole time.

Google's emulator paces a StreamingPull: it sends a stream at most 100 messages every 50 ms (about
2,000 msg/s per stream, a new message 50 ms after its publish), and it ignores the flow control a
stream asks for (max_outstanding_messages and _bytes): its subscribe figure is STREAMS times that
pace, not how fast it could go. The Python client holds what is beyond its flow control itself.

It prints each run's figures, then a table of the medians for docs/benchmarks.md and the command that
made it. ``server CPU`` is the target's processes' CPU seconds per 1,000 messages, publish / subscribe
(/proc), steadier than a rate on a shared machine; ``RSS`` their resident memory after the last run
(and its peak). Bounded by --timeout per phase of a run; loopback only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import multiprocessing
import os
import queue
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.api_throughput import cpu_seconds
from benchmarks.consume import cpu_stat, reference_ms, shares
from tests.helpers import ROOT, AmsServer, drop_database, free_port, service_settings, services_reachable
from tests.pubsub_emulator import DEFAULT_HEAP, PubsubEmulator

PROJECT = "bench"
#: The AMS user that calls without credentials act as (AMS_GRPC_EMULATOR_USER): a service admin.
EMULATOR_USER = "bench-grpc"
TARGETS = ("emulator", "embedded", "kafka3")
BATCH = 100
ACK_DEADLINE = 60
KAFKA_NODES = 3


@dataclass
class Target:
    """A started target: where the publisher and each stream connect, and its processes' ids."""

    name: str
    publish_host: str
    stream_hosts: list[str]
    pids: list[int]
    metrics_pages: list[tuple[str, str]] = field(default_factory=list)  # AMS nodes' Prometheus pages, token


@dataclass
class Run:
    publish_per_s: float
    subscribe_per_s: float
    duplicates: int
    publish_cpu: float  # the target's CPU seconds while publishing
    subscribe_cpu: float
    machine: dict[str, float] = field(default_factory=dict)

    def line(self, messages: int) -> str:
        return (
            f"publish {self.publish_per_s:,.0f} msg/s, subscribe {self.subscribe_per_s:,.0f} msg/s, "
            f"duplicates {self.duplicates}, server CPU {self.publish_cpu / messages * 1000:.3f} / "
            f"{self.subscribe_cpu / messages * 1000:.3f} s per 1,000 msgs, "
            f"idle {self.machine.get('idle_pct')}%, steal {self.machine.get('steal_pct')}%"
        )


# --- the targets -------------------------------------------------------------------------------


@contextlib.contextmanager
def emulator_target(root: Path, args: argparse.Namespace) -> Iterator[Target]:
    emulator = PubsubEmulator(root / "emulator", heap=args.heap).start()
    try:
        print(f"emulator: up in {emulator.start_seconds:.1f}s, RSS {mb(emulator.rss_bytes())}", flush=True)
        assert emulator.proc is not None
        yield Target("emulator", emulator.host, [emulator.host], [emulator.proc.pid])
    finally:
        emulator.stop()


def bootstrap(server: AmsServer) -> None:
    """``ams admin bootstrap`` of EMULATOR_USER with ``server``'s settings, before it starts (the
    gRPC settings left out: they ask for a loopback host, which the admin command does not set)."""
    env = {**os.environ, "AMS_SERVICE_TOKEN": server.token, **server.env}
    env = {key: value for key, value in env.items() if not key.startswith("AMS_GRPC_")}
    cmd = [sys.executable, "-m", "ams_app", "admin", "bootstrap", "--name", EMULATOR_USER]
    cmd += ["--data-dir", str(server.data_dir)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ams admin bootstrap exited with {done.returncode}: {done.stderr[-3000:]}")


def ams_server(data_dir: Path, backend: str = "embedded", env: dict[str, str] | None = None) -> AmsServer:
    """An AmsServer with the gRPC API in emulator mode: the port AmsServer gives every test server
    (AMS_GRPC_PORT in its env), or a free one of our own where it gives none."""
    settings = {"AMS_GRPC_EMULATOR_USER": EMULATOR_USER, "AMS_LOG_LEVEL": "WARNING", **(env or {})}
    server = AmsServer(data_dir, backend=backend, env=settings)
    server.env.setdefault("AMS_GRPC_PORT", str(free_port()))
    return server


def grpc_host(server: AmsServer) -> str:
    return f"{server.address}:{server.env['AMS_GRPC_PORT']}"


@contextlib.contextmanager
def ams_target(name: str, servers: list[AmsServer]) -> Iterator[Target]:
    bootstrap(servers[0])
    started: list[AmsServer] = []
    try:
        for server in servers:
            started.append(server.start())
        servers[0].api().ok("POST", f"/projects/{PROJECT}", {"description": "benchmarks/pubsub_client.py"})
        hosts = [grpc_host(server) for server in servers]
        pids = [server.proc.pid for server in servers if server.proc is not None]
        pages = [(f"http://{server.host}/metrics", server.token) for server in servers]
        yield Target(name, hosts[0], hosts, pids, pages)
    finally:
        for server in started:
            with contextlib.suppress(Exception):
                server.stop()


@contextlib.contextmanager
def embedded_target(root: Path) -> Iterator[Target]:
    with ams_target("embedded", [ams_server(root / "embedded")]) as target:
        yield target


@contextlib.contextmanager
def kafka3_target(root: Path) -> Iterator[Target]:
    missing = services_reachable(service_settings())
    if missing:
        raise SystemExit(missing)
    database = "ams_bench_pubsub_" + uuid.uuid4().hex[:8]
    servers = [
        ams_server(
            root / f"node{n}",
            "kafka",
            {"AMS_MONGO_DATABASE": database, "AMS_NODE_NAME": f"node{n}", "AMS_CONSUME_OWNER": "true"},
        )
        for n in range(1, KAFKA_NODES + 1)
    ]
    try:
        with ams_target("kafka3", servers) as target:
            yield target
    finally:
        drop_database(database)


def start_target(name: str, root: Path, args: argparse.Namespace) -> contextlib.AbstractContextManager[Target]:
    if name == "emulator":
        return emulator_target(root, args)
    if name == "embedded":
        return embedded_target(root)
    return kafka3_target(root)


# --- the client side ---------------------------------------------------------------------------


def use(host: str) -> None:
    """Make Google's clients created from now on in this process talk to ``host``."""
    os.environ["PUBSUB_EMULATOR_HOST"] = host


def make_topic_and_subscription(host: str, topic: str, sub: str) -> None:
    from google.cloud import pubsub_v1

    use(host)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        publisher.create_topic(name=publisher.topic_path(PROJECT, topic), timeout=60)
        subscriber.create_subscription(
            name=subscriber.subscription_path(PROJECT, sub),
            topic=publisher.topic_path(PROJECT, topic),
            ack_deadline_seconds=ACK_DEADLINE,
            timeout=60,
        )
    finally:
        subscriber.close()
        publisher.transport.close()


def remove_topic_and_subscription(host: str, topic: str, sub: str) -> None:
    """Best effort: the emulator keeps what is left of a run in its memory."""
    from google.cloud import pubsub_v1

    use(host)
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    try:
        with contextlib.suppress(Exception):
            subscriber.delete_subscription(subscription=subscriber.subscription_path(PROJECT, sub), timeout=60)
        with contextlib.suppress(Exception):
            publisher.delete_topic(topic=publisher.topic_path(PROJECT, topic), timeout=60)
    finally:
        subscriber.close()
        publisher.transport.close()


def publish(host: str, topic: str, messages: int, size: int, in_flight: int, timeout: float) -> tuple[float, set[str]]:
    """(seconds from the first publish() to the last answer, the message ids given)."""
    from google.cloud import pubsub_v1
    from google.cloud.pubsub_v1 import types

    use(host)
    client = pubsub_v1.PublisherClient(
        batch_settings=types.BatchSettings(max_messages=BATCH, max_bytes=10 * 1000 * 1000, max_latency=0.01),
        publisher_options=types.PublisherOptions(
            flow_control=types.PublishFlowControl(
                message_limit=in_flight,
                byte_limit=2 * in_flight * (size + 100),  # the message limit is the one that binds
                limit_exceeded_behavior=types.LimitExceededBehavior.BLOCK,
            )
        ),
    )
    path = client.topic_path(PROJECT, topic)
    data = os.urandom(size)
    ids: set[str] = set()
    errors: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    answered = threading.Event()
    left = [messages]

    def done(future: Any) -> None:
        try:
            message_id = future.result()
        except Exception as exc:  # counted: the run fails below
            with lock:
                errors[type(exc).__name__ + ": " + str(exc)[:200]] += 1
        else:
            with lock:
                ids.add(message_id)
        with lock:
            left[0] -= 1
            if left[0] == 0:
                answered.set()

    started = time.monotonic()
    try:
        for _ in range(messages):
            client.publish(path, data).add_done_callback(done)
        if not answered.wait(timeout):
            raise RuntimeError(f"publish: {left[0]} of {messages} not answered in {timeout:.0f}s")
        took = time.monotonic() - started
    finally:
        client.stop()
        client.transport.close()
    if errors:
        raise RuntimeError(f"publish: {sum(errors.values())} failed: {dict(errors.most_common(5))}")
    if len(ids) != messages:
        raise RuntimeError(f"publish: {messages} answered with {len(ids)} distinct message ids")
    return took, ids


def stream(host: str, sub: str, index: int, ready: Any, stop: Any, out: Any) -> None:
    """One subscriber process: a client of its own, one streaming pull on ``sub`` with the default
    flow control, every message acknowledged in the callback; sends (index, [(message id, time)])
    every 0.2 s, then ("done", index, error or None) once ``stop`` is set or the stream failed."""
    use(host)
    try:
        from google.cloud import pubsub_v1

        client = pubsub_v1.SubscriberClient()
    except BaseException:
        ready.abort()  # the parent stops waiting for the streams to start
        raise
    path = client.subscription_path(PROJECT, sub)
    got: list[tuple[str, float]] = []
    lock = threading.Lock()

    def callback(message: Any) -> None:
        now = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process
        message.ack()
        with lock:
            got.append((message.message_id, now))

    def flush() -> None:
        with lock:
            batch = got[:]
            got.clear()
        if batch:
            out.put(("got", index, batch))

    error = None
    try:
        ready.wait(120)  # every process has its client: the streams start together
        future = client.subscribe(path, callback)
        while not stop.wait(0.2):
            flush()
            if future.done():
                error = repr(future.exception())
                break
        future.cancel()
        with contextlib.suppress(Exception):
            future.result(timeout=30)
    except Exception as exc:  # reported to the parent, which fails the run
        error = repr(exc)
    finally:
        flush()
        client.close()
        out.put(("done", index, error))


def subscribe(
    hosts: list[str], sub: str, streams: int, published: set[str], settle: float, timeout: float
) -> tuple[float, int]:
    """(msg/s from the first message received until every published id came, duplicates)."""
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(streams + 1)
    stop = context.Event()
    out = context.Queue()
    processes = [
        context.Process(target=stream, args=(hosts[i % len(hosts)], sub, i, ready, stop, out), daemon=True)
        for i in range(streams)
    ]
    for p in processes:
        p.start()
    ready.wait(120)
    deadline = time.monotonic() + timeout
    first_seen: dict[str, float] = {}
    deliveries = 0
    strangers = 0
    first = float("inf")
    complete_at: float | None = None  # when every published id had come (our clock, for --settle)
    finished: dict[int, str | None] = {}
    try:
        while len(finished) < streams:
            now = time.monotonic()
            if complete_at is None and now > deadline:
                break
            if complete_at is not None and now > complete_at + settle:
                stop.set()
                if now > complete_at + settle + 60:
                    break  # a stream that does not stop: killed below
            try:
                kind, index, payload = out.get(timeout=0.2)
            except queue.Empty:
                continue
            if kind == "done":
                finished[index] = payload
                if payload is not None:
                    stop.set()
                continue
            for message_id, at in payload:
                deliveries += 1
                first = min(first, at)
                if message_id not in published:
                    strangers += 1
                elif message_id not in first_seen or at < first_seen[message_id]:
                    first_seen[message_id] = at
            if complete_at is None and len(first_seen) == len(published):
                complete_at = time.monotonic()
    finally:
        stop.set()
        for p in processes:
            p.join(60)
            if p.is_alive():
                p.kill()
    failed = {index: error for index, error in finished.items() if error}
    if failed:
        raise RuntimeError(f"subscribe: streams failed: {failed}")
    if len(first_seen) != len(published):
        raise RuntimeError(f"subscribe: {len(first_seen)} of {len(published)} messages came in {timeout:.0f}s")
    if strangers:
        raise RuntimeError(f"subscribe: {strangers} deliveries of messages this run did not publish")
    last = max(first_seen.values())
    return len(published) / max(last - first, 1e-9), deliveries - len(published)


def grpc_calls(target: Target) -> dict[str, tuple[float, float]]:
    """RPC -> (calls, seconds) answered OK so far, summed over the target's AMS nodes
    (``ams_grpc_call_duration_seconds``, docs/monitoring.md); empty for the emulator."""
    import requests

    from tests.helpers import prometheus_samples

    out: dict[str, tuple[float, float]] = {}
    for url, token in target.metrics_pages:
        page = requests.get(url, headers={"x-api-key": token}, timeout=30)
        page.raise_for_status()
        samples = prometheus_samples(page.text)
        for (name, labels), value in samples.items():
            found = dict(labels)
            if found.get("code") != "OK" or name not in (
                "ams_grpc_call_duration_seconds_count",
                "ams_grpc_call_duration_seconds_sum",
            ):
                continue
            calls, seconds = out.get(found["method"], (0.0, 0.0))
            if name.endswith("_count"):
                calls += value
            else:
                seconds += value
            out[found["method"]] = (calls, seconds)
    return out


def calls_line(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> str:
    """The RPCs served between two looks (a call passed on to the owner is counted at both nodes)."""
    parts = []
    for method in ("Acknowledge", "ModifyAckDeadline", "Pull"):
        calls = after.get(method, (0.0, 0.0))[0] - before.get(method, (0.0, 0.0))[0]
        seconds = after.get(method, (0.0, 0.0))[1] - before.get(method, (0.0, 0.0))[1]
        if calls:
            parts.append(f"{method} {calls:,.0f} calls, mean {seconds / calls * 1000:.1f} ms")
    return "; ".join(parts) or "no unary calls counted"


def target_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def target_rss(pids: list[int]) -> tuple[int, int]:
    """The resident memory of the target's processes now and at their peak (VmRSS, VmHWM), summed."""
    now = peak = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    now += int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak += int(line.split()[1]) * 1024
    return now, peak


def mb(value: int | None) -> str:
    return "?" if value is None else f"{value / 1e6:,.0f} MB"


def measure(target: Target, args: argparse.Namespace, run: int) -> Run:
    name = uuid.uuid4().hex[:8]
    topic, sub = f"t-{name}", f"s-{name}"
    make_topic_and_subscription(target.publish_host, topic, sub)
    try:
        machine_before = cpu_stat()
        cpu0 = target_cpu(target.pids)
        seconds, ids = publish(target.publish_host, topic, args.messages, args.size, args.in_flight, args.timeout)
        cpu1 = target_cpu(target.pids)
        print(f"{target.name} run {run}: published in {seconds:.1f}s, subscribing", flush=True)
        calls_before = grpc_calls(target)
        rate, duplicates = subscribe(target.stream_hosts, sub, args.streams, ids, args.settle, args.timeout)
        cpu2 = target_cpu(target.pids)
        print(f"{target.name} run {run}: while subscribing, {calls_line(calls_before, grpc_calls(target))}", flush=True)
        figures = Run(args.messages / seconds, rate, duplicates, cpu1 - cpu0, cpu2 - cpu1)
        figures.machine = shares(machine_before, cpu_stat())
    finally:
        remove_topic_and_subscription(target.publish_host, topic, sub)
    print(f"{target.name} run {run}: {figures.line(args.messages)}", flush=True)
    return figures


def table(
    args: argparse.Namespace, results: dict[str, list[Run]], rss: dict[str, tuple[int, int]], reference: float
) -> str:
    day = datetime.now(UTC).date().isoformat()
    runs = f"median of {args.runs} runs" if args.runs > 1 else "1 run"
    lines = [
        f"| Target ({day}, {args.messages:,} x {args.size} B, {runs}) | Publish (batches of {BATCH}) "
        f"| Subscribe ({args.streams} streams) | Duplicates "
        "| Server CPU per 1,000 msgs, publish / subscribe | RSS after (peak) |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs_of in results.items():
        publish_rate = statistics.median(r.publish_per_s for r in runs_of)
        subscribe_rate = statistics.median(r.subscribe_per_s for r in runs_of)
        duplicates = "/".join(str(r.duplicates) for r in runs_of)
        pub_cpu = statistics.median(r.publish_cpu for r in runs_of) / args.messages * 1000
        sub_cpu = statistics.median(r.subscribe_cpu for r in runs_of) / args.messages * 1000
        lines.append(
            f"| {name} | {publish_rate:,.0f} msg/s | {subscribe_rate:,.0f} msg/s | {duplicates} "
            f"| {pub_cpu:.3f} s / {sub_cpu:.3f} s | {mb(rss[name][0])} ({mb(rss[name][1])}) |"
        )
    command = ".venv/bin/python -m benchmarks.pubsub_client " + shlex.join(sys.argv[1:])
    return "\n".join(lines) + f"\n\n{command.strip()}\n(cores={os.cpu_count()}, reference={reference}ms)"


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pubsub_client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"a comma list of {', '.join(TARGETS)}")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="bytes of data per message")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--streams", type=int, default=4, help="subscriber processes, one streaming pull each")
    parser.add_argument("--in-flight", type=int, default=10_000, help="published messages not yet answered, at most")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds the streams run on, counting duplicates")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a publish or a drain may take")
    parser.add_argument("--heap", default=DEFAULT_HEAP, help="the emulator's JVM -Xmx")
    args = parser.parse_args()
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        parser.error(f"--targets: {', '.join(unknown) or 'none'} (choose from {', '.join(TARGETS)})")
    if args.messages < 1 or args.runs < 1 or args.streams < 1 or args.in_flight < 1:
        parser.error("--messages, --runs, --streams and --in-flight must be 1 or more")

    reference = reference_ms()
    print(
        f"targets={','.join(targets)} messages={args.messages} size={args.size}B batch={BATCH} "
        f"streams={args.streams} in_flight={args.in_flight} runs={args.runs} cores={os.cpu_count()} "
        f"reference={reference}ms",
        flush=True,
    )
    results: dict[str, list[Run]] = {}
    rss: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="ams-pubsub-bench-") as tmp:
        for name in targets:
            with start_target(name, Path(tmp), args) as target:
                results[name] = [measure(target, args, run) for run in range(1, args.runs + 1)]
                rss[name] = target_rss(target.pids)
    print(f"reference at the end: {reference_ms()}ms\n", flush=True)
    print(table(args, results, rss, reference), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
