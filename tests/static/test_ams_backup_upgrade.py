"""The ams role's scheduled backups, its install from a package index and the upgrade's layout check
(roles/ams/README.md), without containers (the Molecule scenarios run them for real):

- the backup units, rendered as the role renders them, pass ``systemd-analyze verify``, and their
  command lines are the ones the README describes; the default calendar passes ``systemd-analyze
  calendar``, as the role checks it on the host;
- by default only the first host of the ``ams`` group backs up (the production inventory);
- pip's source: the wheelhouse alone, or the package index (and its trusted host);
- ``tasks_from: layout`` (playbooks/ams_upgrade.yml, before anything is drained), run on this machine
  against a stand-in ``ams`` for each exit code of ``ams admin layout``: 0 passes, 2 and 1 stop the
  run, 3 stops it unless ``ams_upgrade_allow_layout_change``;
- playbooks/ams_upgrade.yml runs that check once, in a play of its own before the play that drains.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from tests.static.test_roles import _run, _tool
from tests.static.test_tool_configs import render_role_template

DEFAULTS: dict[str, Any] = yaml.safe_load((ROOT / "roles" / "ams" / "defaults" / "main.yml").read_text())
GROUPS = {"all": ["ams1", "ams2"], "ams": ["ams1", "ams2"]}
TIMEOUT = 240


def _systemd_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze not found (the systemd package)")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _units(tmp_path: Path, host: str = "ams1", **variables: Any) -> dict[str, str]:
    """ams-backup.service and .timer for ``host``, with a stand-in ams command under tmp_path (systemd
    checks that the command exists)."""
    ams = tmp_path / "current" / "bin" / "ams"
    ams.parent.mkdir(parents=True, exist_ok=True)
    ams.write_text("#!/bin/sh\n")
    ams.chmod(0o755)
    common = {"inventory_hostname": host, "groups": GROUPS, "ams_install_root": str(tmp_path), **variables}
    return {
        name: render_role_template("ams", f"{name}.j2", **common) for name in ("ams-backup.service", "ams-backup.timer")
    }


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_the_backup_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = _units(tmp_path)
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    done = _systemd_analyze("verify", "--man=no", *(str(tmp_path / name) for name in units))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_backup_service_runs_ams_backup_as_ams_and_copies_its_figures(tmp_path: Path) -> None:
    service = _lines(_units(tmp_path)["ams-backup.service"])
    assert "Type=oneshot" in service
    assert "User=ams" in service
    assert "Group=ams" in service
    assert (
        f"ExecStart={tmp_path}/current/bin/ams backup --config /etc/ams/ams.yml --to /var/backups/ams --keep 7"
        " --metrics-file /var/lib/ams/metrics/ams-backup.prom"
    ) in service
    assert "ReadWritePaths=/var/lib/ams /var/backups/ams /var/lib/ams/metrics" in service
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes"):
        assert hardening in service
    (copy,) = [line for line in service if line.startswith("ExecStopPost=")]
    # as root ("+"), a failure ignored ("-"); a .prom file appears whole (mv) in node exporter's directory
    textfile = "/var/lib/prometheus/node-exporter"
    assert copy.startswith(f"ExecStopPost=-+/bin/sh -c 'if [ -d {textfile} ]")
    assert f"install -m 0644 /var/lib/ams/metrics/ams-backup.prom {textfile}/ams-backup.prom.tmp" in copy
    assert copy.endswith(f"mv -f {textfile}/ams-backup.prom.tmp {textfile}/ams-backup.prom; fi'")
    # systemd would expand them
    assert "$" not in copy
    assert "%" not in copy


@pytest.mark.parametrize(
    ("host", "variables"),
    [("ams2", {}), ("ams1", {"ams_backup_metrics_textfile_directory": ""})],
    ids=["not-the-first-node", "no-textfile-directory"],
)
def test_no_copy_of_the_figures_where_nobody_reads_them(tmp_path: Path, host: str, variables: dict[str, Any]) -> None:
    """A node whose timer is off (a backup by hand there) or without node exporter's directory."""
    service = _units(tmp_path, host, **variables)["ams-backup.service"]
    assert "ExecStopPost" not in service
    assert "ExecStart=" in service


def test_the_backup_timer_fires_at_the_calendar_and_catches_up(tmp_path: Path) -> None:
    timer = _lines(_units(tmp_path, ams_backup_calendar="Mon *-*-* 04:00:00")["ams-backup.timer"])
    assert "OnCalendar=Mon *-*-* 04:00:00" in timer
    assert "Persistent=true" in timer
    assert "Unit=ams-backup.service" in timer
    assert "WantedBy=timers.target" in timer


def test_the_default_calendar_passes_systemd_analyze_calendar() -> None:
    assert DEFAULTS["ams_backup_calendar"] == "*-*-* 02:30:00"
    done = _systemd_analyze("calendar", DEFAULTS["ams_backup_calendar"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_only_the_first_node_of_the_production_inventory_backs_up() -> None:
    """The role's default of ams_backup_enabled, templated for each AMS host of inventories/production."""
    expression = DEFAULTS["ams_backup_enabled"].strip().removeprefix("{{").removesuffix("}}").strip()
    inventory = "inventories/production/hosts.yml"
    vault = ["-e", "@inventories/production/group_vars/all/vault.yml.example"]
    enabled = {}
    for host in ("ams1.example.org", "ams2.example.org", "ams3.example.org"):
        argv = [_tool("ansible"), "-i", inventory, host, "-c", "local", *vault, "-o", "-m", "ansible.builtin.debug"]
        done = _run([*argv, "-a", f"msg={{{{ ({expression}) | to_json }}}}"])
        assert done.returncode == 0, done.stdout + done.stderr
        enabled[host] = json.loads(json.loads(done.stdout.split("=>", 1)[1])["msg"])
    assert enabled == {"ams1.example.org": True, "ams2.example.org": False, "ams3.example.org": False}


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, "--no-index --find-links /opt/ams/wheelhouse"),
        ({"ams_package_index": "https://pypi.example.org/simple"}, "--index-url https://pypi.example.org/simple"),
        (
            {"ams_package_index": "http://pypi.internal/simple", "ams_package_index_trusted_host": "pypi.internal"},
            "--index-url http://pypi.internal/simple --trusted-host pypi.internal",
        ),
    ],
    ids=["wheelhouse", "index", "index-trusted-host"],
)
def test_pip_installs_from_the_wheelhouse_or_the_index(
    tmp_path: Path, variables: dict[str, Any], expected: str
) -> None:
    template = tmp_path / "source.j2"
    template.write_text("{{ _ams_pip_source }}")
    assert render_role_template("ams", str(template), **variables).strip() == expected


# ------------------------------------------------------------------------ the layout check ----
ANSWER = """echo '{"release": "9.9.9", "backend": "kafka", "stores": {"mongodb": {"stored": 1, "known": %d}}}'"""
STAND_IN = """#!/bin/sh
# ams admin layout --config FILE, as the new release answers it
[ "$1 $2 $3" = "admin layout --config" ] && [ "$4" = "{settings}" ] || {{ echo "unexpected: $*" >&2; exit 9; }}
{answer}
echo 'the store says no' >&2
exit {rc}
"""


def _layout_check(tmp_path: Path, rc: int, answer: bool = True, **variables: Any) -> subprocess.CompletedProcess[str]:
    """tasks_from: layout on this machine, the new release 9.9.9 being a stand-in that exits ``rc``
    (without ``answer``, it prints nothing on stdout, as argparse for a command it does not know)."""
    if os.geteuid() != 0:
        pytest.skip("runs runuser, which needs root")
    settings = tmp_path / "etc" / "ams.yml"
    settings.parent.mkdir()
    settings.write_text("backend: kafka\n")
    ams = tmp_path / "opt" / "ams-9.9.9" / "bin" / "ams"
    ams.parent.mkdir(parents=True)
    printed = ANSWER % (2 if rc == 3 else 1) if answer else ""
    ams.write_text(STAND_IN.format(settings=settings, answer=printed, rc=rc))
    ams.chmod(0o755)
    task = {
        "name": "The layout check of playbooks/ams_upgrade.yml",
        "ansible.builtin.include_role": {"name": "ams", "tasks_from": "layout"},
        "vars": {
            "ams_install_root": str(tmp_path / "opt"),
            "ams_config_dir": str(tmp_path / "etc"),
            "ams_user": "root",
            "__ams_version": "9.9.9",
        },
    }
    playbook = tmp_path / "layout.yml"
    playbook.write_text(yaml.safe_dump([{"name": "Layout only", "hosts": "localhost", "tasks": [task]}]))
    local = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]
    extra = [arg for name, value in variables.items() for arg in ("-e", f"{name}={value}")]
    return _run([_tool("ansible-playbook"), *local, *extra, str(playbook)])


def test_the_same_layout_lets_the_upgrade_go_on(tmp_path: Path) -> None:
    done = _layout_check(tmp_path, 0)
    assert done.returncode == 0, done.stdout[-3000:]
    assert '\\"known\\": 1' in done.stdout or '"known": 1' in done.stdout, done.stdout[-3000:]  # the JSON shown


@pytest.mark.parametrize(
    ("rc", "message"),
    [
        (3, "would change the stored data's layout"),
        (2, "newer than release 9.9.9 knows"),
        (1, "could not read the stored data's layout"),
        (9, "ended with exit code 9"),
    ],
    ids=["layout-change", "downgrade", "store-unreachable", "unknown"],
)
def test_the_upgrade_stops_before_draining(tmp_path: Path, rc: int, message: str) -> None:
    done = _layout_check(tmp_path, rc)
    assert done.returncode != 0, done.stdout[-3000:]
    assert message in done.stdout, done.stdout[-3000:]
    if rc == 3:
        assert "ams_upgrade_allow_layout_change=true" in done.stdout
        assert 'docs/production.md, \\"Upgrading\\"' in done.stdout or 'docs/production.md, "Upgrading"' in done.stdout


def test_a_release_without_the_layout_command_is_not_taken_for_a_downgrade(tmp_path: Path) -> None:
    done = _layout_check(tmp_path, 2, answer=False)
    assert done.returncode != 0, done.stdout[-3000:]
    assert "has no `ams admin layout`" in done.stdout, done.stdout[-3000:]
    assert "--skip-tags ams_upgrade_layout_check" in done.stdout
    assert "newer than release" not in done.stdout


def test_a_layout_change_goes_on_when_allowed(tmp_path: Path) -> None:
    done = _layout_check(tmp_path, 3, ams_upgrade_allow_layout_change="true")
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_downgrade_is_refused_even_when_a_layout_change_is_allowed(tmp_path: Path) -> None:
    done = _layout_check(tmp_path, 2, ams_upgrade_allow_layout_change="true")
    assert done.returncode != 0, done.stdout[-3000:]
    assert "newer than release 9.9.9 knows" in done.stdout


def test_the_upgrade_playbook_checks_once_before_the_play_that_drains() -> None:
    check, upgrade = yaml.safe_load((ROOT / "playbooks" / "ams_upgrade.yml").read_text())
    assert check["hosts"] == upgrade["hosts"] == "ams"
    assert check["any_errors_fatal"] is True
    includes = [task["ansible.builtin.include_role"] for task in check["tasks"]]
    assert includes == [{"name": "ams", "tasks_from": "venv"}, {"name": "ams", "tasks_from": "layout"}]
    # the new release goes into its virtualenv on every node at once (no node is drained for it);
    # the first asks it about the stored data
    assert [task.get("run_once", False) for task in check["tasks"]] == [False, True]
    assert all(task.get("tags") == ["ams_upgrade_layout_check"] for task in check["tasks"])
    assert upgrade["serial"] == 1
    assert upgrade["pre_tasks"][0]["vars"]["haproxy_server_state"] == "drain"
