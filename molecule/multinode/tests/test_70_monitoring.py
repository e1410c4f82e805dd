"""The monitoring host: Prometheus and Alertmanager on mon1 (playbooks/monitoring.yml, roles/prometheus,
docs/monitoring.md), node exporter on every host and the JMX exporter in every broker and ZooKeeper
server (playbooks/monitoring_agents.yml).

Every scrape target the inventory implies is up, the alert rules are loaded and quiet on a healthy
appliance, the backup figures of the first AMS node (alone) come through node exporter, and killing
an AMS node (its container, as a power loss) fires AmsNodeDown in Prometheus and at Alertmanager; it
resolves once the node is back. Last: the kill takes a node away for minutes.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from multinode import ADDRESS, EVERY_HOST, GROUPS, INTERNAL_CA, host, kill, node_url, start, wait_until

MONITOR = GROUPS["monitoring"][0]
PROMETHEUS = f"http://{ADDRESS[MONITOR]}:9090/api/v1"
ALERTMANAGER = f"http://{ADDRESS[MONITOR]}:9093/api/v2"
# job -> the inventory hosts it scrapes (group_vars/monitoring.yml: push workers on the AMS nodes)
EXPECTED = {
    "ams": GROUPS["ams"],
    "ams_push_worker": GROUPS["ams"],
    "haproxy": GROUPS["haproxy"],
    "kafka": GROUPS["kafka"],
    "zookeeper": GROUPS["zookeeper"],
    "node": EVERY_HOST,
    "prometheus": [MONITOR],
    "alertmanager": [MONITOR],
}
VICTIM = GROUPS["ams"][-1]


def prometheus(path: str, **params: str) -> Any:
    r = requests.get(f"{PROMETHEUS}/{path}", params=params, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def targets() -> dict[str, dict[str, str]]:
    """job -> {node label: health} of every active target; a node with several targets (the AMS
    workers, each at its own port) is "up" when every one of them is."""
    found: dict[str, dict[str, str]] = {}
    for target in prometheus("targets", state="active")["activeTargets"]:
        nodes = found.setdefault(target["labels"]["job"], {})
        node = target["labels"]["node"]
        nodes[node] = target["health"] if nodes.get(node, "up") == "up" else nodes[node]
    return found


def all_up(found: dict[str, dict[str, str]]) -> bool:
    return {job: sorted(nodes) for job, nodes in found.items()} == {
        job: sorted(hosts) for job, hosts in EXPECTED.items()
    } and all(health == "up" for nodes in found.values() for health in nodes.values())


def firing(alert: str, node: str | None = None) -> bool:
    return any(
        a["labels"]["alertname"] == alert and a["state"] == "firing" and node in (None, a["labels"].get("node"))
        for a in prometheus("alerts")["alerts"]
    )


def firing_now() -> list[str]:
    return sorted(
        f"{a['labels']['alertname']} {a['labels'].get('node', '')} since {a.get('activeAt', '?')}"
        for a in prometheus("alerts")["alerts"]
        if a["state"] == "firing"
    )


def ams_scrapes() -> str:
    """What a failure needs to say: the alerts firing, and how the AMS targets' last scrapes went
    (a scrape that outlasts scrape_timeout is a node down to Prometheus, docs/monitoring.md)."""
    lines = [f"firing: {firing_now()}"]
    for target in prometheus("targets", state="active")["activeTargets"]:
        if target["labels"]["job"] in ("ams", "ams_push_worker"):
            lines.append(
                f"{target['scrapeUrl']}: {target['health']} in {target['lastScrapeDuration']:.2f}s"
                f" at {target['lastScrape']} {target['lastError']}"
            )
    figures = 'ams_service_figures_duration_seconds{job="ams"} or ams_service_figures_age_seconds{job="ams"}'
    for r in prometheus("query", query=figures)["result"]:
        lines.append(f"{r['metric']['__name__']} {r['metric'].get('instance')}: {r['value'][1]}")
    return "\n".join(lines)


def at_alertmanager(alert: str, node: str) -> bool:
    r = requests.get(f"{ALERTMANAGER}/alerts", params={"filter": f'alertname="{alert}"'}, timeout=10)
    assert r.status_code == 200, r.text
    return any(a["status"]["state"] == "active" and a["labels"].get("node") == node for a in r.json())


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5, verify=str(INTERNAL_CA)).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.parametrize("unit", ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter"])
def test_the_monitoring_daemons_run_on_the_monitoring_host(unit):
    service = host(MONITOR).service(unit)
    assert service.is_running
    assert service.is_enabled


def test_prometheus_scrapes_every_target_of_the_inventory_and_all_are_up():
    try:
        wait_until(lambda: all_up(targets()), "every target the inventory implies, up", timeout=180)
    except AssertionError:
        raise AssertionError(targets()) from None
    # the figures the alerts and the dashboard use are there, from every node
    for query, count in (
        ('ams_http_request_duration_seconds_count{job="ams"}', len(GROUPS["ams"])),
        ('ams_build_info{job="ams"}', len(GROUPS["ams"])),
        ('ams_build_info{job="ams_push_worker"}', len(GROUPS["ams"])),
        ('kafka_controller_kafkacontroller_activecontrollercount{job="kafka"}', len(GROUPS["kafka"])),
        ('haproxy_process_start_time_seconds{job="haproxy"}', len(GROUPS["haproxy"])),
        ('node_memory_MemAvailable_bytes{job="node"}', len(EVERY_HOST)),
    ):
        result = prometheus("query", query=query)["result"]
        assert len({r["metric"]["node"] for r in result}) == count, (query, result)
    # one active controller among the brokers
    query = 'sum(kafka_controller_kafkacontroller_activecontrollercount{job="kafka"})'
    (controllers,) = prometheus("query", query=query)["result"]
    assert float(controllers["value"][1]) == 1.0


def test_the_alert_rules_are_loaded_and_quiet_on_a_healthy_appliance():
    rules = {r["name"] for g in prometheus("rules")["groups"] for r in g["rules"]}
    assert {
        "AmsNodeDown",
        "AmsHighErrorRatio",
        "AmsSubscriptionBacklogGrowing",
        "AmsPushEndpointFailing",
        "KafkaUnderReplicatedPartitions",
        "ZookeeperQuorumLost",
        "HostDiskFilling",
    } <= rules
    alerts = ("AmsNodeDown", "KafkaBrokerDown", "KafkaNoActiveController", "ZookeeperQuorumLost", "HaproxyDown")
    # an alert of the rolling upgrade before (a node away for over a minute) resolves at the first
    # evaluation after its target's scrape succeeds: within one interval of the targets being up
    try:
        wait_until(lambda: not any(firing(alert) for alert in alerts), "the alerts quiet", timeout=60, every=5)
    except AssertionError:
        raise AssertionError(ams_scrapes()) from None


def test_the_first_ams_node_alone_backs_up_and_its_figures_reach_prometheus():
    """ams_backup_enabled is true by default on the first host of the ams group only (roles/ams/README.md):
    its timer runs, the other nodes' are off, and the figures of its backups (the first one started by
    the role) come through node exporter's textfile collector, with no backup alert."""
    first, *others = GROUPS["ams"]
    assert host(first).run("systemctl is-enabled ams-backup.timer").stdout.strip() == "enabled"
    for node in others:
        assert host(node).run("systemctl is-enabled ams-backup.timer").stdout.strip() == "disabled", node
    query = 'ams_backup_last_success_timestamp_seconds{job="node"}'

    def nodes() -> set[str]:
        return {r["metric"].get("node") for r in prometheus("query", query=query)["result"]}

    try:
        wait_until(lambda: nodes() == {first}, f"{query} from {first} alone", timeout=120, every=5)
    except AssertionError:
        raise AssertionError((nodes(), host(first).run("journalctl -u ams-backup --no-pager -n 40").stdout)) from None
    for alert in ("AmsBackupTooOld", "AmsBackupFailing"):
        assert not firing(alert), alert


@pytest.mark.timeout(900)
def test_killing_an_ams_node_fires_an_alert_that_resolves_when_it_is_back():
    assert answers(f"{node_url(VICTIM)}/status")
    assert not firing("AmsNodeDown"), ams_scrapes()
    kill(VICTIM)
    try:
        # for: 1m in the rule; scrapes and evaluations every 15 s (group_vars/monitoring)
        wait_until(lambda: firing("AmsNodeDown", VICTIM), f"AmsNodeDown firing for {VICTIM}", timeout=300, every=5)
        wait_until(lambda: at_alertmanager("AmsNodeDown", VICTIM), "AmsNodeDown active at Alertmanager", every=5)
        # only the dead node: the others answer, so no alert names them
        others = [n for n in GROUPS["ams"] if n != VICTIM]
        assert not any(firing("AmsNodeDown", n) for n in others), ams_scrapes()
    finally:
        start(VICTIM)
    wait_until(lambda: answers(f"{node_url(VICTIM)}/status"), f"{VICTIM} answers again", 180)
    wait_until(lambda: not firing("AmsNodeDown"), "AmsNodeDown resolved", timeout=300, every=5)
    wait_until(lambda: all_up(targets()), "every target up again", timeout=180, every=5)
