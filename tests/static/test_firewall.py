"""The firewall role (roles/firewall): who may reach which port of a host follows the inventory groups.
The role's ruleset is rendered with Ansible's own templating over the role's defaults and vars, as
test_tool_configs.py renders the other roles' files, for each host of a small inventory, and read back
rule by rule. The role itself runs on this machine for what it does while off (nothing) and for the
preflight's refusals. nft itself checks every host's file where it runs (the role's template
``validate: nft -c -f``), in molecule/multinode's converge."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from tests.static.test_roles import _local_playbook, _run
from tests.static.test_tool_configs import render_role_template

GROUPS = {
    "haproxy": ["lb1"],
    "ams": ["ams1", "ams2"],
    "zookeeper": ["kafka1"],
    "kafka": ["kafka1"],
    "mongodb": ["mongo1"],
    "spark_master": ["spark1"],
    "spark_worker": ["spark2"],
    "monitoring": ["mon1"],
}
ALL_HOSTS = sorted({host for hosts in GROUPS.values() for host in hosts})
#: Each host's default IPv4 address, as its facts give it.
FACTS = {
    "lb1": "10.0.0.10",
    "ams1": "10.0.0.11",
    "ams2": "10.0.0.12",
    "kafka1": "10.0.0.21",
    "mongo1": "10.0.0.31",
    "spark1": "10.0.0.41",
    "spark2": "10.0.0.42",
    "mon1": "10.0.0.51",
}
#: spark2 names its addresses itself (host_vars), one of each family.
SPARK2 = ["10.0.0.142", "2001:db8::42"]
ADMIN = ["192.0.2.7", "2001:db8:ff::/48"]

#: One rule of the input chain: what it matches, the source family and set (none: from anywhere), its name.
RULE = re.compile(
    r"^\s*(?P<match>(?:tcp|udp) dport \S+|meta l4proto \w+)"
    r"(?: (?P<family>ip6?) saddr \{ (?P<sources>[^}]*) \})? accept comment \"(?P<name>[^\"]*)\"$"
)


def hostvars(**overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {
        host: {"ansible_facts": {"default_ipv4": {"address": address}}} for host, address in FACTS.items()
    }
    found["spark2"]["firewall_address"] = SPARK2
    for host, variables in overrides.items():
        found[host] = {**found[host], **variables}
    return found


def ruleset(host: str, groups: dict[str, list[str]] | None = None, **variables: Any) -> str:
    """The role's /etc/nftables.conf for ``host`` of the inventory above (``groups``, ``variables`` win)."""
    groups = GROUPS if groups is None else groups
    names = sorted(group for group, hosts in groups.items() if host in hosts)
    inventory = {
        "inventory_hostname": host,
        "group_names": names,
        "groups": {"all": ALL_HOSTS, "ungrouped": [], **groups},
        "hostvars": hostvars(),
    }
    return render_role_template("firewall", "nftables.conf.j2", **{**inventory, **variables})


def rules(text: str) -> dict[str, dict[str | None, set[str]]]:
    """The accepting rules of a ruleset: each match (``tcp dport 9093``) with its sources by family
    (``ip``, ``ip6``; ``None`` for a rule without a source: open to everyone)."""
    found: dict[str, dict[str | None, set[str]]] = {}
    for line in text.splitlines():
        rule = RULE.match(line)
        if rule:
            sources = {s.strip() for s in (rule["sources"] or "").split(",") if s.strip()}
            found.setdefault(rule["match"], {})[rule["family"]] = sources
    return found


def statements(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_a_brokers_client_port_is_open_to_the_ams_and_spark_hosts_exactly() -> None:
    assert rules(ruleset("kafka1"))["tcp dport 9093"] == {
        "ip": {FACTS["ams1"], FACTS["ams2"], FACTS["spark1"], SPARK2[0]},
        "ip6": {SPARK2[1]},
    }


def test_the_admin_sources_reach_every_port_and_alone_the_monitoring_hosts_own() -> None:
    with_admin = rules(ruleset("mon1", firewall_admin_sources=ADMIN))
    assert with_admin["tcp dport 9090"] == with_admin["tcp dport 9093"] == {"ip": {ADMIN[0]}, "ip6": {ADMIN[1]}}
    assert with_admin["tcp dport 9100"] == {"ip": {FACTS["mon1"], ADMIN[0]}, "ip6": {ADMIN[1]}}
    # without admin sources, nothing may reach Prometheus and Alertmanager but the host itself (loopback)
    alone = rules(ruleset("mon1"))
    assert "tcp dport 9090" not in alone
    assert "tcp dport 9093" not in alone


def test_an_empty_or_missing_source_group_contributes_nothing() -> None:
    groups = {group: hosts for group, hosts in GROUPS.items() if group != "spark_master"}
    groups["spark_worker"] = []
    assert rules(ruleset("kafka1", groups))["tcp dport 9093"] == {"ip": {FACTS["ams1"], FACTS["ams2"]}}


def test_ipv6_addresses_get_ip6_rules_and_ipv4_addresses_ip_rules() -> None:
    for host in ALL_HOSTS:
        for match, families in rules(ruleset(host, firewall_admin_sources=ADMIN)).items():
            assert not {s for s in families.get("ip", set()) if ":" in s}, (host, match)
            assert not {s for s in families.get("ip6", set()) if ":" not in s}, (host, match)
    spark = rules(ruleset("spark1"))["meta l4proto tcp"]
    assert spark == {"ip": {FACTS["spark1"], SPARK2[0]}, "ip6": {SPARK2[1]}}


def test_ports_open_to_any_have_no_source() -> None:
    balancer = rules(ruleset("lb1"))
    assert balancer["tcp dport 443"] == balancer["tcp dport 80"] == balancer["tcp dport 8444"] == {None: set()}
    assert balancer["tcp dport 8405"] == {"ip": {FACTS["mon1"]}}


def test_the_nodes_grpc_port_is_haproxys_and_the_other_nodes() -> None:
    """The Pub/Sub gRPC API: anyone at haproxy's frontend; at a node's port, haproxy and the AMS nodes
    (a node passes a subscription's calls on to its owner's gRPC API); the ports are the production
    inventory's."""
    production = ROOT / "inventories" / "production" / "group_vars"
    node_port = yaml.safe_load((production / "ams.yml").read_text())["ams_grpc_port"]
    frontend_port = yaml.safe_load((production / "haproxy.yml").read_text())["haproxy_grpc_port"]
    nodes = {FACTS[name] for name in FACTS if name.startswith("ams")}
    assert rules(ruleset("ams1"))[f"tcp dport {node_port}"] == {"ip": {FACTS["lb1"], *nodes}}
    assert FACTS["mon1"] not in rules(ruleset("ams1"))[f"tcp dport {node_port}"]["ip"]
    assert rules(ruleset("lb1"))[f"tcp dport {frontend_port}"] == {None: set()}
    assert f"tcp dport {node_port}" not in rules(ruleset("lb1"))


def test_the_workers_own_ports_are_the_other_nodes_and_the_monitoring_hosts() -> None:
    """A process per core (the ams role's ams_workers): the nodes forward to a subscription's owner
    at its worker's own API port and relay gRPC calls to its own gRPC port; the monitoring host
    scrapes each worker at its own API port. The ranges start at the ams role's defaults."""
    ams_defaults = yaml.safe_load((ROOT / "roles" / "ams" / "defaults" / "main.yml").read_text())
    api, grpc = ams_defaults["ams_worker_port_base"], ams_defaults["ams_worker_grpc_port_base"]
    node = rules(ruleset("ams1"))
    nodes = {FACTS[name] for name in FACTS if name.startswith("ams")}
    assert node[f"tcp dport {api}-{api + 99}"] == {"ip": {*nodes, FACTS["mon1"]}}
    assert node[f"tcp dport {grpc}-{grpc + 99}"] == {"ip": nodes}
    assert f"tcp dport {api}-{api + 99}" not in rules(ruleset("lb1"))  # haproxy balances on the shared port


def test_the_policy_is_drop_and_only_the_roles_table_is_replaced() -> None:
    lines = statements(ruleset("ams1"))
    assert "type filter hook input priority 0; policy drop;" in lines
    # the standard idiom: the table made (so that the delete succeeds), deleted, then defined; never a flush
    assert lines[:3] == ["table inet ams_firewall {}", "delete table inet ams_firewall", "table inet ams_firewall {"]
    assert not [line for line in lines if "flush" in line]
    assert [line for line in lines if line.startswith(("table", "delete"))] == lines[:3]
    # only input is filtered: the host's containers (forward) and what it sends (output) are not
    assert [line for line in lines if line.startswith("chain")] == ["chain input {"]


def test_ssh_stays_open_when_an_inventory_replaces_the_list() -> None:
    assert rules(ruleset("ams1", firewall_services=[]))["tcp dport 22"] == {None: set()}
    to_admins = rules(
        ruleset("ams1", firewall_services=[], firewall_ssh_sources=["monitoring"], firewall_ssh_port=2222)
    )
    assert to_admins["tcp dport 2222"] == {"ip": {FACTS["mon1"]}}


def test_an_entry_applies_to_the_members_of_its_group_only() -> None:
    services = [{"group": "mongodb", "port": "27000-27002", "proto": "udp", "from": ["ams"], "name": "extra"}]
    assert rules(ruleset("mongo1", firewall_extra_services=services))["udp dport 27000-27002"] == {
        "ip": {FACTS["ams1"], FACTS["ams2"]}
    }
    assert "udp dport 27000-27002" not in rules(ruleset("ams1", firewall_extra_services=services))


def test_a_hosts_firewall_address_replaces_its_facts() -> None:
    text = render_role_template(
        "firewall",
        "nftables.conf.j2",
        inventory_hostname="kafka1",
        group_names=["kafka", "zookeeper"],
        groups={"all": ALL_HOSTS, **GROUPS},
        hostvars=hostvars(ams1={"firewall_address": "10.1.0.11"}),
    )
    assert rules(text)["tcp dport 9093"]["ip"] == {"10.1.0.11", FACTS["ams2"], FACTS["spark1"], SPARK2[0]}


def test_the_hosts_without_an_address_are_the_ones_the_preflight_names(tmp_path: Path) -> None:
    """A host the rules name with neither firewall_address nor facts (outside a --limit): the role
    gathers its network facts, then refuses to go on without them, naming it."""
    template = tmp_path / "without.j2"
    template.write_text("{{ _firewall_hosts_without_address | to_json }}")
    # an absolute path takes the place of the role's templates/ directory (pathlib's / operator)
    text = render_role_template(
        "firewall",
        str(template),
        inventory_hostname="kafka1",
        group_names=["kafka", "zookeeper"],
        groups={"all": ALL_HOSTS, **GROUPS},
        hostvars=hostvars(mon1={"ansible_facts": {}}, ams2={"ansible_facts": {}, "firewall_address": None}),
    )
    assert yaml.safe_load(text) == ["ams2", "mon1"]


# ------------------------------------------------------------------------ the role on this machine ----
def _play(tmp_path: Path, task: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    play = [{"name": "The firewall role on localhost", "hosts": "localhost", "gather_facts": False, "tasks": [task]}]
    playbook = tmp_path / "firewall.yml"
    playbook.write_text(yaml.safe_dump(play))
    return _run([*_local_playbook(playbook), *extra])


def test_off_the_role_does_nothing(tmp_path: Path) -> None:
    """firewall_enabled false (the default): every task of the role is skipped, the package included;
    only Ansible's check of the role's arguments runs."""
    task = {"name": "Run the firewall role", "ansible.builtin.include_role": {"name": "firewall"}}
    done = _play(tmp_path, task, "--check")
    assert done.returncode == 0, done.stdout[-3000:]
    statuses: dict[str, set[str]] = {}
    current = ""
    for line in done.stdout.splitlines():
        if line.startswith("TASK ["):
            current = line.split("[", 1)[1].split("]", 1)[0]
        elif current and re.match(r"^(ok|changed|skipping|failed|fatal):", line):
            statuses.setdefault(current, set()).add(line.split(":", 1)[0])
    ran = {name for name, seen in statuses.items() if seen != {"skipping"} and "Validating arguments" not in name}
    assert not ran, done.stdout[-3000:]
    assert any("Install the Debian packages" in name for name in statuses), statuses


def _entry(**entry: Any) -> dict[str, Any]:
    return {"firewall_extra_services": [{"group": "ams", "port": 80, "from": "any", "name": "web", **entry}]}


PREFLIGHT_REFUSALS: list[tuple[dict[str, Any], str]] = [
    (_entry(proto="icmp"), "proto must be tcp or udp"),
    (_entry(port=70000), "port must be a port between 1"),
    (_entry(port="90-80"), "port must be a port between 1"),
    (_entry(port="all"), "all may not be open to any"),
    (_entry(**{"from": "everyone"}), "from must be the string any"),
    (_entry(name='say "hi"'), "no quotes"),
    ({"firewall_ssh_sources": "nobody"}, "(for ssh: firewall_ssh_sources): from must be"),
    ({"firewall_admin_sources": ["bastion.example.org"]}, "firewall_admin_sources must be a list of IPv4 or IPv6"),
]


@pytest.mark.parametrize(("variables", "message"), PREFLIGHT_REFUSALS)
def test_the_preflight_refuses_bad_inputs(tmp_path: Path, variables: dict[str, Any], message: str) -> None:
    task = {
        "name": "Run the firewall preflight",
        "ansible.builtin.include_role": {"name": "firewall", "tasks_from": "preflight"},
        "vars": variables,
    }
    done = _play(tmp_path, task, "--skip-tags", "firewall_platform")
    assert done.returncode != 0, done.stdout[-3000:]
    assert message in done.stdout, done.stdout[-3000:]


def test_the_preflight_accepts_the_defaults(tmp_path: Path) -> None:
    task = {
        "name": "Run the firewall preflight",
        "ansible.builtin.include_role": {"name": "firewall", "tasks_from": "preflight"},
        "vars": {"firewall_admin_sources": ADMIN},
    }
    done = _play(tmp_path, task, "--skip-tags", "firewall_platform")
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_multinode_tests_host_is_the_scenarios_admin_source() -> None:
    """molecule/multinode's tests run from the machine's end of the bridge: the inventory lets that
    address in (and only it), so the other probes reach the hosts while the firewall is on."""
    network = yaml.safe_load((ROOT / "molecule" / "multinode" / "vars" / "network.yml").read_text())
    scenario_vars = ROOT / "inventories" / "multinode" / "group_vars" / "all" / "30-multinode.yml"
    scenario = yaml.safe_load(scenario_vars.read_text())
    assert scenario["firewall_admin_sources"] == [network["multinode_bridge_address"]]
