"""Fast repository-wide checks of the Ansible side (docs/ansible.md); no containers, no network.

- every role's ``defaults/main.yml`` mirrors ``meta/argument_specs.yml`` (keys, and values = spec defaults);
- yamllint and ansible-lint (production profile, ``.ansible-lint``) are clean over the repository;
- every playbook (``playbooks/*.yml`` and each Molecule ``converge.yml``) passes ``--syntax-check``;
- every inventory parses with ``ansible-inventory``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())
PLAYBOOKS = sorted(
    str(p.relative_to(ROOT))
    for p in [*(ROOT / "playbooks").glob("*.yml"), *(ROOT / "molecule").glob("*/converge.yml")]
    if p.is_file()
)
INVENTORIES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "inventories").glob("*/hosts.yml"))
#: The toolchain pinned in requirements-dev.txt, next to the interpreter running the tests.
VENV_BIN = Path(sys.executable).parent
ROLE_FILES = ("README.md", "defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml", "tasks/main.yml")
TOOL_TIMEOUT = 240


def _load(path: Path) -> Any:
    with path.open() as stream:
        return yaml.safe_load(stream)


def _tool(name: str) -> str:
    path = VENV_BIN / name
    if not path.exists():
        pytest.fail(f"{name} is not installed next to {sys.executable}: make venv (requirements-dev.txt)")
    return str(path)


def _run(argv: list[str], timeout: float = TOOL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a tool from the repository root with the venv first on PATH (ansible-lint calls ansible-*)."""
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "NO_COLOR": "1",
    }
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _spec_options(role: str) -> dict[str, dict[str, Any]]:
    spec = _load(ROOT / "roles" / role / "meta" / "argument_specs.yml")
    options = spec["argument_specs"]["main"].get("options") or {}
    assert isinstance(options, dict), f"{role}: argument_specs main.options is not a mapping"
    return options


def _defaults(role: str) -> dict[str, Any]:
    defaults = _load(ROOT / "roles" / role / "defaults" / "main.yml") or {}
    assert isinstance(defaults, dict), f"{role}: defaults/main.yml is not a mapping"
    return defaults


def test_there_are_roles_and_playbooks() -> None:
    assert ROLES, "no role under roles/"
    assert PLAYBOOKS, "no playbook under playbooks/ and no molecule/*/converge.yml"


@pytest.mark.parametrize("role", ROLES)
def test_role_has_the_standard_files(role: str) -> None:
    missing = [f for f in ROLE_FILES if not (ROOT / "roles" / role / f).is_file()]
    assert not missing, f"roles/{role} lacks {missing}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_keys_equal_argument_spec_options(role: str) -> None:
    options = _spec_options(role)
    optional = {name for name, option in options.items() if not option.get("required", False)}
    defaults = set(_defaults(role))
    assert defaults == optional, (
        f"roles/{role}: only in defaults/main.yml: {sorted(defaults - optional)}; "
        f"only in meta/argument_specs.yml: {sorted(optional - defaults)}"
    )


@pytest.mark.parametrize("role", ROLES)
def test_defaults_values_equal_argument_spec_defaults(role: str) -> None:
    options = _spec_options(role)
    differing = {
        name: {"defaults/main.yml": value, "argument_specs.yml": options[name].get("default")}
        for name, value in _defaults(role).items()
        if name in options and options[name].get("default") != value
    }
    assert not differing, f"roles/{role}: {differing}"


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_options_are_documented_and_typed(role: str) -> None:
    for name, option in _spec_options(role).items():
        assert name.startswith(f"{role}_"), f"roles/{role}: {name} lacks the {role}_ prefix"
        assert option.get("description"), f"roles/{role}: {name} has no description"
        assert option.get("type"), f"roles/{role}: {name} has no type"
        if option.get("type") == "list":
            assert option.get("elements"), f"roles/{role}: list {name} has no elements"
        if option.get("required", False):
            assert "default" not in option, f"roles/{role}: required {name} also has a default"


def test_yamllint_is_clean() -> None:
    done = _run([_tool("yamllint"), "--strict", "--format", "parsable", "."])
    assert done.returncode == 0, done.stdout + done.stderr


# 60 s alone, 159 s with the multinode scenario beside the suite (CI: docs/ansible.md, "CI")
@pytest.mark.timeout(720)
def test_ansible_lint_is_clean() -> None:
    done = _run([_tool("ansible-lint"), "--nocolor"], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str) -> None:
    done = _run([_tool("ansible-playbook"), "--syntax-check", playbook])
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_inventory_parses(inventory: str) -> None:
    done = _run([_tool("ansible-inventory"), "-i", inventory, "--list"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "_meta" in done.stdout


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_site_playbook_syntax_on_each_inventory(inventory: str) -> None:
    done = _run([_tool("ansible-playbook"), "--syntax-check", "-i", inventory, "playbooks/site.yml"])
    assert done.returncode == 0, done.stdout + done.stderr


def _templated(inventory: str, host: str, expression: str, extra: list[str]) -> Any:
    """``expression`` templated with ``host``'s variables from ``inventory`` (no connection is made)."""
    argv = [_tool("ansible"), "-i", inventory, host, "-c", "local", *extra, "-o", "-m", "ansible.builtin.debug"]
    done = _run([*argv, "-a", f"msg={{{{ {expression} | to_json }}}}"])
    assert done.returncode == 0, done.stdout + done.stderr
    # host | SUCCESS => {"changed": false, "msg": "<json>"}
    result = json.loads(done.stdout.split("=>", 1)[1])
    return json.loads(result["msg"])


def test_production_inventory_computes_the_topology() -> None:
    """The cross-role values of inventories/production, templated with the example vault."""
    inventory = "inventories/production/hosts.yml"
    vault = ["-e", "@inventories/production/group_vars/all/vault.yml.example"]
    servers = _templated(inventory, "lb1.example.org", "haproxy_backend_servers", vault)
    assert servers == [
        {"name": f"ams{i}.example.org", "address": f"10.0.0.1{i}", "port": 8080, "grpc_port": 8085} for i in (1, 2, 3)
    ]
    # every internal link secured (docs/production.md, "Security"): Kafka's SASL_SSL listener,
    # ZooKeeper's secure port, TLS to the metadata store with the internal CA the nodes hold
    assert _templated(inventory, "ams2.example.org", "ams_kafka_bootstrap_servers", vault) == (
        "10.0.0.21:9093,10.0.0.22:9093,10.0.0.23:9093"
    )
    assert _templated(inventory, "kafka1.example.org", "kafka_zookeeper_connect", vault) == (
        "10.0.0.21:2182,10.0.0.22:2182,10.0.0.23:2182/kafka"
    )
    uri = _templated(inventory, "ams1.example.org", "ams_mongo_uri", vault)
    assert uri == (
        "mongodb://ams:CHANGE-ME@mongo1.example.org:27017/?replicaSet=rs0&authSource=argo_msg"
        "&tls=true&tlsCAFile=/etc/ams/tls/internal-ca.pem"
    )
    assert _templated(inventory, "ams1.example.org", "ams_service_token", vault) == "CHANGE-ME-openssl-rand-hex-32"
    assert _templated(inventory, "ams1.example.org", "ams_kafka_security_protocol", vault) == "SASL_SSL"
    assert _templated(inventory, "ams1.example.org", "ams_zookeeper_tls_certificate_src", vault).endswith(
        "inventories/production/pki/hosts/ams1.example.org/ams.pem"
    )
    # the Spark master drives the jobs against the same Kafka and metadata store as the AMS nodes,
    # with the internal CA where the spark role puts it, as the read-only user spark
    spark_uri = _templated(inventory, "spark1.example.org", "spark_jobs_mongo_uri", vault)
    assert spark_uri == uri.replace("/etc/ams/tls/internal-ca.pem", "/etc/spark/internal-ca.pem")
    assert _templated(inventory, "spark1.example.org", "spark_jobs_kafka_bootstrap_servers", vault) == (
        "10.0.0.21:9093,10.0.0.22:9093,10.0.0.23:9093"
    )
    assert _templated(inventory, "spark1.example.org", "spark_jobs_kafka_sasl_username", vault) == "spark"
    assert _templated(inventory, "spark1.example.org", "spark_jobs_enabled", vault) is True


def test_production_inventory_wires_the_monitoring_host(tmp_path: Path) -> None:
    """With a monitoring group, the brokers and ZooKeeper servers load the JMX exporter agent that
    playbooks/monitoring_agents.yml installs, on the ports the prometheus role scrapes; haproxy's
    exporter and the push workers' pages listen where the monitoring host reaches them. Without the
    group (the same group_vars, the group removed), the JVMs get no agent."""
    inventory = "inventories/production/hosts.yml"
    vault = ["-e", "@inventories/production/group_vars/all/vault.yml.example"]
    agents = _templated(inventory, "kafka1.example.org", "(kafka_java_agents + zookeeper_java_agents)", vault)
    assert agents == [
        "/opt/prometheus-jmx-exporter/jmx_prometheus_javaagent.jar=7071:/etc/prometheus-jmx-exporter/kafka.yml",
        "/opt/prometheus-jmx-exporter/jmx_prometheus_javaagent.jar=7000:/etc/prometheus-jmx-exporter/zookeeper.yml",
    ]
    role_defaults = yaml.safe_load((ROOT / "roles" / "prometheus" / "defaults" / "main.yml").read_text())
    ports = (role_defaults["prometheus_kafka_jmx_exporter_port"], role_defaults["prometheus_zookeeper_metrics_port"])
    assert ports == (7071, 7000)
    assert _templated(inventory, "lb1.example.org", "haproxy_prometheus_address", vault) == "10.0.0.10"
    assert _templated(inventory, "ams1.example.org", "ams_push_worker_metrics_port", vault) == 9108
    mon = "mon1.example.org"
    assert _templated(inventory, mon, "prometheus_push_worker_port", vault) == 9108
    # a process per core: the monitoring host scrapes each of a node's workers at its own port
    assert _templated(inventory, "ams1.example.org", "prometheus_ams_workers", vault) == 4
    assert _templated(inventory, mon, "hostvars['ams2.example.org'].prometheus_ams_workers | int", vault) == 4
    assert _templated(inventory, mon, "prometheus_ams_token", vault) == "CHANGE-ME-a-metrics_viewer-token"
    jar = _templated(inventory, "kafka1.example.org", "prometheus_jmx_exporter_jar_src", vault)
    assert jar.endswith("/.cache/artifacts/jmx-exporter/jmx_prometheus_javaagent-1.0.1.jar")

    without = tmp_path / "production"
    shutil.copytree(ROOT / "inventories" / "production", without, symlinks=True)
    hosts = yaml.safe_load((without / "hosts.yml").read_text())
    del hosts["all"]["children"]["monitoring"]
    (without / "hosts.yml").write_text(yaml.safe_dump(hosts))
    bare = _templated(
        str(without / "hosts.yml"), "kafka1.example.org", "(kafka_java_agents + zookeeper_java_agents)", vault
    )
    assert bare == []


def test_multinode_inventory_passes_authn_through_to_every_node() -> None:
    """haproxy's AuthN passthrough lists every AMS node's ams authn (molecule/multinode)."""
    servers = _templated("inventories/multinode/hosts.yml", "lb1", "haproxy_authn_servers", [])
    assert servers == [{"name": f"ams{i}", "address": f"ams{i}", "port": 8443} for i in (1, 2, 3)]
    assert _templated("inventories/multinode/hosts.yml", "ams1", "ams_authn_hosts", []) == ["lb1", "172.31.213.10"]


def _local_playbook(playbook: Path) -> list[str]:
    """ansible-playbook on this machine, with the interpreter running the tests; the platform check is
    skipped (this machine need not run systemd)."""
    local = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    return [_tool("ansible-playbook"), *local, "--skip-tags", "ams_platform", str(playbook)]


PREFLIGHT_REFUSALS: list[tuple[dict[str, Any], str]] = [
    # ams_consume_owner (on by default) would be refused too, with the message of its own case below
    ({"ams_backend": "kafka", "ams_consume_owner": False}, "backend kafka needs"),
    ({"ams_service_token": "short"}, "at least 8 characters"),
    ({"ams_push_worker_service": True}, "ams_push_worker_service needs backend kafka"),
    ({"ams_republishers": [{"name": "a.b", "config": {}}]}, "unique name of letters"),
    ({"ams_wheelhouse_src": "/nonexistent/wheels.tar"}, "must be a .tar of wheels on the controller"),
    (
        {"ams_backend": "kafka", "ams_kafka_bootstrap_servers": "k:9092", "ams_push_enabled": False},
        "ams_consume_owner needs ams_zookeeper_hosts on backend kafka (or ams_consume_owner false)",
    ),
    ({"ams_authn_enabled": True}, "ams_authn_enabled needs ams_authn_tls_certificate_src"),
    (
        {
            "ams_authn_enabled": True,
            "ams_authn_tls_certificate_src": "c.pem",
            "ams_authn_tls_key_src": "k.pem",
            "ams_authn_ca_dir": "/etc/grid-security/certificates",
            "ams_authn_port": 8080,
        },
        "a TCP port other than the API's",
    ),
    ({"ams_grpc_port": 8080}, "ams_grpc_port must be 0 (no gRPC listener) or a TCP port"),
    ({"ams_workers": 2}, "ams_workers must be 1 on backend embedded, which is one process"),
    ({"ams_settings_extra": {"grpc_emulator_user": "admin"}}, "ams_settings_extra sets grpc_emulator_user"),
    ({"ams_package_index": "https://pypi.example.org/simple"}, "ams_package_index needs ams_version"),
    ({"ams_package_index": "pypi.example.org", "ams_version": "1.0.0"}, "ams_package_index, when set, must be an"),
    ({"ams_backup_keep": 0}, "ams_backup_keep must be at least 1"),
    ({"ams_backup_dir": "/var/backups/my ams"}, "ams_backup_dir must be an absolute path"),
    ({"ams_backup_metrics_output": "/var/lib/ams/metrics/backup.txt"}, "ams_backup_metrics_output must be an absolute"),
]


@pytest.mark.parametrize(("variables", "message"), PREFLIGHT_REFUSALS)
def test_ams_preflight_refuses_bad_inputs(tmp_path: Path, variables: dict[str, Any], message: str) -> None:
    """The ams role's preflight, run alone on localhost (nothing is installed), stops with its message."""
    wheelhouse = tmp_path / "ams-wheelhouse.tar"
    wheelhouse.write_bytes(b"")
    play = [
        {
            "name": "Preflight only",
            "hosts": "localhost",
            "gather_facts": True,
            "tasks": [
                {
                    "name": "Run the ams preflight",
                    "ansible.builtin.include_role": {"name": "ams", "tasks_from": "preflight"},
                    "vars": {"ams_wheelhouse_src": str(wheelhouse), "ams_service_token": "0123456789", **variables},
                }
            ],
        }
    ]
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump(play))
    done = _run(_local_playbook(playbook))
    assert done.returncode != 0, done.stdout
    assert message in done.stdout, done.stdout[-3000:]
    others = [m for _, m in PREFLIGHT_REFUSALS if m != message]
    assert not [m for m in others if m in done.stdout], done.stdout[-3000:]  # only what failed is named


PREFLIGHT_ACCEPTS: dict[str, dict[str, Any]] = {
    "test-inventory": {
        "ams_backend": "kafka",
        "ams_zookeeper_hosts": "127.0.0.1:2181",
        "ams_push_worker": "external",
        "ams_push_worker_service": True,
        "ams_republishers": [{"name": "sites", "config": {"ams": {"url": "http://x"}}}],
    },
    # the role's defaults: backend embedded, where ams_consume_owner (on by default) does not apply
    "embedded-defaults": {},
    # the production inventory's ports: the API, the Pub/Sub gRPC API, the push worker's page
    "grpc-beside-the-other-ports": {"ams_grpc_port": 8085, "ams_push_worker_metrics_port": 9108},
    # a process per core on backend kafka: the vCPUs by default, or a count
    "workers": {"ams_backend": "kafka", "ams_zookeeper_hosts": "127.0.0.1:2181", "ams_workers": 4},
    # from a package index: no wheelhouse on the controller
    "package-index": {
        "ams_package_index": "https://pypi.example.org/simple",
        "ams_version": "1.0.0",
        "ams_wheelhouse_src": "/nonexistent/ams-wheelhouse.tar",
    },
    # the backups' figures not copied for node exporter
    "no-textfile-copy": {"ams_backup_metrics_textfile_directory": "", "ams_backup_keep": 1},
    # backend kafka without ZooKeeper: only with the owners and push delivery turned off
    "kafka-without-zookeeper": {
        "ams_backend": "kafka",
        "ams_kafka_bootstrap_servers": "k:9092",
        "ams_push_enabled": False,
        "ams_consume_owner": False,
    },
}


@pytest.mark.parametrize("variables", list(PREFLIGHT_ACCEPTS.values()), ids=list(PREFLIGHT_ACCEPTS))
def test_ams_preflight_accepts_good_inputs(tmp_path: Path, variables: dict[str, Any]) -> None:
    wheelhouse = tmp_path / "ams-wheelhouse.tar"
    wheelhouse.write_bytes(b"")
    task = {
        "name": "Run the ams preflight",
        "ansible.builtin.include_role": {"name": "ams", "tasks_from": "preflight"},
        "vars": {"ams_wheelhouse_src": str(wheelhouse), "ams_service_token": "0123456789", **variables},
    }
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Preflight only", "hosts": "localhost", "tasks": [task]}]))
    done = _run(_local_playbook(playbook))
    assert done.returncode == 0, done.stdout[-3000:]


@pytest.mark.parametrize(
    ("families", "refused"),
    [
        (["NoSuchFamily"], "The demo role supports NoSuchFamily;"),
        # whatever family this machine is of (the project builds on Debian)
        (["Debian", "RedHat", "Suse", "Archlinux", "Alpine", "Darwin"], None),
    ],
)
def test_the_common_platform_check(tmp_path: Path, families: list[str], refused: str | None) -> None:
    """roles/common, as every role imports it: an unsupported OS family is refused with a message
    naming the role and the system; the host's own family passes, and the facts the roles read
    later are gathered. Without the systemd condition: this machine need not run systemd (the
    Molecule scenarios check the roles with it)."""
    local = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    play = {
        "name": "The platform check alone",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Import roles/common",
                "ansible.builtin.import_role": {"name": "common"},
                "vars": {
                    "common_role": "demo",
                    "common_supported_os_families": families,
                    "common_require_systemd": False,
                },
            },
            {
                "name": "Show the facts the roles read",
                "ansible.builtin.debug": {
                    "msg": "release={{ ansible_facts['distribution_release'] }} "
                    "python={{ ansible_facts['python'] is defined }}"
                },
            },
        ],
    }
    playbook = tmp_path / "platform.yml"
    playbook.write_text(yaml.safe_dump([play]))
    done = _run([_tool("ansible-playbook"), *local, str(playbook)])
    if refused is not None:
        assert done.returncode != 0
        assert refused in done.stdout, done.stdout[-3000:]
    else:
        assert done.returncode == 0, done.stdout[-3000:]
        assert "python=True" in done.stdout


@pytest.mark.parametrize(
    ("checksum", "refused"),
    [
        ("sha512:{sha512}", False),
        ("{sha256}", False),  # a bare digest is SHA-256 (the FerretDB binary's form)
        ("sha256:{sha256}", False),
        ("sha512:{sha256}", True),
        ("sha256:" + "0" * 64, True),
    ],
)
def test_the_common_checksum_check(tmp_path: Path, checksum: str, refused: bool) -> None:
    """roles/common's checksum entry point, as the kafka and mongodb roles import it before they
    copy a file from the controller: a file whose digest is not the expected one is refused, with a
    message naming the variable; the expected one passes, with or without the algorithm."""
    artifact = tmp_path / "artifact.bin"
    artifact.write_bytes(b"an artifact of the controller\n" * 100)
    digests = {name: hashlib.new(name, artifact.read_bytes()).hexdigest() for name in ("sha256", "sha512")}
    play = {
        "name": "The checksum check alone",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [
            {
                "name": "Import roles/common, tasks_from checksum",
                "ansible.builtin.import_role": {"name": "common", "tasks_from": "checksum"},
                "vars": {
                    "common_checksum_file": str(artifact),
                    "common_checksum": checksum.format(**digests),
                    "common_checksum_variable": "demo_archive_checksum",
                },
            },
        ],
    }
    playbook = tmp_path / "checksum.yml"
    playbook.write_text(yaml.safe_dump([play]))
    local = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    done = _run([_tool("ansible-playbook"), *local, str(playbook)])
    if refused:
        assert done.returncode != 0
        assert "not demo_archive_checksum" in done.stdout, done.stdout[-3000:]
        assert "refusing to install it" in done.stdout
    else:
        assert done.returncode == 0, done.stdout[-3000:]


HAPROXY_NODES = [{"name": f"ams{i}", "address": f"10.0.0.1{i}", "port": 8080, "grpc_port": 8085} for i in (1, 2)]


@pytest.mark.parametrize(
    ("variables", "refused"),
    [
        ({"haproxy_grpc_enabled": True}, None),
        ({"haproxy_grpc_enabled": False, "haproxy_backend_servers": [{**HAPROXY_NODES[0], "grpc_port": 0}]}, None),
        (
            {"haproxy_grpc_enabled": True, "haproxy_backend_servers": [{**HAPROXY_NODES[0], "grpc_port": 0}]},
            "haproxy_grpc_enabled needs at least one entry of haproxy_backend_servers with a grpc_port",
        ),
        ({"haproxy_grpc_enabled": True, "haproxy_grpc_port": 443}, "must be distinct ports"),
        ({"haproxy_grpc_enabled": True, "haproxy_grpc_timeout": "20 minutes"}, "Durations must be haproxy durations"),
    ],
)
def test_haproxy_preflight_checks_the_grpc_frontend(
    tmp_path: Path, variables: dict[str, Any], refused: str | None
) -> None:
    """The haproxy role's preflight, run alone on localhost: the gRPC frontend needs a node with a
    grpc_port, a port of its own and an haproxy duration."""
    task = {
        "name": "Run the haproxy preflight",
        "ansible.builtin.include_role": {"name": "haproxy", "tasks_from": "preflight"},
        "vars": {
            "haproxy_backend_servers": HAPROXY_NODES,
            "haproxy_tls_certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
            "haproxy_tls_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
            **variables,
        },
    }
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Preflight only", "hosts": "localhost", "tasks": [task]}]))
    command = [arg if arg != "ams_platform" else "haproxy_platform" for arg in _local_playbook(playbook)]
    done = _run(command)
    if refused is None:
        assert done.returncode == 0, done.stdout[-3000:]
    else:
        assert done.returncode != 0, done.stdout[-3000:]
        assert refused in done.stdout, done.stdout[-3000:]
