"""The Grafana dashboard (roles/prometheus/files/grafana/ams.json, docs/monitoring.md) asks only for
what the service really exposes: every metric name in its queries is on a live node's page
(backend kafka with consume_owner, so the ownership figures are there too), and every label its
selectors match on is one those metrics carry."""

from __future__ import annotations

import json
import re
from typing import Any

import requests
import trustme
from prometheus_client.parser import text_string_to_metric_families

from tests.api.test_push import verified_sub
from tests.helpers import ROOT, unique
from tests.push_receiver import Receiver

DASHBOARD = ROOT / "roles" / "prometheus" / "files" / "grafana" / "ams.json"
#: Names the queries may use that Prometheus itself makes, not the service.
PROMETHEUS_OWN = {"up"}
#: Labels Prometheus adds to every scraped series (roles/prometheus: job, instance, node).
TARGET_LABELS = {"job", "instance", "node"}
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "info": ("_info",)}


def queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def exposed(text: str) -> dict[str, set[str]]:
    """Each sample name the page can carry (a histogram's _bucket/_count/_sum, a counter's
    _total), with the labels seen on it."""
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.setdefault(family.name + suffix, set())
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource"}


def test_every_query_uses_metrics_and_labels_the_service_exposes(make_server: Any, test_ca: trustme.CA) -> None:
    srv = make_server(backend="kafka", ams_consume_owner="true")
    api = srv.api()
    project = api.new_project()
    topic, sub = unique("t"), unique("s")
    api.ok("PUT", f"/projects/{project}/topics/{topic}")
    api.ok("PUT", f"/projects/{project}/subscriptions/{sub}", {"topic": f"projects/{project}/topics/{topic}"})
    api.publish(project, topic, "a", "b")
    api.pull(project, sub, 1)
    api.get(f"/projects/{project}/topics/{unique('missing')}")
    receiver = Receiver(test_ca)  # a push endpoint that fails once: both outcomes on the page
    try:
        receiver.fail_first = 1
        verified_sub(api, project, topic, receiver)
        api.publish(project, topic, "c")
        receiver.wait_for(1)
    finally:
        receiver.close()
    page = requests.get(srv.url.removesuffix("/v1") + "/metrics", headers={"x-api-key": srv.token}, timeout=30)
    assert page.status_code == 200
    names = exposed(page.text)

    used: set[str] = set()
    for query in queries():
        expr = re.sub(r'"[^"]*"', '""', query)  # label values are not names
        for name in re.findall(r"\b(?:ams|process)_[a-z_]+\b", expr):
            used.add(name)
            assert name in names, f"{name} (in {expr!r}) is not on the page"
        for name, matchers in re.findall(r"\b((?:ams|process)_[a-z_]+|up)\{([^}]*)\}", expr):
            labels = set(re.findall(r"([a-z_]+)\s*(?:=~|!=|!~|=)", matchers))
            known = names.get(name, set()) | TARGET_LABELS
            assert labels <= known, f"{name}: labels {sorted(labels - known)} are not on it ({expr!r})"
        for by in re.findall(r"\bby \(([^)]*)\)", expr):
            for label in (part.strip() for part in by.split(",")):
                assert label == "le" or label in TARGET_LABELS or any(label in lbls for lbls in names.values()), (
                    f"no metric carries label {label!r} ({expr!r})"
                )
        others = set(re.findall(r"\b([a-z_]+)\{", expr)) - {n for n in used} - PROMETHEUS_OWN
        assert not others, f"{sorted(others)}: not the service's metrics ({expr!r})"
    # the dashboard covers the four views the docs promise
    assert {"ams_http_request_duration_seconds_bucket", "ams_subscription_backlog_messages"} <= used
    assert {"ams_backend_operation_duration_seconds_bucket", "process_cpu_seconds_total"} <= used
