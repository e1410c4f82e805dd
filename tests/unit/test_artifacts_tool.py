"""tools/artifacts.py and tools/molecule_run.py: the pure parts (the builds run in `make molecule`)."""

from __future__ import annotations

import gzip
import io
import signal
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, load_tool

artifacts = load_tool("artifacts")
molecule_run = load_tool("molecule_run")
toolkit = load_tool("toolkit")


def _jars(tmp_path: Path) -> list[Path]:
    jars = []
    for name, body in [("kafka_2.13-3.9.1.jar", b"broker"), ("a-client.jar", b"client")]:
        jar = tmp_path / name
        jar.write_bytes(body)
        jars.append(jar)
    return jars


def test_kafka_archive_has_the_release_layout(tmp_path: Path) -> None:
    data = artifacts.kafka_archive_bytes(_jars(tmp_path), name="kafka_2.13-3.9.1")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert list(members) == [
            "kafka_2.13-3.9.1",
            "kafka_2.13-3.9.1/libs",
            "kafka_2.13-3.9.1/libs/a-client.jar",
            "kafka_2.13-3.9.1/libs/kafka_2.13-3.9.1.jar",
        ]
        jar = tar.extractfile("kafka_2.13-3.9.1/libs/kafka_2.13-3.9.1.jar")
        assert jar is not None
        assert jar.read() == b"broker"
        assert {m.uid for m in members.values()} == {0}


def test_kafka_archive_is_reproducible(tmp_path: Path) -> None:
    jars = _jars(tmp_path)
    first = artifacts.kafka_archive_bytes(jars)
    for jar in jars:  # other times on disk, another order
        jar.touch()
    assert artifacts.kafka_archive_bytes(list(reversed(jars))) == first
    assert gzip.decompress(first)  # a real gzip stream


def test_wheelhouse_tar_is_flat_and_reproducible(tmp_path: Path) -> None:
    wheels = []
    for name in ["b-1.0-py3-none-any.whl", "ams_app-0.1.0-py3-none-any.whl"]:
        wheel = tmp_path / name
        wheel.write_bytes(name.encode())
        wheels.append(wheel)
    data = artifacts.wheelhouse_tar_bytes(wheels)
    assert data == artifacts.wheelhouse_tar_bytes(list(reversed(wheels)))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["ams_app-0.1.0-py3-none-any.whl", "b-1.0-py3-none-any.whl"]


def test_molecule_runs_the_longest_scenarios_first() -> None:
    durations = {"java": 60.0, "ams": 400.0, "kafka": 150.0}
    assert molecule_run.longest_first(["java", "kafka", "spark", "ams", "haproxy"], durations) == [
        "haproxy",
        "spark",
        "ams",
        "kafka",
        "java",
    ]


def _scenario_with_a_child() -> tuple[subprocess.Popen[bytes], int]:
    """A stand-in for ``molecule test``: a session leader whose own child (ansible-playbook, pytest)
    would outlive it if only the leader were killed. Returns it and its child's pid."""
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True)
    assert leader.stdout is not None
    return leader, int(leader.stdout.readline())


def test_a_scenario_that_ends_is_waited_for() -> None:
    done = subprocess.Popen(["sh", "-c", "exit 3"], start_new_session=True)
    assert molecule_run.wait_or_stop(done, 60, threading.Event()) == "exited"
    assert done.returncode == 3


def test_a_scenario_past_its_limit_is_killed_with_its_children() -> None:
    leader, child = _scenario_with_a_child()
    with leader:
        assert molecule_run.wait_or_stop(leader, 0.3, threading.Event()) == "timeout"
    assert leader.returncode == -signal.SIGKILL
    assert toolkit.wait_gone(child, "sleep 60", 5.0)


def test_a_stop_kills_a_running_scenario_with_its_children() -> None:
    """What SIGTERM to molecule_run does (.ci/run stops the background multinode so when make test fails)."""
    leader, child = _scenario_with_a_child()
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    with leader:
        assert molecule_run.wait_or_stop(leader, 600, stop) == "stopped"
    assert time.monotonic() - started < 10
    assert leader.returncode == -signal.SIGKILL
    assert toolkit.wait_gone(child, "sleep 60", 5.0)


def test_except_leaves_scenarios_out_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    """.ci/run runs multinode on its own and then the others with ``--except multinode``."""
    assert molecule_run.main(["ams", "--except", "ams"]) == 0  # nothing left: nothing started
    assert "no scenario left to run" in capsys.readouterr().out
    assert molecule_run.main(["--except", "no-such-scenario"]) == 2
    assert "no-such-scenario" in capsys.readouterr().err


def test_every_role_is_converged_by_a_scenario() -> None:
    """A role has a scenario of its own, or a scenario converges playbooks/site.yml, which applies it
    or a role that imports it (molecule/multinode took over the zookeeper, kafka and spark
    scenarios: docs/ansible.md)."""
    roles = {p.name for p in (ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").is_file()}
    scenarios = set(molecule_run.all_scenarios())
    site_scenarios = {
        name for name in scenarios if "playbooks/site.yml" in (ROOT / "molecule" / name / "converge.yml").read_text()
    }
    assert "multinode" in site_scenarios
    in_site: set[str] = set()
    for playbook in (ROOT / "playbooks").glob("*.yml"):
        if playbook.name != "ams_upgrade.yml":
            for play in yaml.safe_load(playbook.read_text()) or []:
                in_site |= {r["role"] if isinstance(r, dict) else r for r in play.get("roles", [])}
    # a role the others import (roles/common) is converged wherever they are
    for tasks in (ROOT / "roles").glob("*/tasks/*.yml"):
        for task in yaml.safe_load(tasks.read_text()) or []:
            for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                if isinstance(task, dict) and isinstance(task.get(key), dict) and tasks.parts[-3] in in_site:
                    in_site.add(task[key]["name"])
    assert "common" in in_site
    assert roles <= scenarios | in_site, roles - scenarios - in_site


def test_spark_driver_wheels_follow_the_pins_of_requirements() -> None:
    text = "# comment\nFlask==3.1.3\npymongo==4.20.0  # the store\nconfluent-kafka == 2.16.1\nrequests>=2\n"
    assert artifacts.pinned(text, ["pymongo", "Confluent-Kafka"]) == ["pymongo==4.20.0", "confluent-kafka==2.16.1"]
    with pytest.raises(artifacts.ArtifactError, match=r"not pinned in requirements\.txt: requests"):
        artifacts.pinned(text, ["pymongo", "requests"])
    # the real file pins every package the driver needs
    assert len(artifacts.pinned((ROOT / "requirements.txt").read_text(), artifacts.SPARK_DRIVER_PACKAGES)) == 3


def test_upgrade_wheel_version_is_the_project_version_with_a_local_label() -> None:
    text = '[build-system]\nrequires = ["setuptools"]\n\n[project]\nname = "ams-app"\nversion = "0.1.0"\n'
    rewritten, version = artifacts.upgrade_version(text)
    assert version == "0.1.0+upgrade"
    assert 'version = "0.1.0+upgrade"\n' in rewritten
    assert rewritten.replace("0.1.0+upgrade", "0.1.0") == text
    # a second pass does not stack labels, and a [project] without a version is refused
    assert artifacts.upgrade_version(rewritten)[1] == "0.1.0+upgrade"
    with pytest.raises(artifacts.ArtifactError, match="no \\[project\\] version"):
        artifacts.upgrade_version('[tool.x]\nversion = "1"\n[project]\nname = "x"\n')
    # the real pyproject.toml has one
    assert artifacts.upgrade_version((ROOT / "pyproject.toml").read_text())[1].endswith("+upgrade")


def test_a_fresh_clone_starts_the_longest_scenario_first() -> None:
    """Without durations of its own (CI's fresh clone), the expected ones order the run: the
    eleven-host scenario first, so the others run beside it rather than before it."""
    assert set(molecule_run.EXPECTED_SECONDS) == set(molecule_run.all_scenarios())
    assert molecule_run.longest_first(molecule_run.all_scenarios(), molecule_run.EXPECTED_SECONDS)[0] == "multinode"


def test_a_failed_scenario_shows_the_failing_task_not_only_the_destroy_after_it() -> None:
    log = [
        "TASK [kafka : Install] ****",
        "ok: [ams-ams]",
        "TASK [ams : Wait for the API] ****",
        "Thursday 26 November 2026  00:05:50 +0000",
        'fatal: [ams-ams]: FAILED! => {"msg": "Timeout when waiting for 127.0.0.1:8080"}',
        "PLAY RECAP ****",
        *[f"destroy line {i}" for i in range(200)],
        "ERROR    Ansible return code was 2",
    ]
    excerpt = molecule_run.failure_excerpt(log)
    assert excerpt[:3] == log[2:5]  # the task's header, down to its failure
    assert "TASK [kafka : Install] ****" not in excerpt
    assert excerpt[-1] == "ERROR    Ansible return code was 2"
    assert "[...]" in excerpt  # the destroy's lines in between are left out
    retried = ["TASK [x] ****", "FAILED - RETRYING: [h]: x (9 retries left).", "ok: [h]"]
    assert molecule_run.failure_excerpt(retried) == []
    assert len(molecule_run.failure_excerpt([f"fatal: [h{i}]: FAILED!" for i in range(500)], limit=50)) == 50
    stopped = ["tests/test_60.py::test_upgrade ", "", "molecule_run: stopped after 4320s", "PLAY [Destroy]"]
    assert molecule_run.failure_excerpt(stopped) == ["molecule_run: stopped after 4320s", "PLAY [Destroy]"]


@pytest.mark.parametrize(
    ("ok", "stopped", "ci", "destroyed"),
    [
        (True, False, True, False),  # molecule test destroyed the hosts itself
        (False, False, True, True),  # a failed step under CI: nothing left running beside the others
        (False, False, False, False),  # at a desk: left up for a look
        (False, True, False, True),  # stopped at the limit, before its own destroy
    ],
)
def test_molecule_run_destroys_what_molecule_left_behind(ok: bool, stopped: bool, ci: bool, destroyed: bool) -> None:
    assert molecule_run.must_destroy(ok=ok, stopped=stopped, ci=ci) is destroyed


def test_the_run_ends_with_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI system may show only the end of the output: the failing task comes after the other
    scenario's result and the tails, just before the summary."""
    monkeypatch.setattr(molecule_run, "LOGS", tmp_path)
    monkeypatch.setattr(molecule_run, "DURATIONS", tmp_path / "durations.json")
    monkeypatch.setattr(molecule_run, "ROOT", tmp_path.parent)
    monkeypatch.setattr(molecule_run, "all_scenarios", lambda: ["ams", "multinode"])

    def run(name: str) -> tuple[str, bool, float, list[str]]:
        if name == "ams":
            molecule_run.say("ams: FAILED after 9s; the end of its log: the destroy")
            return name, False, 9.0, ["TASK [verify]", "FAILED test_x.py::test_y"]
        molecule_run.say("multinode: passed in 20s")
        return name, True, 20.0, []

    monkeypatch.setattr(molecule_run, "_run", run)
    assert molecule_run.main(["--jobs", "1"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-5:] == [
        f"molecule: ams: what failed, from {tmp_path.name}/ams.log:",
        "TASK [verify]",
        "FAILED test_x.py::test_y",
        "molecule: 1 passed, 1 failed, in 0s",
        "molecule: failed: ams",
    ]
