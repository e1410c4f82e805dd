"""Run again, the plays that only this scenario runs change nothing: the host firewall (playbooks/firewall.yml
on every host), the Spark cluster (playbooks/spark.yml, the java and spark roles on a master and two
workers) and the monitoring (playbooks/monitoring_agents.yml on every host, playbooks/monitoring.yml on mon1).

This scenario has no Molecule `idempotence` step: on twelve hosts sharing two cores, site.yml run
again took over 7 minutes, most of it the ZooKeeper, Kafka, MongoDB, AMS and haproxy plays, whose
idempotence the `ams` scenario checks on the same playbook (site.yml on one host, docs/ansible.md).
First in the verify, before any test changes a host.
"""

from __future__ import annotations

import pytest
from multinode import EVERY_HOST, INVENTORY, ROOT, changes_of, report

PLAYBOOKS = ROOT / "playbooks"


# 152 s to 239 s alone; over 300 s (the suite's default limit) with make test beside the scenario,
# as in CI (docs/ansible.md, "CI")
@pytest.mark.timeout(900)
def test_the_firewall_spark_and_monitoring_plays_change_nothing_when_run_again():
    names = ["firewall.yml", "monitoring_agents.yml", "spark.yml", "monitoring.yml"]
    took, changed, output = changes_of(INVENTORY, *(PLAYBOOKS / name for name in names))
    # every host ran something (node exporter at least): the recap names them all
    assert sorted(changed) == EVERY_HOST, (sorted(changed), output[-3000:])
    assert {h: n for h, n in changed.items() if n} == {}, output[-6000:]
    report("idempotence", {"playbooks": names, "seconds": round(took)})
