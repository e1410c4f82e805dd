"""roles/zookeeper/files/zookeeper-health against a fake four-letter-word server: modes and exit codes."""

from __future__ import annotations

import socket
import socketserver
from collections.abc import Iterator

import pytest

from tests.helpers import ROOT, load_script, run_probe, server_port, serving

SCRIPT = ROOT / "roles" / "zookeeper" / "files" / "zookeeper-health"

NOT_SERVING = "This ZooKeeper instance is not currently serving requests\n"


zookeeper_health = load_script(SCRIPT, "ams_role_zookeeper_health")


def srvr(mode: str) -> str:
    """A srvr answer as ZooKeeper 3.8 writes it."""
    return (
        "Zookeeper version: 3.8.0-debian--1, built on 2023-01-01 00:00 UTC\n"
        "Latency min/avg/max: 0/0.1/3\n"
        "Received: 42\n"
        "Sent: 41\n"
        "Connections: 1\n"
        "Outstanding: 0\n"
        "Zxid: 0x100000003\n"
        f"Mode: {mode}\n"
        "Node count: 5\n"
    )


class _FourLetterWords(socketserver.BaseRequestHandler):
    """Reads the 4-byte word, answers from the server's table and closes, as ZooKeeper does."""

    def handle(self) -> None:
        server = self.server
        assert isinstance(server, _FakeZooKeeper)
        word = b""
        while len(word) < 4:
            chunk = self.request.recv(4 - len(word))
            if not chunk:
                return
            word += chunk
        server.words.append(word.decode())
        answer = server.answers.get(word.decode())
        if answer:
            self.request.sendall(answer.encode())


class _FakeZooKeeper(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FourLetterWords)
        self.answers: dict[str, str] = {}
        self.words: list[str] = []


@pytest.fixture
def fake_zookeeper() -> Iterator[_FakeZooKeeper]:
    with serving(_FakeZooKeeper()) as server:
        yield server


@pytest.mark.parametrize(
    ("answer", "mode"),
    [
        (srvr("leader"), "leader"),
        (srvr("follower"), "follower"),
        (srvr("standalone"), "standalone"),
        (srvr("observer"), "observer"),
        (NOT_SERVING, "not serving"),
        ("srvr is not executed because it is not in the whitelist.\n", "not serving"),
        ("", "not serving"),
    ],
)
def test_parse_mode(answer: str, mode: str) -> None:
    assert zookeeper_health.parse_mode(answer) == mode


@pytest.mark.parametrize("mode", ["leader", "follower", "standalone"])
def test_serving_modes_exit_0(fake_zookeeper: _FakeZooKeeper, mode: str) -> None:
    fake_zookeeper.answers["srvr"] = srvr(mode)
    done = run_probe(SCRIPT, server_port(fake_zookeeper), "--serving")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{mode}\n"
    assert fake_zookeeper.words == ["srvr"]


def test_observer_answers_but_does_not_count_as_serving(fake_zookeeper: _FakeZooKeeper) -> None:
    fake_zookeeper.answers["srvr"] = srvr("observer")
    assert run_probe(SCRIPT, server_port(fake_zookeeper)).returncode == 0
    done = run_probe(SCRIPT, server_port(fake_zookeeper), "--serving")
    assert (done.returncode, done.stdout) == (1, "observer\n")


@pytest.mark.parametrize("flags", [(), ("--serving",)])
def test_not_serving_exits_1(fake_zookeeper: _FakeZooKeeper, flags: tuple[str, ...]) -> None:
    fake_zookeeper.answers["srvr"] = NOT_SERVING
    done = run_probe(SCRIPT, server_port(fake_zookeeper), *flags)
    assert (done.returncode, done.stdout) == (1, "not serving\n")
    assert "not currently serving" in done.stderr


def test_ruok(fake_zookeeper: _FakeZooKeeper) -> None:
    fake_zookeeper.answers["ruok"] = "imok"
    done = run_probe(SCRIPT, server_port(fake_zookeeper), "--ruok")
    assert (done.returncode, done.stdout) == (0, "imok\n")
    fake_zookeeper.answers.clear()
    done = run_probe(SCRIPT, server_port(fake_zookeeper), "--ruok")
    assert (done.returncode, done.stdout) == (1, "no answer\n")
    assert fake_zookeeper.words == ["ruok", "ruok"]


@pytest.mark.parametrize("flags", [(), ("--serving",), ("--ruok",)])
def test_exit_2_when_nothing_listens(flags: tuple[str, ...]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_probe(SCRIPT, port, *flags)
    assert done.returncode == 2
    assert done.stdout == ""
    assert f"127.0.0.1:{port}" in done.stderr


def test_script_is_executable_python3() -> None:
    assert SCRIPT.stat().st_mode & 0o111
    assert SCRIPT.read_text().startswith("#!/usr/bin/python3\n")
