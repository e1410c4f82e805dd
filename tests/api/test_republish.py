"""``ams republish``: a real republisher process against a real server over HTTPS. Where each
message lands (exactly, in order), unroutable messages, a SIGKILL mid-stream (at least once,
duplicates bounded by a batch), topic creation, bad configurations and SIGTERM."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.helpers import ROOT, AmsServer, Api, b64, free_port, prometheus_samples, sample

#: "Not stuck" bound of every wait: generous, never a timing assertion.
DEADLINE = 180.0  # a "not stuck" bound: the kafka backend on FerretDB is slow, and CI shares 2 cores
SITES = ("alpha", "beta", "gamma")


class Process:
    """``python -m ams_app republish CONFIG``, output to a log file."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.log_path = config.with_suffix(".log")
        # the configured CA must be what verifies the server: no bundle from the environment
        env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ams_app", "republish", str(config)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while text not in self.log():
            assert self.proc.poll() is None, f"the republisher exited with {self.proc.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"no {text!r} in the log:\n{self.log()}"
            time.sleep(0.05)

    def stop(self) -> int:
        """SIGTERM, and its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(DEADLINE)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(DEADLINE)


@pytest.fixture
def republisher(tmp_path: Path) -> Iterator[Any]:
    """Start republisher processes; any still running at the end is killed."""
    started: list[Process] = []

    def start(config: dict[str, Any], name: str = "republish") -> Process:
        path = tmp_path / f"{name}-{len(started)}.yml"
        path.write_text(yaml.safe_dump(config))
        started.append(Process(path))
        return started[-1]

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.kill()


@dataclass
class Source:
    """A project with the source topic and subscription, the targets and a subscription on each."""

    api: Api
    project: str
    ids: list[str]  # message ids of the published source messages, in order

    def config(self, server: AmsServer, ca: str, **target: Any) -> dict[str, Any]:
        route = target.pop("route", {"attribute": "site"})
        batch = target.pop("batch", 100)
        return {
            "ams": {"url": f"https://{server.host}", "token": server.token, "verify": ca, "timeout_seconds": 30},
            "source": {"project": self.project, "subscription": "source-sub"},
            "route": route,
            "target": {"topic": "site-{value}", "unroutable_topic": "unroutable", **target},
            "batch": {"max_messages": batch},
        }

    def publish(self, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 100):
            body = {"messages": messages[start : start + 100]}
            self.ids += self.api.ok("POST", f"/projects/{self.project}/topics/source:publish", body)["messageIds"]

    def source_of(self, index: int) -> str:
        return f"projects/{self.project}/subscriptions/source-sub/messages/{self.ids[index]}"

    def offsets(self) -> dict[str, int]:
        return dict(self.api.ok("GET", f"/projects/{self.project}/subscriptions/source-sub:offsets"))

    def wait_drained(self, process: Process) -> None:
        """Until the republisher acknowledged every source message."""
        deadline = time.monotonic() + DEADLINE
        while (offsets := self.offsets())["current"] < offsets["max"]:
            assert process.proc.poll() is None, f"the republisher exited:\n{process.log()}"
            assert time.monotonic() < deadline, f"not drained: {offsets}\n{process.log()}"
            time.sleep(0.1)

    def received(self, topic: str) -> list[dict[str, Any]]:
        """Everything on the subscription of ``topic``, acknowledged, in order."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + DEADLINE
        while got := self.api.pull(self.project, f"{topic}-sub", 500):
            out += [m["message"] for m in got]
            self.api.ack(self.project, f"{topic}-sub", [got[-1]["ackId"]])
            assert time.monotonic() < deadline, "the subscription does not run dry"
        return out


def make_source(api: Api, *targets: str, ack_deadline: int = 60) -> Source:
    project = api.new_project("republish")
    for topic in ("source", "unroutable", *targets):
        api.ok("PUT", f"/projects/{project}/topics/{topic}")
        sub = {"topic": f"projects/{project}/topics/{topic}", "ackDeadlineSeconds": ack_deadline}
        api.ok("PUT", f"/projects/{project}/subscriptions/{topic}-sub", sub)
    return Source(api, project, [])


def payload(message: dict[str, Any]) -> str:
    return base64.b64decode(message["data"]).decode()


def by_source(messages: list[dict[str, Any]]) -> list[str]:
    return [m["attributes"]["republish_source"] for m in messages]


# ---------------------------------------------------------------------- 1. mixed stream ----
def test_a_mixed_stream_routes_exactly(
    api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any
) -> None:
    targets = [f"site-{s}" for s in SITES]
    src = make_source(api, *targets)
    messages: list[dict[str, Any]] = []
    expected: list[tuple[str, str]] = []  # (topic, reason fragment) per source message
    for i in range(400):
        attributes = {"n": str(i)}
        if i % 11 == 5:
            reason = ("unroutable", "no attribute 'site'")
        elif i % 11 == 7:
            attributes["site"] = "bad/site"
            reason = ("unroutable", "'bad/site' makes an invalid topic name 'site-bad/site'")
        elif i % 11 == 9:
            attributes["site"] = "delta"  # no topic site-delta, and create_topics is false
            reason = ("unroutable", f"topic 'site-delta' does not exist in project '{src.project}'")
        else:
            attributes["site"] = SITES[i % 3]
            reason = (f"site-{SITES[i % 3]}", "")
        messages.append({"data": b64(f"payload {i}"), "attributes": attributes})
        expected.append(reason)
    src.publish(messages)

    port = free_port()
    process = republisher({**src.config(server, tls_files[2]), "metrics": {"port": port}})
    src.wait_drained(process)
    unroutable = sum(where == "unroutable" for where, _ in expected)
    # its Prometheus page (docs/monitoring.md) counts what it did
    page = prometheus_samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    assert sample(page, "ams_republish_messages_total", outcome="republished") == len(expected) - unroutable
    assert sample(page, "ams_republish_messages_total", outcome="unroutable") == unroutable
    assert sample(page, "ams_republish_batches_total") == 4
    assert process.stop() == 0, process.log()

    for topic in (*targets, "unroutable"):
        got = src.received(topic)
        wanted = [i for i, (where, _) in enumerate(expected) if where == topic]
        assert by_source(got) == [src.source_of(i) for i in wanted], f"{topic}: not exactly its messages, in order"
        for i, message in zip(wanted, got, strict=True):
            assert payload(message) == f"payload {i}"
            attributes = dict(message["attributes"])
            error = attributes.pop("republish_error", None)
            assert error == (expected[i][1] or None)
            del attributes["republish_source"]
            assert attributes == messages[i]["attributes"]  # the others unchanged
    log = process.log()
    assert f"totals: {len(expected) - unroutable} republished, {unroutable} unroutable" in log, log
    assert "batch 1: 100 messages: site-" in log, log


# ---------------------------------------------------------------------- 2. JSON field ----
def test_json_field_routing(api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any) -> None:
    src = make_source(api, "site-alpha", "site-beta")
    cases: list[tuple[bytes, str, str]] = [  # data, topic, reason
        (json.dumps({"meta": {"site": "alpha"}, "n": 0}).encode(), "site-alpha", ""),
        (b"plain text, not JSON", "unroutable", "the data is not JSON"),
        (json.dumps({"meta": {"site": "beta"}, "n": 2}).encode(), "site-beta", ""),
        (json.dumps(["alpha"]).encode(), "unroutable", "the data is not a JSON object"),
        (json.dumps({"site": "alpha"}).encode(), "unroutable", "no field 'meta.site' in the data"),
        (b"\x00\xff binary", "unroutable", "the data is not JSON"),
        (json.dumps({"meta": {"site": "alpha"}, "n": 6}).encode(), "site-alpha", ""),
        (json.dumps({"meta": {"site": {"id": 1}}}).encode(), "unroutable", "field 'meta.site' is not a string"),
    ]
    src.publish(
        [{"data": base64.b64encode(data).decode(), "attributes": {"n": str(i)}} for i, (data, _, _) in enumerate(cases)]
    )

    process = republisher(src.config(server, tls_files[2], route={"json_field": "meta.site"}))
    src.wait_drained(process)
    assert process.stop() == 0, process.log()

    for topic in ("site-alpha", "site-beta", "unroutable"):
        got = src.received(topic)
        wanted = [i for i, (_, where, _) in enumerate(cases) if where == topic]
        assert by_source(got) == [src.source_of(i) for i in wanted]
        for i, message in zip(wanted, got, strict=True):
            assert base64.b64decode(message["data"]) == cases[i][0]
            assert cases[i][2] in message["attributes"].get("republish_error", "")
            assert ("republish_error" in message["attributes"]) == (topic == "unroutable")


# ---------------------------------------------------------------------------- 3. crash ----
@pytest.mark.slow
def test_sigkill_mid_stream_loses_nothing_and_duplicates_at_most_a_batch(
    api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any
) -> None:
    targets = [f"site-{s}" for s in SITES]
    src = make_source(api, *targets, ack_deadline=10)  # the killed batch comes again after 10 s
    total, batch = 1000, 20
    where = ["unroutable" if i % 50 == 17 else f"site-{SITES[i % 3]}" for i in range(total)]
    src.publish(
        [
            {
                "data": b64(f"m{i}"),
                "attributes": {"n": str(i)} | ({} if where[i] == "unroutable" else {"site": where[i][5:]}),
            }
            for i in range(total)
        ]
    )
    config = src.config(server, tls_files[2], batch=batch)

    first = republisher(config)
    deadline = time.monotonic() + DEADLINE
    while src.offsets()["current"] < 100:
        assert first.proc.poll() is None, first.log()
        assert time.monotonic() < deadline, f"no progress: {src.offsets()}\n{first.log()}"
        time.sleep(0.02)
    first.kill()
    at_kill = src.offsets()["current"]
    assert at_kill < total, "the kill did not land mid-stream"

    second = republisher(config)
    src.wait_drained(second)
    assert second.stop() == 0, second.log()

    copies: Counter[str] = Counter()
    for topic in (*targets, "unroutable"):
        for message in src.received(topic):
            index = int(message["attributes"]["n"])
            assert where[index] == topic, f"message {index} in {topic}, not {where[index]}"
            assert message["attributes"]["republish_source"] == src.source_of(index)
            assert payload(message) == f"m{index}"
            copies[src.source_of(index)] += 1
    missing = [i for i in range(total) if copies[src.source_of(i)] == 0]
    assert missing == [], f"lost: {missing}"
    duplicates = sum(copies.values()) - total
    assert duplicates <= batch, f"{duplicates} duplicates: more than the batch in flight"
    assert max(copies.values()) <= 2


# ---------------------------------------------------------------------- 4. create topics ----
def test_create_topics_creates_a_missing_site_topic(
    api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any, tmp_path: Path
) -> None:
    src = make_source(api, "site-alpha")
    admin = api.new_user(projects=[{"project": src.project, "roles": ["project_admin"]}])
    token_file = tmp_path / "token"
    token_file.write_text(admin["token"] + "\n")
    sites = ["alpha", "fresh", "alpha", "fresh", "fresh"]
    src.publish([{"data": b64(f"m{i}"), "attributes": {"site": s}} for i, s in enumerate(sites)])

    config = src.config(server, tls_files[2], create_topics=True)
    del config["ams"]["token"]
    config["ams"]["token_file"] = str(token_file)
    process = republisher(config)
    src.wait_drained(process)
    assert process.stop() == 0, process.log()
    assert "created topic 'site-fresh'" in process.log()

    api.ok("GET", f"/projects/{src.project}/topics/site-fresh")
    fresh = f"/projects/{src.project}/subscriptions/site-fresh-sub"
    api.ok("PUT", fresh, {"topic": f"projects/{src.project}/topics/site-fresh"})
    api.ok("POST", fresh + ":modifyOffset", {"offset": api.ok("GET", fresh + ":offsets")["min"]})
    assert [payload(m) for m in src.received("site-fresh")] == ["m1", "m3", "m4"]
    assert [payload(m) for m in src.received("site-alpha")] == ["m0", "m2"]
    assert src.received("unroutable") == []


# ------------------------------------------------------------- 5. bad config, SIGTERM ----
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": {"topic": "site-{value}"}}, "target.unroutable_topic is required"),
        (
            {"route": {"attribute": "site", "json_field": "meta.site"}},
            "route: set exactly one of attribute and json_field",
        ),
        (
            {"ams": {"url": "https://127.0.0.1:1", "token": "x", "verify": "/no/such/ca.pem"}},
            "ams.verify: no CA bundle at /no/such/ca.pem",
        ),
        ({"metrics": {"port": 70000}}, "metrics.port must be a TCP port (1-65535)"),
        ({"metrics": {"host": "0.0.0.0"}}, "metrics.port is required with metrics.host"),
    ],
)
def test_a_bad_config_exits_2_and_says_why(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    config = {
        "ams": {"url": "https://127.0.0.1:1", "token": "x"},
        "source": {"project": "ARGO", "subscription": "all"},
        "route": {"attribute": "site"},
        "target": {"unroutable_topic": "unroutable"},
    } | change
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "ams_app", "republish", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert done.returncode == 2, done
    assert f"ams republish: bad configuration: {message}" in done.stderr


def test_sigterm_finishes_the_batch_in_flight_and_exits_0(
    api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any
) -> None:
    src = make_source(api, "site-alpha")
    src.publish([{"data": b64(f"m{i}"), "attributes": {"site": "alpha"}} for i in range(1000)])
    process = republisher(src.config(server, tls_files[2], batch=20))
    process.wait_for_log("batch 1:")
    assert process.stop() == 0, process.log()
    assert "totals:" in process.log()
    # every message it published was acknowledged: no batch was left half done
    acked = src.offsets()["current"]
    got = src.received("site-alpha")
    assert [payload(m) for m in got] == [f"m{i}" for i in range(acked)]


def test_sigterm_while_idle_exits_0(
    api: Api, server: AmsServer, tls_files: tuple[str, str, str], republisher: Any
) -> None:
    src = make_source(api)
    process = republisher(src.config(server, tls_files[2]))
    process.wait_for_log(f"republishing projects/{src.project}/subscriptions/source-sub")
    assert process.stop() == 0, process.log()
    assert "totals: 0 republished, 0 unroutable, 0 batches" in process.log()
