"""A rolling upgrade with a real version change, last because it changes what the nodes run.

The scenario converged version A (``ams-wheelhouse.tar``); with a client publishing and pulling
through haproxy the whole time, playbooks/ams_upgrade.yml installs version B
(``ams-wheelhouse-upgrade.tar``: A with the local version ``+upgrade``, tools/artifacts.py) one node
at a time, each drained in haproxy first. Not one request fails, every message is pulled, and each
node's own address reports B."""

from __future__ import annotations

import os
import re
import tarfile
import time

import pytest
from multinode import (
    GROUPS,
    INVENTORY,
    PROJECT,
    ROOT,
    Api,
    Traffic,
    check_nothing_lost,
    haproxy_servers,
    node_url,
    report,
    run_playbook,
    unique,
    wait_until,
)

NODES = GROUPS["ams"]
UPGRADE_TAR = ROOT / ".cache" / "artifacts" / "ams-wheelhouse-upgrade.tar"


def version_in(tar_path: os.PathLike[str]) -> str:
    with tarfile.open(tar_path) as tar:
        (version,) = [m.group(1) for n in tar.getnames() if (m := re.match(r"ams_app-([^-]+)-", n))]
    return version


@pytest.fixture(scope="module")
def api() -> Api:
    client = Api()
    client.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    return client


def release(node: str) -> str:
    return str(Api(node_url(node)).call("GET", "/version")["release"])


@pytest.mark.timeout(1800)
def test_rolling_upgrade_to_a_new_version_fails_no_request(api):
    version_a = version_in(ROOT / ".cache" / "artifacts" / "ams-wheelhouse.tar")
    version_b = version_in(UPGRADE_TAR)
    assert version_a != version_b
    assert {node: release(node) for node in NODES} == dict.fromkeys(NODES, version_a)
    wait_until(lambda: haproxy_servers() == dict.fromkeys(NODES, "UP"), "all AMS nodes UP in haproxy")

    topic, live, audit = unique("ut"), unique("ul"), unique("ua")
    api.topic(topic)
    api.subscription(live, topic)
    api.subscription(audit, topic, ack_deadline=600)
    with Traffic(api, topic, live) as traffic:
        time.sleep(3)
        took = run_playbook(
            INVENTORY, ROOT / "playbooks" / "ams_upgrade.yml",
            f"ams_wheelhouse_src={UPGRADE_TAR}", f"ams_version={version_b}",
        )  # fmt: skip
        time.sleep(3)

    summary = traffic.summary()
    assert traffic.failures == [], summary
    outcome = check_nothing_lost(api, traffic, live, audit)
    assert {node: release(node) for node in NODES} == dict.fromkeys(NODES, version_b)
    report(
        "rolling_upgrade",
        {**summary, "from": version_a, "to": version_b, "playbook_s": round(took, 1), **outcome},
    )
