"""``ams probe``: the monitoring check against a real server over HTTPS, on each backend. Its exit
codes (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN), its one status line with performance data, the
topic and subscription it makes, and the backlog it leaves (none)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ams_app import cli, probe
from tests.helpers import ROOT, AmsServer, Api, free_port, unique

#: Generous thresholds where a test wants OK: the Kafka backend on a busy 2-core machine is slow.
RELAXED = ("--warning", "60", "--critical", "90")
STATUS = re.compile(r"^AMS (OK|WARNING|CRITICAL|UNKNOWN) - ([^|]+?)(?: \| (.+))?$")
PERFDATA = re.compile(r"^([a-z]+)=([0-9.]+)(s)((?:;[0-9.]*){0,4})$")


def args(server: AmsServer, ca: str, project: str, *more: str, token: str | None = None) -> list[str]:
    url = f"https://{server.host}"
    return [
        "--url",
        url,
        "--token",
        server.token if token is None else token,
        "--project",
        project,
        "--ca-file",
        ca,
        *more,
    ]


def run_probe(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``probe.main(argv)`` in this process: its exit code and its one stdout line."""
    code = probe.main(argv)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1, out
    return code, lines[0]


def parsed(line: str) -> tuple[str, str, dict[str, tuple[float, list[str]]]]:
    """(state, text, {label: (seconds, [warn, crit, min, ...])}) of a status line."""
    match = STATUS.match(line)
    assert match, line
    state, text, perf = match.groups()
    values: dict[str, tuple[float, list[str]]] = {}
    for item in (perf or "").split():
        found = PERFDATA.match(item)
        assert found, (item, line)
        values[found.group(1)] = (float(found.group(2)), found.group(4).split(";")[1:])
    return state, text, values


def backlog(api: Api, project: str, sub: str) -> int:
    offsets = api.ok("GET", f"/projects/{project}/subscriptions/{sub}:offsets")
    return int(offsets["max"]) - int(offsets["current"])


@pytest.fixture
def ca(tls_files: tuple[str, str, str]) -> str:
    return tls_files[2]


# ---------------------------------------------------------------------------------- OK ----
def test_ok_creates_the_topic_and_subscription_then_reuses_them(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert api.get(f"/projects/{project}/topics/ams-probe").status_code == 404  # the probe makes it

    code, line = run_probe(args(server, ca, project, *RELAXED), capsys)
    assert code == probe.OK, line
    state, text, perf = parsed(line)
    assert state == "OK"
    assert re.fullmatch(r"published and pulled back 1 message in \d+\.\d{3} s", text), text
    assert set(perf) == {"time", "publish", "pull"}
    total, thresholds = perf["time"]
    assert thresholds == ["60", "90", "0"]
    assert 0 <= perf["publish"][0] <= total
    assert 0 <= perf["pull"][0] <= total
    assert total == pytest.approx(perf["publish"][0] + perf["pull"][0], abs=0.002)

    api.ok("GET", f"/projects/{project}/topics/ams-probe")
    made = api.ok("GET", f"/projects/{project}/subscriptions/ams-probe")
    assert made["topic"].strip("/") == f"projects/{project}/topics/ams-probe"
    assert backlog(api, project, "ams-probe") == 0

    code, line = run_probe(args(server, ca, project, *RELAXED), capsys)
    assert (code, parsed(line)[0]) == (probe.OK, "OK"), line
    assert backlog(api, project, "ams-probe") == 0


def test_leftovers_of_earlier_runs_are_acknowledged_and_ignored(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, sub = unique("probe-topic"), unique("probe-sub")
    more = ("--topic", topic, "--subscription", sub, *RELAXED)
    assert run_probe(args(server, ca, project, *more), capsys)[0] == probe.OK
    # what earlier runs left behind (published, never pulled): more than one pull's worth
    for index in range(probe.PULL_BATCH + 5):
        api.publish(project, topic, f"stale-{index}", attributes={"probe": f"stale-{index}"})
    assert backlog(api, project, sub) == probe.PULL_BATCH + 5

    code, line = run_probe(args(server, ca, project, *more), capsys)
    assert code == probe.OK, line
    assert backlog(api, project, sub) == 0


def test_url_with_v1_and_names_of_ones_own(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, sub = unique("t"), unique("s")
    argv = args(server, ca, project, "--topic", topic, "--subscription", sub, *RELAXED)
    argv[argv.index("--url") + 1] = server.url + "/"  # https://host:port/v1/
    code, line = run_probe(argv, capsys)
    assert code == probe.OK, line
    assert api.ok("GET", f"/projects/{project}/subscriptions/{sub}")["topic"].strip("/") == (
        f"projects/{project}/topics/{topic}"
    )


def test_publisher_and_consumer_on_precreated_resources(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The least rights: no project_admin, the topic and subscription made beforehand, the user
    in their ACLs."""
    user = api.new_user(projects=[{"project": project, "roles": ["publisher", "consumer"]}])
    api.ok("PUT", f"/projects/{project}/topics/ams-probe")
    api.ok("PUT", f"/projects/{project}/subscriptions/ams-probe", {"topic": f"projects/{project}/topics/ams-probe"})
    argv = args(server, ca, project, *RELAXED, token=user["token"])

    code, line = run_probe(argv, capsys)  # not in the ACLs yet
    assert code == probe.CRITICAL, line
    assert line.startswith("AMS CRITICAL - publish: 403"), line

    acl = {"authorized_users": [user["name"]]}
    api.ok("POST", f"/projects/{project}/topics/ams-probe:modifyAcl", acl)
    api.ok("POST", f"/projects/{project}/subscriptions/ams-probe:modifyAcl", acl)
    code, line = run_probe(argv, capsys)
    assert code == probe.OK, line
    assert backlog(api, project, "ams-probe") == 0


# ----------------------------------------------------------------------------- WARNING ----
def test_warning_when_slower_than_the_warning_threshold(
    server: AmsServer, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, line = run_probe(args(server, ca, project, "--warning", "0", "--critical", "90"), capsys)
    assert code == probe.WARNING, line
    state, text, perf = parsed(line)
    assert state == "WARNING"
    assert text.endswith("(warning above 0 s)"), text
    assert perf["time"][1] == ["0", "90", "0"]


def test_thresholds_in_the_performance_data_are_numbers_nagios_reads(
    server: AmsServer, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nagios's performance data takes digits and a point: no exponent (``1e-06``), whatever
    threshold is given."""
    argv = args(server, ca, project, "--warning", "0.000001", "--critical", "90.5")
    code, line = run_probe(argv, capsys)
    assert code == probe.WARNING, line
    _, text, perf = parsed(line)
    assert text.endswith("(warning above 0.000001 s)"), text
    assert perf["time"][1] == ["0.000001", "90.5", "0"]
    for item in line.split(" | ", 1)[1].split():
        value, *fields = item.partition("=")[2].split(";")
        for number in [value.removesuffix("s"), *fields]:
            assert re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", number), (number, line)


# ---------------------------------------------------------------------------- CRITICAL ----
def test_critical_on_a_bad_token(server: AmsServer, project: str, ca: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, line = run_probe(args(server, ca, project, *RELAXED, token="not-a-token"), capsys)
    assert code == probe.CRITICAL, line
    assert line.startswith(f"AMS CRITICAL - topic projects/{project}/topics/ams-probe: 401 "), line
    assert "|" not in line


def test_critical_when_the_token_cannot_create_the_topic(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    user = api.new_user(projects=[{"project": project, "roles": ["publisher", "consumer"]}])
    code, line = run_probe(args(server, ca, project, *RELAXED, token=user["token"]), capsys)
    assert code == probe.CRITICAL, line
    assert line.startswith(f"AMS CRITICAL - cannot create topic projects/{project}/topics/ams-probe: 403 "), line
    assert f"project_admin of {project}" in line


def test_critical_when_nothing_listens(ca: str, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    argv = ["--url", f"https://127.0.0.1:{port}", "--token", "t", "--project", "p", "--ca-file", ca]
    code, line = run_probe([*argv, "--timeout", "5"], capsys)
    assert code == probe.CRITICAL, line
    assert line.startswith(f"AMS CRITICAL - topic: cannot reach https://127.0.0.1:{port}: "), line
    assert "Connection refused" in line


def test_critical_when_the_message_is_lost(
    server: AmsServer, api: Api, project: str, ca: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The subscription pulled is on another topic: the message never comes back."""
    other = unique("other")
    api.ok("PUT", f"/projects/{project}/topics/{other}")
    api.ok("PUT", f"/projects/{project}/subscriptions/elsewhere", {"topic": f"projects/{project}/topics/{other}"})
    argv = args(server, ca, project, "--subscription", "elsewhere", "--warning", "1", "--critical", "1.5")
    code, line = run_probe(argv, capsys)
    assert code == probe.CRITICAL, line
    assert line.startswith("AMS CRITICAL - message not pulled back within 1.5 s"), line
    assert f"attached to projects/{project}/topics/{other}" in line


# ----------------------------------------------------------------------------- UNKNOWN ----
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--token", "t", "--project", "p"], "the following arguments are required: --url"),
        (["--url", "https://h", "--token", "t", "--project", "p", "--warning", "5", "--critical", "3"], "above"),
        (["--url", "https://h", "--token", "t", "--project", "p", "--critical", "soon"], "invalid float value"),
        (["--url", "ams.example.org", "--token", "t", "--project", "p"], "not an http(s):// URL"),
        (["--url", "https://h", "--token", "t", "--project", "p/../x"], "not a valid name"),
        (["--url", "https://h", "--token", "t", "--project", "p", "--ca-file", "/nonexistent/ca.pem"], "no file"),
        (["--url", "https://h", "--token", "t", "--project", "p", "--ca-file", "x", "--insecure"], "not allowed"),
        (["--url", "https://h", "--token", "t", "--token-file", "f", "--project", "p"], "not allowed"),
        (["--url", "https://h", "--token-file", "/nonexistent/token", "--project", "p"], "cannot read"),
        (["--url", "https://h", "--token-file", "/dev/null", "--project", "p"], "is empty"),
    ],
)
def test_unknown_on_bad_arguments(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["probe", *argv])  # through the `ams` command's dispatch
    out = capsys.readouterr().out.splitlines()
    assert code == probe.UNKNOWN
    assert len(out) == 1
    assert out[0].startswith("AMS UNKNOWN - bad arguments: "), out
    assert says in out[0]


def test_unknown_when_the_probe_itself_fails(
    server: AmsServer, project: str, ca: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(item: object, nonce: str) -> bool:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(probe, "_carries", broken)
    code, line = run_probe(args(server, ca, project, *RELAXED), capsys)
    assert code == probe.UNKNOWN
    assert line == "AMS UNKNOWN - probe failed: RuntimeError: a bug over two lines"


# ---------------------------------------------------------------------- the `ams` command ----
def _command(*argv: str) -> subprocess.CompletedProcess[str]:
    # the --ca-file given must be what verifies the server: no bundle from the environment
    env = {k: v for k, v in os.environ.items() if k not in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ams"), "probe", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_ams_command(server: AmsServer, api: Api, project: str, ca: str, tmp_path: Path) -> None:
    token_file = tmp_path / "probe.token"
    token_file.write_text(server.token + "\n")
    argv = args(server, ca, project, *RELAXED)
    i = argv.index("--token")
    argv[i : i + 2] = ["--token-file", str(token_file)]  # out of the process listing
    done = _command(*argv)
    assert done.returncode == probe.OK, (done.stdout, done.stderr)
    assert len(done.stdout.splitlines()) == 1, done.stdout
    assert parsed(done.stdout.strip())[0] == "OK"
    assert done.stderr == ""
    assert backlog(api, project, "ams-probe") == 0

    done = _command(*args(server, ca, project, *RELAXED, token="not-a-token"))
    assert done.returncode == probe.CRITICAL, (done.stdout, done.stderr)
    assert done.stdout.startswith("AMS CRITICAL - "), done.stdout
    assert len(done.stdout.splitlines()) == 1, done.stdout
    assert "Traceback" not in done.stderr

    done = _command("--token", "t", "--project", project)
    assert done.returncode == probe.UNKNOWN, (done.stdout, done.stderr)
    assert done.stdout.startswith("AMS UNKNOWN - "), done.stdout
    assert len(done.stdout.splitlines()) == 1, done.stdout
