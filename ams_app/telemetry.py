"""What a process of the service measures about itself, for Prometheus (docs/monitoring.md).

One :class:`Telemetry` per service instance, with a registry of its own (never the library's
global one: several services share a process in the tests, and ``ams admin metrics`` wants only
the service-wide figures). Everything here is per process: its requests, its backend calls, its
push deliveries, the subscriptions it owns. The service-wide figures (backlog, oldest
unacknowledged message, traffic per topic and subscription) are computed from the backends when
scraped: ams_app/service/metrics.py, ``ServiceFigures``.

Cardinality is bounded by construction: labels take values from fixed sets (route names of the
route table, backend method names, status classes, outcomes) or are project names, which an
operator creates. Nothing here is labelled per topic or subscription except the push worker's
consecutive-failure gauge, which is capped (``prometheus_series_limit``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from ams_app import __version__

disable_created_metrics()  # type: ignore[no-untyped-call]  # no *_created series: a third of the page, and nothing reads them

#: Latency buckets (seconds) for HTTP requests and push posts: a pull+ack pair is tens of ms,
#: a long-poll pull waits up to pull_wait_seconds, a push post up to its timeout.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Backend calls: a Kafka produce with acks=all or a store lookup are milliseconds.
BACKEND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0)
METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
#: Why the server answered a request before the app (ams_app/serve.py).
REFUSALS = ("head_timeout", "body_timeout", "too_large", "full")
#: What ``error_kind`` tells apart.
ERROR_KINDS = ("unavailable", "refused", "too_large", "rejected", "other")
#: The classic text format, which every Prometheus 2 parses (the names are all legacy names, so
#: prometheus-client's output is the same under either version).
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
#: The route label of a request no route matched (404, 405): one series, whatever the path.
UNMATCHED = "unmatched"


def status_class(code: int) -> str:
    return f"{code // 100}xx" if 100 <= code < 600 else "other"


def method_label(method: str) -> str:
    """A client may send any method; only the standard ones become a label value."""
    return method if method in METHODS else "other"


class Telemetry:
    """The per-process metrics of one service, on a registry of its own."""

    def __init__(self, node: str, backend: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, ...
        r.register(_Info(node, backend))
        self.requests = Histogram(
            "ams_http_request_duration_seconds",
            "Time from the request's arrival at the app to its answer, by route, method and status class.",
            ["route", "method", "status_class"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("ams_http_requests_in_flight", "Requests being answered now.", registry=r)
        self.grpc_calls = Histogram(
            "ams_grpc_call_duration_seconds",
            "Time a Pub/Sub gRPC call took (a StreamingPull: its whole stream), by RPC and status code.",
            ["method", "code"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self.grpc_streams = Gauge("ams_grpc_streams_open", "StreamingPull streams served now.", registry=r)
        self.refused = Counter(
            "ams_http_connections_refused",
            "Requests answered by the server before the app: a head or body too slow (408), a body too "
            "large (413), no connection left (503).",
            ["reason"],
            registry=r,
        )
        self.backend_calls = Histogram(
            "ams_backend_operation_duration_seconds",
            "Calls to a backend by operation (the message log: append is Kafka's produce, read its fetch, "
            "bounds its offsets; the metadata store: its method names).",
            ["backend", "operation"],
            buckets=BACKEND_BUCKETS,
            registry=r,
        )
        self.backend_errors = Counter(
            "ams_backend_errors",
            "Backend calls that failed: unavailable (the backend failed or timed out), refused (the "
            "backend was found down and the call was not tried), too_large, rejected (the backend "
            "refused the call's input), other.",
            ["backend", "kind"],
            registry=r,
        )
        self.push_deliveries = Counter(
            "ams_push_deliveries",
            "Posts of push batches to their endpoints, by outcome (success: a 2xx answer).",
            ["project", "outcome"],
            registry=r,
        )
        self.push_messages = Counter(
            "ams_push_messages_delivered",
            "Messages delivered by push and acknowledged.",
            ["project"],
            registry=r,
        )
        self.push_latency = Histogram(
            "ams_push_delivery_duration_seconds",
            "Time of one post to a push endpoint, whatever its outcome.",
            ["project"],
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        # known label values start at 0, so that rate() sees the first one happen
        for reason in REFUSALS:
            self.refused.labels(reason)
        for name in ("kafka", "mongodb") if backend == "kafka" else ("embedded_log", "embedded_store"):
            for kind in ERROR_KINDS:
                self.backend_errors.labels(name, kind)

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def observe_request(self, route: str, method: str, code: int, seconds: float) -> None:
        self.requests.labels(route, method_label(method), status_class(code)).observe(seconds)

    def add(self, collector: Collector) -> None:
        self.registry.register(collector)


def error_kind(exc: BaseException) -> str:
    from ams_app.backends.errors import BackendUnavailable, MessageTooLarge
    from ams_app.errors import AmsError

    if isinstance(exc, BackendUnavailable) or (isinstance(exc, AmsError) and exc.code == 503):
        return "unavailable"  # the backend failed the call, or it was abandoned when found down
    if isinstance(exc, MessageTooLarge):
        return "too_large"
    if isinstance(exc, AmsError | ValueError | KeyError | LookupError):
        return "rejected"  # the backend answered: the call's input was refused (a page token, a duplicate)
    return "other"


class _Info(Collector):
    def __init__(self, node: str, backend: str) -> None:
        # node_name, not node: a scrape's target labels (roles/prometheus) already have a node
        self.labels = {"node_name": node, "backend": backend, "version": __version__, "pid": str(os.getpid())}

    def collect(self) -> Iterator[InfoMetricFamily]:
        yield InfoMetricFamily("ams_build", "This process: node name, backend, version.", value=self.labels)


class GaugeCallback(Collector):
    """A gauge family computed when scraped: ``samples()`` gives (label values, value) pairs."""

    def __init__(
        self, name: str, text: str, labels: list[str], samples: Callable[[], Iterable[tuple[list[str], float]]]
    ) -> None:
        self.name, self.text, self.labels, self.samples = name, text, labels, samples

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.text, labels=self.labels)
        for values, value in self.samples():
            family.add_metric(values, value)
        yield family


def write_textfile(path: Path, text: str) -> None:
    """Replace a Prometheus textfile (``ams admin metrics``, ``ams backup --metrics-file``) so that
    readers (node exporter's textfile collector) see the old text or the new one, never a mix."""
    staging = path.with_name(f".{path.name}.tmp")
    staging.write_text(text, encoding="utf-8")
    staging.chmod(0o644)
    os.replace(staging, path)
