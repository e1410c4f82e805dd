"""The prometheus role's alert rules and configurations (roles/prometheus; docs/monitoring.md).

- every rule file passes ``promtool check rules`` and every unit test file ``promtool test rules``;
- every alert fires in at least one unit test case and stays silent in another, has a severity, a
  summary, a description and a runbook anchor that a section of the monitoring docs carries;
- the JMX exporter configuration for Kafka makes the metric names the Kafka rules use;
- ``prometheus.yml`` and ``alertmanager.yml``, rendered with Ansible's templating (as
  tests/static/test_tool_configs.py renders the roles' templates) for a small fake inventory, pass
  ``promtool check config`` and ``amtool check-config``, and scrape the hosts of the groups.

promtool and amtool come from Debian's ``prometheus`` and ``prometheus-alertmanager`` packages
(``make services-install`` installs them). Without them these tests skip, and under CI=true fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from tests.static.test_tool_configs import render_role_template

ROLE = ROOT / "roles" / "prometheus"
RULES_DIR = ROLE / "files" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.rules.yml"))
TEST_FILES = sorted((RULES_DIR / "tests").glob("*.test.yml"))
#: Where the alerts are explained: docs/monitoring.md, which the runbook annotations name.
RUNBOOK_DOCS = [ROOT / "docs" / "monitoring.md"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
#: The Debian package of each tool (tools/services.py APT_PACKAGES installs them).
PACKAGE_OF = {"promtool": "prometheus", "amtool": "prometheus-alertmanager"}
TIMEOUT = 120


def _tool(name: str) -> str:
    """The tool's path; a skip outside CI, a failure under CI=true, when it is not installed."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: apt-get install {PACKAGE_OF[name]} (make services-install installs it)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _alerts() -> dict[str, dict[str, Any]]:
    """Every alerting rule of the role, by name."""
    alerts: dict[str, dict[str, Any]] = {}
    for path in RULE_FILES:
        for group in _load(path)["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    assert rule["alert"] not in alerts, f"alert {rule['alert']} is defined twice"
                    alerts[rule["alert"]] = {**rule, "file": path.name}
    return alerts


ALERTS = _alerts()


def _cases() -> list[tuple[str, str, bool]]:
    """(test file, alert name, fires) for every alert_rule_test of every unit test file."""
    cases = []
    for path in TEST_FILES:
        for test in _load(path)["tests"]:
            for case in test.get("alert_rule_test") or []:
                cases.append((path.name, case["alertname"], bool(case.get("exp_alerts"))))
    return cases


# ---------------------------------------------------------------------------------- rules ----
def test_there_are_rules_and_unit_tests() -> None:
    assert RULE_FILES, f"no *.rules.yml in {RULES_DIR}"
    assert TEST_FILES, f"no *.test.yml in {RULES_DIR / 'tests'}"
    assert ALERTS


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_rule_file_passes_promtool_check_rules(path: Path) -> None:
    done = _run([_tool("promtool"), "check", "rules", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_unit_tests_pass(path: Path) -> None:
    done = _run([_tool("promtool"), "test", "rules", path.name], cwd=path.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout + done.stderr
    assert "FAILED" not in done.stdout, done.stdout + done.stderr


def test_every_rule_file_is_unit_tested() -> None:
    tested = {(path.parent / f).resolve() for path in TEST_FILES for f in _load(path)["rule_files"]}
    assert {p.resolve() for p in RULE_FILES} <= tested, "rule files no *.test.yml loads"
    assert tested <= {p.resolve() for p in RULE_FILES}, "a *.test.yml loads a file that is not a rule file"


def test_every_alert_fires_in_a_unit_test_and_stays_silent_in_another() -> None:
    cases = _cases()
    fired = {name for _, name, fires in cases if fires}
    silent = {name for _, name, fires in cases if not fires}
    assert not set(ALERTS) - fired, f"never seen firing: {sorted(set(ALERTS) - fired)}"
    assert not set(ALERTS) - silent, f"never seen silent: {sorted(set(ALERTS) - silent)}"
    unknown = {name for _, name, _ in cases} - set(ALERTS)
    assert not unknown, f"unit tests of alerts no rule defines: {sorted(unknown)}"


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_alert_is_labelled_and_annotated(name: str) -> None:
    rule = ALERTS[name]
    assert rule.get("labels", {}).get("severity") in ("warning", "critical"), f"{name}: severity"
    annotations = rule.get("annotations", {})
    for key in ("summary", "description", "runbook"):
        assert str(annotations.get(key, "")).strip(), f"{name}: no {key} annotation"
    assert annotations["runbook"] == f"docs/monitoring.md#{name.lower()}", f"{name}: runbook"


def _anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them."""
    anchors = set()
    for line in text.splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*$", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def test_every_alert_has_a_runbook_section() -> None:
    anchors: set[str] = set()
    for doc in RUNBOOK_DOCS:
        if doc.is_file():
            anchors |= _anchors(doc.read_text())
    missing = sorted(name for name in ALERTS if ALERTS[name]["annotations"]["runbook"].split("#", 1)[1] not in anchors)
    assert not missing, f"no section in {[str(d.relative_to(ROOT)) for d in RUNBOOK_DOCS]} for {missing}"


# ---------------------------------------------------------------- Kafka's JMX exporter ----
def _jmx_exporter_name(config: dict[str, Any], bean: str) -> str | None:
    """The metric name the JMX exporter makes of ``bean`` (``domain<key=value, ...><>attribute``),
    as it does: each pattern is unanchored (``^.*(?:pattern).*$``), the first rule that matches
    wins, ``$n`` are its groups, and lowercaseOutputName lower-cases the result."""
    for rule in config["rules"]:
        match = re.match(f"^.*(?:{rule['pattern']}).*$", bean)
        if match:
            name = rule["name"]
            for index, value in reversed(list(enumerate(match.groups(), start=1))):  # $12 before $1
                name = name.replace(f"${index}", value)
            return name.lower() if config.get("lowercaseOutputName") else name
    return None


def test_the_kafka_jmx_exporter_config_makes_the_names_the_rules_use() -> None:
    config = _load(ROLE / "files" / "kafka-jmx-exporter.yml")
    beans = {
        "kafka.server<type=ReplicaManager, name=UnderReplicatedPartitions><>Value": (
            "kafka_server_replicamanager_underreplicatedpartitions"
        ),
        "kafka.controller<type=KafkaController, name=ActiveControllerCount><>Value": (
            "kafka_controller_kafkacontroller_activecontrollercount"
        ),
        # the generic rules give the common example configuration's names
        "kafka.controller<type=KafkaController, name=OfflinePartitionsCount><>Value": (
            "kafka_controller_kafkacontroller_offlinepartitionscount"
        ),
        "kafka.server<type=BrokerTopicMetrics, name=MessagesInPerSec, topic=ams><>Count": (
            "kafka_server_brokertopicmetrics_messagesinpersec_total"
        ),
    }
    assert {bean: _jmx_exporter_name(config, bean) for bean in beans} == beans
    kafka_rules = (RULES_DIR / "kafka.rules.yml").read_text()
    for name in list(beans.values())[:2]:
        assert name in kafka_rules


# ----------------------------------------------------------------------- configurations ----
#: A small inventory: haproxy, three AMS nodes, three hosts of ZooKeeper and Kafka (addressed by IP
#: through prometheus_target_address), MongoDB, and the monitoring host.
GROUPS: dict[str, list[str]] = {
    "haproxy": ["lb1"],
    "ams": ["ams1", "ams2", "ams3"],
    "zookeeper": ["kafka1", "kafka2", "kafka3"],
    "kafka": ["kafka1", "kafka2", "kafka3"],
    "mongodb": ["mongo1"],
    "monitoring": ["mon1"],
}
ALL_HOSTS = ["lb1", "ams1", "ams2", "ams3", "kafka1", "kafka2", "kafka3", "mongo1", "mon1"]
HOSTVARS: dict[str, dict[str, Any]] = {
    host: ({"prometheus_target_address": f"10.0.0.2{host[-1]}"} if host.startswith("kafka") else {})
    for host in ALL_HOSTS
}


def render(template: str, **variables: Any) -> str:
    """The role's template for the monitoring host mon1 of the inventory above (``variables`` win)."""
    inventory = {"inventory_hostname": "mon1", "groups": {"all": ALL_HOSTS, "ungrouped": [], **GROUPS}}
    return render_role_template("prometheus", template, **{**inventory, "hostvars": HOSTVARS, **variables})


def _prometheus_config(tmp_path: Path, **variables: Any) -> tuple[Path, dict[str, Any]]:
    """prometheus.yml rendered into tmp_path, loading the role's rule files from the repository."""
    token = tmp_path / "ams.token"
    token.write_text("a-token")
    text = render(
        "prometheus.yml.j2", _prometheus_rules_dir=str(RULES_DIR), _prometheus_ams_token_file=str(token), **variables
    )
    path = tmp_path / "prometheus.yml"
    path.write_text(text)
    return path, yaml.safe_load(text)


def _jobs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["job_name"]: job for job in config["scrape_configs"]}


def _targets(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(address, instance, node) of every target of a job."""
    return [
        (target, group["labels"]["instance"], group["labels"]["node"])
        for group in job["static_configs"]
        for target in group["targets"]
    ]


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {
            "groups": {"all": ALL_HOSTS, **GROUPS, "ams_push_worker": ["ams1", "ams2"]},
            "prometheus_ams_token": "a-token",
            "prometheus_ams_scheme": "https",
            "prometheus_external_labels": {"site": "x"},
        },
        {
            "prometheus_ams_scheme": "https",
            "prometheus_ams_tls_ca_file": "/etc/ssl/certs/ca-certificates.crt",
            "prometheus_ams_tls_insecure_skip_verify": True,
            "prometheus_storage_retention_size": "20GB",
        },
    ],
    ids=["defaults", "token-https", "https-ca"],
)
def test_the_prometheus_config_passes_promtool_check_config(tmp_path: Path, variables: dict[str, Any]) -> None:
    path, _ = _prometheus_config(tmp_path, **variables)
    done = _run([_tool("promtool"), "check", "config", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr + path.read_text()
    # the rule files it names were found and checked too
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in done.stdout, done.stdout


def test_the_scrape_targets_come_from_the_inventory_groups(tmp_path: Path) -> None:
    _, config = _prometheus_config(tmp_path)
    jobs = _jobs(config)
    # no ams_push_worker group in this inventory: no such job
    assert set(jobs) == {"prometheus", "alertmanager", "ams", "haproxy", "kafka", "zookeeper", "node"}
    assert _targets(jobs["ams"]) == [(f"ams{i}:8080", f"ams{i}:8080", f"ams{i}") for i in (1, 2, 3)]
    assert (jobs["ams"]["scheme"], jobs["ams"]["metrics_path"]) == ("http", "/metrics")
    assert not {"authorization", "tls_config"} & set(jobs["ams"])
    assert _targets(jobs["haproxy"]) == [("lb1:8405", "lb1:8405", "lb1")]
    # the Kafka hosts are scraped at their prometheus_target_address, named by their inventory hostname
    assert _targets(jobs["kafka"]) == [(f"10.0.0.2{i}:7071", f"kafka{i}:7071", f"kafka{i}") for i in (1, 2, 3)]
    assert _targets(jobs["zookeeper"]) == [(f"10.0.0.2{i}:7000", f"kafka{i}:7000", f"kafka{i}") for i in (1, 2, 3)]
    node = _targets(jobs["node"])
    assert [instance for _, instance, _ in node] == [f"{host}:9100" for host in sorted(ALL_HOSTS)]
    assert ("10.0.0.21:9100", "kafka1:9100", "kafka1") in node
    assert _targets(jobs["prometheus"]) == [("127.0.0.1:9090", "mon1:9090", "mon1")]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    assert config["rule_files"] == [f"{RULES_DIR}/*.rules.yml"]


def test_the_scrape_jobs_follow_the_variables(tmp_path: Path) -> None:
    groups = {**GROUPS, "ams_push_worker": ["ams1", "ams2"], "web": ["lb1"]}
    variables = {
        "groups": {"all": ALL_HOSTS, **groups},
        "prometheus_ams_token": "a-token",
        "prometheus_ams_scheme": "https",
        "prometheus_ams_port": 8443,
        "prometheus_ams_tls_ca_src": "/controller/pki/ca.pem",  # copied to /etc/prometheus/ams-ca.pem
        "prometheus_haproxy_group": "web",
        "prometheus_kafka_group": "",
        "prometheus_node_exclude": ["mongo1"],
        "prometheus_node_exporter_port": 9200,
        "prometheus_web_listen_address": "[::]:9091",
    }
    _, config = _prometheus_config(tmp_path, **variables)
    jobs = _jobs(config)
    assert "kafka" not in jobs
    assert _targets(jobs["ams_push_worker"]) == [(f"ams{i}:9108", f"ams{i}:9108", f"ams{i}") for i in (1, 2)]
    assert _targets(jobs["ams"])[0] == ("ams1:8443", "ams1:8443", "ams1")
    # the push workers' pages are under the same prometheus_access and certificate as the nodes'
    token = {"type": "Bearer", "credentials_file": str(tmp_path / "ams.token")}
    assert jobs["ams"]["authorization"] == jobs["ams_push_worker"]["authorization"] == token
    assert jobs["ams"]["scheme"] == jobs["ams_push_worker"]["scheme"] == "https"
    tls = {"ca_file": "/etc/prometheus/ams-ca.pem", "insecure_skip_verify": False}
    assert jobs["ams"]["tls_config"] == jobs["ams_push_worker"]["tls_config"] == tls
    assert _targets(jobs["haproxy"]) == [("lb1:8405", "lb1:8405", "lb1")]
    assert [instance for _, instance, _ in _targets(jobs["node"])] == [
        f"{host}:9200" for host in sorted(ALL_HOSTS) if host != "mongo1"
    ]
    assert _targets(jobs["prometheus"]) == [("[::1]:9091", "mon1:9091", "mon1")]


def test_a_node_with_workers_is_scraped_at_each_workers_own_port(tmp_path: Path) -> None:
    """A scrape of a node's shared API port reaches one of its workers at random: a node whose host
    variable prometheus_ams_workers says it has several is scraped at each worker's own port."""
    hostvars = {**HOSTVARS, "ams2": {"prometheus_ams_workers": "3"}, "ams3": {"prometheus_ams_workers": 1}}
    path, config = _prometheus_config(tmp_path, hostvars=hostvars)
    job = _jobs(config)["ams"]
    assert _targets(job) == [
        ("ams1:8080", "ams1:8080", "ams1"),
        ("ams2:8100", "ams2:8100", "ams2"),
        ("ams2:8101", "ams2:8101", "ams2"),
        ("ams2:8102", "ams2:8102", "ams2"),
        ("ams3:8080", "ams3:8080", "ams3"),
    ]
    assert [group["labels"].get("worker") for group in job["static_configs"]] == [None, "w0", "w1", "w2", None]
    done = _run([_tool("promtool"), "check", "config", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    moved = _jobs(_prometheus_config(tmp_path, hostvars=hostvars, prometheus_ams_worker_port_base=9200)[1])["ams"]
    assert [address for address, _, _ in _targets(moved)][1:4] == ["ams2:9200", "ams2:9201", "ams2:9202"]


@pytest.mark.parametrize("webhook", ["", "https://hooks.example.org/alerts?key=s3cret"], ids=["null", "webhook"])
def test_the_alertmanager_config_passes_amtool_check_config(tmp_path: Path, webhook: str) -> None:
    text = render("alertmanager.yml.j2", prometheus_alertmanager_webhook_url=webhook)
    path = tmp_path / "alertmanager.yml"
    path.write_text(text)
    done = _run([_tool("amtool"), "check-config", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr + text
    config = yaml.safe_load(text)
    receivers = {r["name"]: r for r in config["receivers"]}
    if webhook:
        assert config["route"]["receiver"] == "webhook"
        assert receivers["webhook"]["webhook_configs"] == [{"url": webhook, "send_resolved": True}]
    else:
        assert config["route"]["receiver"] == "null"
        assert receivers == {"null": {"name": "null"}}


def _args(text: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith("ARGS=")]
    return line.removeprefix('ARGS="').removesuffix('"').split()


def test_the_daemons_flags() -> None:
    assert _args(render("prometheus.default.j2")) == [
        "--config.file=/etc/prometheus/prometheus.yml",
        "--web.listen-address=0.0.0.0:9090",
        "--storage.tsdb.retention.time=15d",
    ]
    alertmanager = render(
        "prometheus-alertmanager.default.j2", prometheus_alertmanager_extra_args=["--log.level=debug"]
    )
    assert _args(alertmanager) == [
        "--config.file=/etc/prometheus/alertmanager.yml",
        "--web.listen-address=0.0.0.0:9093",
        "--cluster.listen-address=",
        "--data.retention=120h",
        "--log.level=debug",
    ]
    assert _args(render("prometheus-node-exporter.default.j2")) == [
        "--web.listen-address=:9100",
        "--collector.textfile.directory=/var/lib/prometheus/node-exporter",
    ]


def test_the_config_does_not_depend_on_the_order_of_the_inventory(tmp_path: Path) -> None:
    """Two inventory sources (Molecule's and the project's) list groups['all'] in another order than
    one: the same hosts must render the same file, or a second run rewrites it and reloads Prometheus."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = _prometheus_config(tmp_path / "a")
    shuffled = {group: list(reversed(hosts)) for group, hosts in GROUPS.items()}
    groups = {"all": list(reversed(ALL_HOSTS)), "ungrouped": [], **shuffled}
    second, _ = _prometheus_config(tmp_path / "b", groups=groups)
    assert first.read_text() == second.read_text()
