"""The Spark cluster: a master (spark1, which drives the AMS jobs) and two workers (spark2, spark3).

usage_report and archive run on the master with an executor on each worker, against the three
brokers and the metadata store; the archive's Parquet lands on the directory the Spark hosts share
(spark_jobs_output_dir, a bind mount of the scenario, as operators use a shared filesystem).

The daily figures the API serves from the job are those of past days (today always comes from the
live counters), so the test makes yesterday's traffic: a short-lived extra AMS process on ams1 whose
Python clock runs a day behind publishes it (the node stamps each Kafka record with its own publish
time) and is SIGKILLed before it flushes its usage counters (it flushes them hourly, not every 2 s:
a CI run under load once took longer than 2 s between the publish and the kill). Through haproxy,
yesterday then has no live count; after `usage_report --day <yesterday>` it has exactly the job's
figure.

The jobs' plumbing on the master (timers, the private store URI, the wrapper's refusals) is checked
here too: this scenario is the only one that runs the spark role (docs/ansible.md).
"""

from __future__ import annotations

import datetime as dt
import shlex
from typing import Any

import pytest
import requests
from multinode import (
    ADDRESS,
    GROUPS,
    PROJECT,
    SCENARIO_VARS,
    VAULT,
    Api,
    host,
    mongo_client,
    report,
    unique,
    wait_until,
)

MASTER = GROUPS["spark_master"][0]
MONGO = GROUPS["mongodb"][0]
DATABASE = "argo_msg"  # ams_database of the production group_vars
OUTPUT = "/srv/ams-data"  # spark_jobs_output_dir of the production group_vars
JOB_TIMERS = ["ams-spark-usage-report.timer", "ams-spark-archive.timer"]
WORKERS = GROUPS["spark_worker"]
SHIFTED_NODE = GROUPS["ams"][0]
SHIFTED_PORT = 18080
# a Python clock one day behind, then `ams serve` with the node's own settings on another port
SHIFTED_SERVE = (
    "import sys, time; _ns = time.time_ns; _s = time.time; "
    "time.time_ns = lambda: _ns() - 86400 * 10**9; time.time = lambda: _s() - 86400; "
    "from ams_app.cli import main; "
    # one process: workers would be processes of their own, without this one's shifted clock (and
    # would ask for the node's worker ports, which its ams serve holds)
    f"sys.exit(main(['serve', '--config', '/etc/ams/ams.yml', '--host', '{SHIFTED_NODE}', '--port', '{SHIFTED_PORT}', "
    "'--workers', '1']))"
)


def master_json() -> Any:
    return requests.get(f"http://{ADDRESS[MASTER]}:8080/json/", timeout=10).json()


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    return client


def test_both_workers_are_registered_with_the_master():
    def alive() -> list[Any]:
        return [w for w in master_json()["workers"] if w["state"] == "ALIVE"]

    workers = wait_until(lambda: len(alive()) == len(WORKERS) and alive(), "both workers ALIVE in the master")
    assert sorted(w["host"] for w in workers) == sorted(WORKERS)


@pytest.mark.parametrize("timer", JOB_TIMERS)
def test_the_job_timers_are_active_and_enabled_on_the_master(timer):
    master = host(MASTER)
    assert master.run(f"systemctl is-enabled {timer}").stdout.strip() == "enabled"
    assert master.run(f"systemctl is-active {timer}").stdout.strip() == "active"
    # scheduled: systemd sets the next elapse again once a run it triggered ends, so a test that
    # meets the hourly archive while it runs sees none until then (a CI run met it so)
    wait_until(
        lambda: master.run(f"systemctl show -p NextElapseUSecRealtime --value {timer}").stdout.strip(),
        f"{timer} scheduled",
        timeout=600,
        every=5,
    )
    for worker in WORKERS:  # the jobs are the master's alone
        assert host(worker).run(f"systemctl cat {timer}").rc != 0


def test_the_jobs_store_uri_stays_private():
    master = host(MASTER)
    env = master.file("/etc/spark/ams-jobs.env")
    assert (env.user, env.group, env.mode) == ("root", "spark", 0o640)
    content = env.content_string
    # the store over TLS with AMS's login; Kafka as the read-only user spark, over SASL_SSL
    assert f"@{MONGO}:27017/?" in content
    assert "tls=true&tlsCAFile=/etc/spark/internal-ca.pem" in content
    assert "AMS_SPARK_KAFKA_PROTOCOL=SASL_SSL" in content
    assert "AMS_SPARK_KAFKA_SASL_USERNAME=spark" in content
    password = VAULT["vault_kafka_spark_password"]
    assert f"AMS_SPARK_KAFKA_SASL_PASSWORD={password}" in content
    # the command line carries no URI nor password: the jobs read them from the environment
    for where in (
        master.file("/usr/local/bin/ams-spark-job").content_string,
        master.run("systemctl cat ams-spark-job@.service").stdout,
    ):
        assert "mongodb://" not in where
        assert password not in where


def test_ams_spark_job_refuses_other_users_and_unknown_jobs():
    master = host(MASTER)
    assert master.run("ams-spark-job").rc == 2
    assert master.run("ams-spark-job no_such_job").rc == 2
    other = master.run("runuser -u nobody -- /usr/local/bin/ams-spark-job archive")
    assert other.rc == 2
    assert "run it as spark or as root" in other.stderr


def topic_daily(api: Api, topic: str, day: str) -> int:
    """The topic's messages on ``day`` in its daily series (topic.number_of_daily_messages)."""
    metrics = api.call("GET", f"/projects/{PROJECT}/topics/{topic}:metrics")["metrics"]
    (daily,) = [m for m in metrics if m["metric"] == "topic.number_of_daily_messages"]
    return sum(int(p["value"]) for p in daily["timeseries"] if p["timestamp"].startswith(day))


def va_messages(api: Api, day: str) -> int:
    """The project's messages on ``day`` in /v1/metrics/va_metrics."""
    query = f"/metrics/va_metrics?start_date={day}&end_date={day}&projects={PROJECT}"
    rows = api.call("GET", query)["projects_metrics"]["projects"]
    return sum(int(r["message_count"]) for r in rows if r["project"] == PROJECT)


@pytest.mark.timeout(900)
def test_jobs_run_on_both_workers_and_their_figures_reach_the_api(api):
    today = dt.datetime.now(dt.UTC).date()
    yesterday = (today - dt.timedelta(days=1)).isoformat()
    topic = unique("sp")
    api.topic(topic)
    before = va_messages(api, yesterday)  # 0 on a fresh appliance
    node = host(SHIFTED_NODE)
    unit = "ams-yesterday"
    started = node.run(
        f"systemd-run --unit={unit} --property=User=ams --setenv=AMS_METRICS_FLUSH_SECONDS=3600 "
        f"/opt/ams/current/bin/python -c {shlex.quote(SHIFTED_SERVE)}"
    )
    assert started.rc == 0, started.stderr
    # the host firewall lets no one in on this extra port: this machine, for the test's life
    tester = SCENARIO_VARS["multinode_bridge_address"]
    opened = node.run(f"nft add rule inet ams_firewall input ip saddr {tester} tcp dport {SHIFTED_PORT} accept")
    assert opened.rc == 0, opened.stderr
    try:
        shifted = Api(f"https://{ADDRESS[SHIFTED_NODE]}:{SHIFTED_PORT}/v1")  # the node's settings: HTTPS
        wait_until(lambda: shifted.request("GET", "/status").status_code == 200, "the shifted node serving", 90)
        payloads = [f"yesterday-{i}" for i in range(7)]
        ids = shifted.publish(topic, payloads)
        assert len(ids) == 7
    finally:
        node.run(f"systemctl kill --signal=SIGKILL {unit}")  # before its counters reach the store
        node.run(f"systemctl reset-failed {unit}")
        node.run("nft -f /etc/nftables.conf")  # the role's ruleset again, without the extra rule
    # no live count of yesterday: the node never flushed its counters
    assert (topic_daily(api, topic, yesterday), va_messages(api, yesterday)) == (0, before)

    master = host(MASTER)
    report_run = master.run(f"ams-spark-job usage_report --day {yesterday}")
    assert report_run.rc == 0, report_run.stderr[-4000:]
    archive_run = master.run("systemctl start ams-spark-job@archive.service")
    if archive_run.rc != 0:
        print(master.run("journalctl -u ams-spark-job@archive.service --no-pager -n 80").stdout)
    assert archive_run.rc == 0
    assert master.run("systemctl show -p Result --value ams-spark-job@archive.service").stdout.strip() == "success"

    # the job's figure, through haproxy
    assert topic_daily(api, topic, yesterday) == 7
    total = va_messages(api, yesterday)
    if before == 0:  # a fresh appliance: the seven are all of yesterday
        assert total == 7
    else:
        # the run crossed midnight (UTC), so yesterday also holds the earlier tests' traffic; the
        # job counts all of it from the log, including what the live counters of the nodes those
        # tests killed never flushed
        assert total >= before + 7, (total, before)

    # both jobs had an executor on each worker
    apps = master_json()["completedapps"][-2:]
    assert len(apps) == 2, master_json()
    for worker in WORKERS:
        state = requests.get(f"http://{ADDRESS[worker]}:8081/json/", timeout=10).json()
        app_ids = {e["appid"] for e in state.get("finishedexecutors", [])}
        assert {a["id"] for a in apps} <= app_ids, (worker, app_ids)

    # the archive's Parquet files, written by the executors on the shared directory
    root = f"{OUTPUT}/archive/project={PROJECT}/topic={topic}/date={yesterday}"
    for spark_host in [MASTER, *WORKERS]:
        parts = host(spark_host).run(f"find {root} -name '*.parquet'").stdout.split()
        assert parts, f"no Parquet under {root} as {spark_host} sees it"
        assert {host(spark_host).file(p).user for p in parts} == {"spark"}
    assert master.file(f"{OUTPUT}/usage_report/topics/day={yesterday}/_SUCCESS").exists
    # the archive's progress in the store: the topic's seven records, offsets 0 to 6
    client = mongo_client()
    try:
        project = client[DATABASE]["projects"].find_one({"name": PROJECT})
        assert project is not None
        state = client[DATABASE]["archive_offsets"].find_one({"project_uuid": project["uuid"], "topic": topic})
        assert state is not None
        assert state["offset"] == 6
    finally:
        client.close()
    report("spark_jobs", {"usage_report_day": yesterday, "messages": 7, "executors_on": WORKERS})
