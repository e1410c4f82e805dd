"""Pull + ack throughput of several consumers sharing one subscription, on a cluster of kafka-backend
nodes (tools/cluster.py), fresh and after the store has grown a history.

    make services-up
    .venv/bin/python -m benchmarks.consume [--nodes 3] [--consumers 4] [--messages 50000] [--size 1024]
                                           [--max-messages 100] [--runs 3] [--via nodes|haproxy]
                                           [--history 0] [--history-messages 5000] [--consume-owner on|off]
                                           [--metadata-cache on|off] [--cpu]
                                           [--ordering-keys 0] [--filter-half] [--exactly-once]

Starts the cluster (NODES `ams serve` on the kafka backend, haproxy in front) on a database of its
own, then for each run: a topic and a subscription (ack deadline 600 s), MESSAGES of SIZE random bytes
published 500 per request, then CONSUMERS processes that pull MAX_MESSAGES (returnImmediately) and
acknowledge the last ackId of each pull (every ackId of it on a per-message subscription, below),
until the subscription's offset reaches the end of the topic. Consumer i talks to node i mod NODES
over plain HTTP (--via nodes, the default: the consumers spread over the nodes), or all of them to
haproxy over TLS (--via haproxy).

It prints, per run and as the median of the runs: messages per second, the p50 and p99 of a pull+ack
pair, the answers that were not 200 by status (a 503 is contention), and how many messages came
more than once. --history N then adds N rounds of the same work (a topic, a subscription,
--history-messages published and drained), unmeasured, and measures the runs again: consuming must
not slow down as the store's history grows. --consume-owner (on by default) sets the nodes'
consume_owner: one node owns the subscription and the others forward to it (docs/production.md);
off measures the compare-and-swap on the store. --metadata-cache (on by default) sets the nodes'
metadata_cache. --cpu prints, after each measured run, the CPU seconds that each process on the
machine (nodes, Kafka, FerretDB, consumers) spent during it, from /proc. The cluster and its
database are removed at the end. Loopback only; bounded by --timeout per run.

Three options make the subscriptions per-message (docs/delivery.md), alone or together, in every
run and round of history; the header line names them (``delivery=plain`` without):

- ``--ordering-keys N`` (0, the default: none): the subscription has ``enableMessageOrdering``, and
  message i is published with ``orderingKey`` ``k{i mod N}``. A pull then delivers at most one
  message per key, and none of a key with a message out: N bounds the messages per pull, and
  the consumers that find nothing free pull again until the offset reaches the end.
- ``--filter-half``: the subscription has the filter ``attributes.half = "yes"`` and the messages
  alternate ``half`` = ``yes``/``no`` (the first is yes): half of them are delivered, and the others
  are acknowledged by the pulls that read them, so the offset still reaches the end. ``messages``
  and ``msg_per_s`` then count the messages delivered (the matching half); ``went_through`` and
  ``went_through_per_s`` count all those the subscription's offset went over, both halves.
- ``--exactly-once``: the subscription has ``enableExactlyOnceDelivery``; an ack that refuses some
  ids (a 400 with ``ackIdErrors``) counts among the answers not 200, and the ids it took count as
  consumed.

On a per-message subscription an ackId acknowledges its own message only, so the consumers
acknowledge every ackId of each pull in one request; "more than once" still counts the message ids
that came more than once.

Each run also prints the machine's idle and stolen CPU time during it (%, /proc/stat), and the
header and the end a reference figure: a fixed pure-Python loop's time on one core. Figures from
different sessions compare only when these agree (docs/benchmarks.md).

The nodes take their settings from the cluster's settings file, not from this process's environment
(tools/cluster.py drops AMS_* from it), except for what ``node_env()`` passes on: the variables of
NODE_SECURITY_ENV (the Kafka client's security protocol, SASL login and TLS files, ZooKeeper's TLS
and its files, the token key file), and, for each of AMS_KAFKA_BOOTSTRAP_SERVERS, AMS_MONGO_URI,
AMS_ZOOKEEPER_HOSTS and AMS_KAFKA_ZNODE, the server that an ``AMS_TEST_*`` override of it names
(the overrides tests/helpers.py ``service_settings()`` honours, which this benchmark's own use of
MongoDB follows too). So the same run measures the cluster on other servers, such as the secured
ones of tools/secure_services.py (benchmarks/secure_links.py --consume sets them).
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import json
import multiprocessing
import os
import statistics
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import urllib3

from benchmarks.api_throughput import percentile
from tests.helpers import service_settings
from tools import cluster

PROJECT = "bench"
PUBLISH_BATCH = 500
#: The security settings a node takes from this process's environment (module docstring).
NODE_SECURITY_ENV = (
    "AMS_KAFKA_SECURITY_PROTOCOL",
    "AMS_KAFKA_SASL_MECHANISM",
    "AMS_KAFKA_SASL_USERNAME",
    "AMS_KAFKA_SASL_PASSWORD",
    "AMS_KAFKA_CA_FILE",
    "AMS_KAFKA_CERT_FILE",
    "AMS_KAFKA_KEY_FILE",
    "AMS_KAFKA_LISTENER",
    "AMS_ZOOKEEPER_TLS",
    "AMS_ZOOKEEPER_CA_FILE",
    "AMS_ZOOKEEPER_CERT_FILE",
    "AMS_ZOOKEEPER_KEY_FILE",
    "AMS_TOKEN_KEY_FILE",
)


def node_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What of ``environ`` the cluster's nodes take over their settings file: NODE_SECURITY_ENV as
    given, and each server that an ``AMS_TEST_*`` override names (service_settings()'s keys)."""
    passed = {key: environ[key] for key in NODE_SECURITY_ENV if key in environ}
    for key in service_settings():
        override = environ.get(key.replace("AMS_", "AMS_TEST_", 1))
        if override:
            passed[key] = override
    return passed


@dataclass
class Target:
    base: str  # ends in /v1
    token: str
    verify: str | bool


class Client:
    """HTTP with keep-alive on urllib3 itself: the consumers share the machine's cores with the
    nodes they measure, and requests' own work per call (environment, cookies, hooks) would be
    counted against the service (a Go load generator, as the original measurement used, has
    none)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        ca = target.verify if isinstance(target.verify, str) else None
        self.pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED" if target.verify else "CERT_NONE", ca_certs=ca)
        self.headers = {"x-api-key": target.token, "Content-Type": "application/json"}

    def request(self, method: str, path: str, body: Any = None) -> urllib3.BaseHTTPResponse:
        data = None if body is None else json.dumps(body).encode()
        return self.pool.request(
            method, self.target.base + path, body=data, headers=self.headers, timeout=60, retries=False
        )

    def ok(self, method: str, path: str, body: Any = None, accept: tuple[int, ...] = (200,)) -> Any:
        r = self.request(method, path, body)
        if r.status not in accept:
            raise RuntimeError(f"{method} {path}: {r.status} {r.data[:300]!r}")
        return json.loads(r.data) if r.data else None


@dataclass(frozen=True)
class Delivery:
    """The subscription's per-message options (module docstring); none: a plain subscription."""

    ordering_keys: int = 0
    filter_half: bool = False
    exactly_once: bool = False

    @property
    def per_message(self) -> bool:
        """An ackId acknowledges its own message only: the consumers acknowledge every one."""
        return bool(self.ordering_keys or self.filter_half or self.exactly_once)

    def subscription(self, topic: str) -> dict[str, Any]:
        body: dict[str, Any] = {"topic": f"projects/{PROJECT}/topics/{topic}", "ackDeadlineSeconds": 600}
        if self.ordering_keys:
            body["enableMessageOrdering"] = True
        if self.filter_half:
            body["filter"] = 'attributes.half = "yes"'
        if self.exactly_once:
            body["enableExactlyOnceDelivery"] = True
        return body

    def message(self, i: int, data: str) -> dict[str, Any]:
        """The i-th message published (from 0)."""
        message: dict[str, Any] = {"data": data}
        if self.ordering_keys:
            message["orderingKey"] = f"k{i % self.ordering_keys}"
        if self.filter_half:
            message["attributes"] = {"half": "yes" if i % 2 == 0 else "no"}
        return message

    def delivered(self, messages: int) -> int:
        """How many of ``messages`` published the subscription delivers."""
        return (messages + 1) // 2 if self.filter_half else messages

    def label(self) -> str:
        if not self.per_message:
            return "delivery=plain"
        named = [f"orderingKeys={self.ordering_keys}"] if self.ordering_keys else []
        named += ["filter=half"] if self.filter_half else []
        named += ["exactlyOnce"] if self.exactly_once else []
        return f"delivery=per-message({','.join(named)})"


@dataclass
class Outcome:
    consumed: int = 0
    pairs: list[float] = field(default_factory=list)  # seconds per pull+ack pair
    errors: collections.Counter[int] = field(default_factory=collections.Counter)
    ids: collections.Counter[str] = field(default_factory=collections.Counter)


def refused_ids(response: urllib3.BaseHTTPResponse) -> set[str]:
    """The ackIds a 400 to an acknowledgement names as not taken (the others were), if it does."""
    if response.status != 400:
        return set()
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return set(orjson.loads(response.data)["error"].get("ackIdErrors") or {})
    return set()


def consumer(target: Target, sub: str, max_messages: int, deadline: float, out: Any, ack_all: bool = False) -> None:
    """One consumer process: pull, ack the last (``ack_all``: every ackId of the pull, for a
    per-message subscription), until the subscription is at the end of its topic."""
    client = Client(target)
    result = Outcome()
    base = f"/projects/{PROJECT}/subscriptions/{sub}"
    body = {"maxMessages": str(max_messages), "returnImmediately": "true"}
    while time.monotonic() < deadline:
        started = time.perf_counter()
        r = client.request("POST", f"{base}:pull", body)
        if r.status != 200:
            result.errors[r.status] += 1
            time.sleep(0.01)
            continue
        got = orjson.loads(r.data)["receivedMessages"]  # the load decodes fast: its CPU is not the service's
        if not got:
            offsets = client.ok("GET", f"{base}:offsets")
            if offsets["current"] >= offsets["max"]:
                break
            time.sleep(0.005)
            continue
        ack_ids = [m["ackId"] for m in got] if ack_all else [got[-1]["ackId"]]
        a = client.request("POST", f"{base}:acknowledge", {"ackIds": ack_ids})
        if a.status != 200:
            result.errors[a.status] += 1
            refused = refused_ids(a) if ack_all else set()
            if not refused:
                continue  # not acknowledged: the lease expires and the messages come again
            got = [m for m in got if m["ackId"] not in refused]  # exactly-once: the others were taken
            if not got:
                continue
        result.pairs.append(time.perf_counter() - started)
        result.consumed += len(got)
        result.ids.update(m["message"]["messageId"] for m in got)
    out.put(result)


def fill(client: Client, topic: str, sub: str, messages: int, size: int, mode: Delivery = Delivery()) -> None:
    client.ok("PUT", f"/projects/{PROJECT}/topics/{topic}")
    client.ok("PUT", f"/projects/{PROJECT}/subscriptions/{sub}", mode.subscription(topic))
    data = base64.b64encode(os.urandom(size)).decode()
    for first in range(0, messages, PUBLISH_BATCH):
        batch = [mode.message(i, data) for i in range(first, min(first + PUBLISH_BATCH, messages))]
        client.ok("POST", f"/projects/{PROJECT}/topics/{topic}:publish", {"messages": batch})


def cpu_ticks() -> dict[int, tuple[int, str]]:
    """Every process's user + system CPU time (clock ticks) and command line, from /proc."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            found[int(entry.name)] = (int(fields[11]) + int(fields[12]), command)
    return found


def print_cpu(before: dict[int, tuple[int, str]], after: dict[int, tuple[int, str]], seconds: float) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    used = sorted(
        ((ticks - before.get(pid, (0, ""))[0]) / tick, pid, command) for pid, (ticks, command) in after.items()
    )
    used = [row for row in used if row[0] > 0][::-1]
    print(f"  cpu over {seconds:.1f}s: {sum(row[0] for row in used):.1f}s in all", flush=True)
    for spent, pid, command in used[:10]:
        print(f"  {spent:6.2f}s {pid} {command[:110]}", flush=True)


def cpu_stat() -> list[int]:
    """The machine's CPU time so far, from /proc/stat's ``cpu`` line: user, nice, system, idle,
    iowait, irq, softirq, steal (in ticks)."""
    with open("/proc/stat") as stat:
        return [int(x) for x in stat.readline().split()[1:9]]


def shares(before: list[int], after: list[int]) -> dict[str, float]:
    """The idle and the stolen part of the machine's CPU time between two cpu_stat()s, in %. Steal
    is time the hypervisor gave the machine's cores to someone else: a run with steal is slower for
    reasons outside the machine."""
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(spent) or 1
    return {"idle_pct": round(100 * (spent[3] + spent[4]) / total, 1), "steal_pct": round(100 * spent[7] / total, 1)}


def reference_ms() -> float:
    """A fixed pure-Python workload, best of 5, in ms: the machine's speed for one thread right now.
    Runs on different days (or machines) compare only as far as this figure is the same."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i % 7
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 1)


def consume(
    targets: list[Target],
    sub: str,
    consumers: int,
    max_messages: int,
    timeout: float,
    cpu: bool = False,
    mode: Delivery = Delivery(),
    published: int = 0,
) -> dict[str, Any]:
    """Drain ``sub`` with ``consumers`` processes. ``published``: the messages its topic has, for
    ``went_through`` (with --filter-half, where fewer are delivered)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    deadline = time.monotonic() + timeout
    processes = [
        context.Process(
            target=consumer, args=(targets[i % len(targets)], sub, max_messages, deadline, out, mode.per_message)
        )
        for i in range(consumers)
    ]
    before = cpu_ticks() if cpu else {}
    machine_before = cpu_stat()
    started = time.monotonic()
    for p in processes:
        p.start()
    results: list[Outcome] = [out.get(timeout=timeout + 60) for _ in processes]
    took = time.monotonic() - started
    machine = shares(machine_before, cpu_stat())
    if cpu:
        print_cpu(before, cpu_ticks(), took)
    for p in processes:
        p.join()
    pairs = [s for r in results for s in r.pairs]
    ids: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[int] = collections.Counter()
    for r in results:
        ids.update(r.ids)
        errors.update(r.errors)
    through = {"went_through": published, "went_through_per_s": round(published / took)} if mode.filter_half else {}
    return {
        "messages": len(ids),  # delivered: with --filter-half, the matching half
        "seconds": round(took, 2),
        "msg_per_s": round(len(ids) / took),
        **through,
        "pair_p50_ms": round(statistics.median(pairs) * 1000, 1) if pairs else None,
        "pair_p99_ms": round(percentile(pairs, 0.99) * 1000, 1),
        "errors": dict(errors),
        "delivered_again": sum(n - 1 for n in ids.values()),
        **machine,
    }


def measure(args: argparse.Namespace, admin: Client, targets: list[Target], label: str) -> list[dict[str, Any]]:
    runs = []
    mode = delivery(args)
    expected = mode.delivered(args.messages)
    for run in range(args.runs):
        name = uuid.uuid4().hex[:8]
        fill(admin, f"t-{name}", f"s-{name}", args.messages, args.size, mode)
        figures = consume(
            targets, f"s-{name}", args.consumers, args.max_messages, args.timeout, args.cpu, mode, args.messages
        )
        if figures["messages"] != expected:
            raise RuntimeError(f"{label} run {run + 1}: {figures['messages']} of {expected} messages consumed")
        print(f"{label} run {run + 1}: {figures}", flush=True)
        runs.append(figures)
    rates = [r["msg_per_s"] for r in runs]
    p99s = [r["pair_p99_ms"] for r in runs]
    through = ""
    if mode.filter_half:
        through = f" delivered, {statistics.median(r['went_through_per_s'] for r in runs):,.0f} msg/s gone through"
    print(
        f"{label}: median {statistics.median(rates):,.0f} msg/s{through}, median p99 {statistics.median(p99s)} ms",
        flush=True,
    )
    return runs


def delivery(args: argparse.Namespace) -> Delivery:
    return Delivery(args.ordering_keys, args.filter_half, args.exactly_once)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.consume", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=1024, help="bytes of data per message")
    parser.add_argument("--max-messages", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--via", choices=["nodes", "haproxy"], default="nodes")
    parser.add_argument("--history", type=int, default=0, help="rounds of history between the two measurements")
    parser.add_argument("--history-messages", type=int, default=5000)
    parser.add_argument(
        "--consume-owner", choices=["on", "off"], default="on", help="one node owns each subscription's leases"
    )
    parser.add_argument(
        "--metadata-cache", choices=["on", "off"], default="on", help="the nodes' metadata cache (docs/production.md)"
    )
    parser.add_argument("--cpu", action="store_true", help="print each process's CPU seconds during each run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take")
    parser.add_argument(
        "--ordering-keys", type=int, default=0, help="enableMessageOrdering, message i with orderingKey k{i mod N}"
    )
    parser.add_argument(
        "--filter-half", action="store_true", help='filter attributes.half = "yes", which half of the messages match'
    )
    parser.add_argument("--exactly-once", action="store_true", help="enableExactlyOnceDelivery")
    args = parser.parse_args()
    if args.ordering_keys < 0:
        parser.error("--ordering-keys must be 0 or more")

    database = "ams_bench_consume_" + uuid.uuid4().hex[:8]
    owner = "true" if args.consume_owner == "on" else "false"
    env = {
        **node_env(os.environ),
        "AMS_CONSUME_OWNER": owner,
        "AMS_METADATA_CACHE": "true" if args.metadata_cache == "on" else "false",
    }
    info = cluster.start_cluster(nodes=args.nodes, database=database, env=env)
    try:
        proxy = Target(f"{info.url}/v1", info.token, str(info.ca_file))
        nodes = [Target(f"{n.url}/v1", info.token, True) for n in info.nodes]
        targets = nodes if args.via == "nodes" else [proxy]
        admin = Client(proxy)
        admin.ok("POST", f"/projects/{PROJECT}", {}, accept=(200, 409))
        print(
            f"nodes={args.nodes} consumers={args.consumers} via={args.via} messages={args.messages} "
            f"size={args.size}B maxMessages={args.max_messages} consume_owner={args.consume_owner} "
            f"metadata_cache={args.metadata_cache} {delivery(args).label()} cores={os.cpu_count()} "
            f"reference={reference_ms()}ms",
            flush=True,
        )
        measure(args, admin, targets, "fresh")
        if args.history:
            started = time.monotonic()
            for _ in range(args.history):
                name = uuid.uuid4().hex[:8]
                fill(admin, f"h-{name}", f"h-{name}", args.history_messages, args.size, delivery(args))
                consume(
                    targets,
                    f"h-{name}",
                    args.consumers,
                    args.max_messages,
                    args.timeout,
                    mode=delivery(args),
                    published=args.history_messages,
                )
            print(f"history: {args.history} rounds in {time.monotonic() - started:.0f}s", flush=True)
            measure(args, admin, targets, f"after {args.history} rounds of history")
        print(f"reference at the end: {reference_ms()}ms", flush=True)
    finally:
        cluster.stop_cluster()
        with contextlib.suppress(Exception):
            from pymongo import MongoClient

            mongo: MongoClient[dict[str, Any]] = MongoClient(service_settings()["AMS_MONGO_URI"])
            mongo.drop_database(database)
            mongo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
