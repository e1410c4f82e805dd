"""The mongodb role's TLS mode (``mongodb_tls_enabled``) writes the metadata store's configuration of
docs/production.md ("Security", "The metadata store"). FerretDB's environment file is held, key by key, to the
flags tools/secure_services.py runs (tests/api/test_secure_links.py proves them against a real FerretDB), each
difference listed with why, and then run itself: the FerretDB binary the project builds, on loopback, with the
rendered variables. mongod's configuration and the role's community.mongodb tasks are checked as written (there
is no mongod on the test machines)."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from tests.helpers import ROOT, free_port, load_services_tool, load_tool
from tests.static.test_roles import _local_playbook, _run
from tests.static.test_tool_configs import compare, render_role_template

pki = load_tool("pki")
secure_services = load_tool("secure_services")
services = load_services_tool()

TLS_DIR = "/etc/mongodb-tls"  # the role's default mongodb_tls_dir
SECRET = "ams-mongo-secret"
#: Variables the ferretdb flavor needs with TLS (the certificate sources matter to the tasks only).
FERRETDB_TLS = {"mongodb_flavor": "ferretdb", "mongodb_tls_enabled": True, "mongodb_app_password": SECRET}

# ------------------------------------------------------------------------ ferretdb.env ----
#: FerretDB 1.24's defaults, for what only one side sets.
FERRETDB_DEFAULTS = {"FERRETDB_LOG_FORMAT": "console"}
#: Paths of this host (the test server's are under its temporary root).
FERRETDB_PATHS = {
    "FERRETDB_SQLITE_URL",
    "FERRETDB_STATE_DIR",
    "FERRETDB_LISTEN_TLS_CERT_FILE",
    "FERRETDB_LISTEN_TLS_KEY_FILE",
}
FERRETDB_DIFFERENCES = {
    "FERRETDB_SETUP_DATABASE": "the test server keeps its user apart from AMS's data (ams_auth); the role makes it "
    "in mongodb_app_database, the authSource the mongodb flavor has too, unless mongodb_ferretdb_setup_database says",
    "FERRETDB_DEBUG_ADDR": "the role keeps FerretDB's metrics and profiling handler, on loopback; the test server none",
    "FERRETDB_LOG_LEVEL": "the same level: the role's choices are upper case",
    "FERRETDB_LOG_FORMAT": "the role logs to journald, which adds the timestamps",
}
#: What the role adds for TLS and authentication, and nothing else.
FERRETDB_TLS_KEYS = {
    "FERRETDB_LISTEN_TLS",
    "FERRETDB_LISTEN_TLS_CERT_FILE",
    "FERRETDB_LISTEN_TLS_KEY_FILE",
    "FERRETDB_TEST_ENABLE_NEW_AUTH",
    "FERRETDB_SETUP_DATABASE",
    "FERRETDB_SETUP_USERNAME",
    "FERRETDB_SETUP_PASSWORD",
}


def systemd_value(raw: str) -> str:
    """A value of an EnvironmentFile= line as systemd reads it (systemd.exec(5)): in double quotes, a backslash
    escapes one of \\ " ` $ and is kept before anything else; unquoted, it escapes any character."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r'\\([\\"`$])', r"\1", raw[1:-1])
    assert not re.search(r"[\"'\\]", raw), raw  # the role quotes what needs it
    return raw


def ferretdb_env(**variables: Any) -> dict[str, str]:
    text = render_role_template("mongodb", "ferretdb.env.j2", **variables)
    pairs = (line.split("=", 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {key: systemd_value(value) for key, value in pairs}


def secure_test_server(tmp_path: Path, port: int) -> dict[str, str]:
    """tools/secure_services.py's FerretDB flags as the FERRETDB_* variables they stand for."""
    pair = secure_services.SecureServices(tmp_path, 0, 0, 0, 0, port)
    found: dict[str, str] = {}
    for flag in pair._ferretdb_argv()[1:]:
        name, _, value = flag.removeprefix("--").partition("=")
        found["FERRETDB_" + name.upper().replace("-", "_")] = value if "=" in flag else "true"
    return found


def test_with_tls_ferretdb_runs_as_the_secure_test_server(tmp_path: Path) -> None:
    role = ferretdb_env(**FERRETDB_TLS, mongodb_port=27017)
    test_server = secure_test_server(tmp_path, 27017)
    assert compare(test_server, role, FERRETDB_PATHS, FERRETDB_DIFFERENCES, FERRETDB_DEFAULTS) == []
    # the TLS listener alone on loopback: a plain one there could not share its port
    assert role["FERRETDB_LISTEN_TLS"] == "127.0.0.1:27017"
    assert role["FERRETDB_LISTEN_ADDR"] == ""
    assert role["FERRETDB_LISTEN_TLS_CERT_FILE"] == f"{TLS_DIR}/mongodb.pem"
    assert role["FERRETDB_LISTEN_TLS_KEY_FILE"] == f"{TLS_DIR}/mongodb.key"
    assert "FERRETDB_LISTEN_TLS_CA_FILE" not in role  # clients log in; they present no certificate
    assert (role["FERRETDB_SETUP_DATABASE"], role["FERRETDB_SETUP_USERNAME"]) == ("ams", "ams")


@pytest.mark.parametrize(
    ("bind", "plain"),
    [
        ("10.0.0.5", "127.0.0.1:27017"),  # the TLS one on the network, the plain one on loopback: two sockets
        ("127.0.0.1", ""),
        ("127.0.1.1", ""),
        ("localhost", ""),
        ("0.0.0.0", ""),  # the wildcard holds loopback's port as well
    ],
)
def test_with_tls_the_plain_listener_is_on_loopback_or_off(bind: str, plain: str) -> None:
    role = ferretdb_env(**FERRETDB_TLS, mongodb_bind_address=bind)
    assert (role["FERRETDB_LISTEN_TLS"], role["FERRETDB_LISTEN_ADDR"]) == (f"{bind}:27017", plain)


def test_the_setup_user_is_the_app_user_in_its_database() -> None:
    role = ferretdb_env(**FERRETDB_TLS, mongodb_app_database="argo_msg", mongodb_app_user="argo")
    assert (role["FERRETDB_SETUP_DATABASE"], role["FERRETDB_SETUP_USERNAME"]) == ("argo_msg", "argo")
    role = ferretdb_env(**FERRETDB_TLS, mongodb_ferretdb_setup_database="ams_auth")
    assert role["FERRETDB_SETUP_DATABASE"] == "ams_auth"


@pytest.mark.parametrize(
    "password", [SECRET, 'a "quoted" pa$$word', "back\\slash `tick` ${HOME} 100% %n", " spaced ", "ĉiuĵaŭde €"]
)
def test_systemd_reads_the_password_as_written(password: str) -> None:
    assert ferretdb_env(**FERRETDB_TLS | {"mongodb_app_password": password})["FERRETDB_SETUP_PASSWORD"] == password


@pytest.mark.parametrize("bind", ["127.0.0.1", "10.0.0.5", "0.0.0.0"])
def test_without_tls_ferretdb_listens_in_plaintext_without_logins(bind: str) -> None:
    plain = ferretdb_env(mongodb_flavor="ferretdb", mongodb_bind_address=bind)
    assert plain["FERRETDB_LISTEN_ADDR"] == f"{bind}:27017"
    assert not [key for key in plain if key.startswith(("FERRETDB_LISTEN_TLS", "FERRETDB_SETUP", "FERRETDB_TEST"))]
    # TLS adds its keys and moves the plain listener; nothing else changes
    tls = ferretdb_env(**FERRETDB_TLS, mongodb_bind_address=bind)
    assert set(tls) - set(plain) == FERRETDB_TLS_KEYS
    assert {k: v for k, v in tls.items() if k not in FERRETDB_TLS_KEYS | {"FERRETDB_LISTEN_ADDR"}} == {
        k: v for k, v in plain.items() if k != "FERRETDB_LISTEN_ADDR"
    }


# -------------------------------------------------------------------------- mongod.conf ----
MONGOD_TLS = {
    "mode": "requireTLS",
    "certificateKeyFile": f"{TLS_DIR}/mongodb-certificate-key.pem",
    "CAFile": f"{TLS_DIR}/ca.pem",
    "allowConnectionsWithoutCertificates": True,
}
KEYFILE = {"mongodb_keyfile_content": "c2VjcmV0LWtleQ=="}


def mongod_conf(**variables: Any) -> dict[str, Any]:
    conf = yaml.safe_load(render_role_template("mongodb", "mongod.conf.j2", **variables))
    assert isinstance(conf, dict)
    return conf


@pytest.mark.parametrize("variables", [{}, KEYFILE, {"mongodb_bind_address": "0.0.0.0"}], ids=["plain", "key", "all"])
def test_with_tls_mongod_requires_it_and_a_login(variables: dict[str, Any]) -> None:
    plain, tls = mongod_conf(**variables), mongod_conf(**variables, mongodb_tls_enabled=True)
    assert tls["net"].pop("tls") == MONGOD_TLS
    assert tls["security"]["authorization"] == "enabled"  # with the members' key or without
    assert tls["security"].get("keyFile") == plain.get("security", {}).get("keyFile")
    assert {k: v for k, v in tls.items() if k != "security"} == {k: v for k, v in plain.items() if k != "security"}


def test_without_tls_mongod_has_none_of_it() -> None:
    assert "tls" not in mongod_conf()["net"]
    assert "security" not in mongod_conf()
    assert mongod_conf(**KEYFILE)["security"] == {"authorization": "enabled", "keyFile": "/etc/mongodb/keyfile"}


def test_the_roles_mongodb_tasks_speak_tls_when_it_is_on(tmp_path: Path) -> None:
    """Every community.mongodb task reaches mongod over TLS with the CA; not the host name: it connects to
    127.0.0.1, which the certificate need not name."""
    tasks = yaml.safe_load((ROOT / "roles" / "mongodb" / "tasks" / "cluster.yml").read_text())
    modules = [task[key] for task in tasks for key in task if key.startswith("community.mongodb.")]
    assert len(modules) == 3
    template = tmp_path / "options.j2"
    for arguments in modules:
        expressions = [arguments[key].strip("{} ") for key in ("ssl", "ssl_ca_certs", "connection_options")]
        template.write_text("{{ [" + ", ".join(expressions) + "] }}")
        # an absolute path takes the place of the role's templates/ directory (pathlib's / operator)
        rendered = render_role_template("mongodb", str(template), mongodb_tls_enabled=True)
        assert yaml.safe_load(rendered) == [True, f"{TLS_DIR}/ca.pem", [{"tlsAllowInvalidHostnames": True}]]


# ---------------------------------------------------------------------------- preflight ----
def _preflight(tmp_path: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The role's preflight alone, on localhost (nothing is installed; no platform check), as
    test_roles.py runs the ams role's."""
    play = [
        {
            "name": "Preflight only",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Run the mongodb preflight",
                    "ansible.builtin.include_role": {"name": "mongodb", "tasks_from": "preflight"},
                    "vars": variables,
                }
            ],
        }
    ]
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump(play))
    argv = _local_playbook(playbook)
    argv[-1:-1] = ["--skip-tags", "mongodb_platform"]
    return _run(argv)


def _tls_sources(directory: Path) -> dict[str, str]:
    ca = pki.new_ca("test CA")
    cert, key = pki.service_cert(ca, "mongodb", "mongo1").write(directory, "mongodb")
    ca_file = pki.write_bundle(directory / "ca.pem", ca)
    return {"mongodb_tls_ca_src": ca_file, "mongodb_tls_certificate_src": cert, "mongodb_tls_key_src": key}


@pytest.mark.parametrize(
    ("case", "refused"),
    [
        ("ferretdb", None),
        ("ferretdb without files", "mongodb_tls_enabled needs mongodb_tls_ca_src"),
        ("ferretdb with an encrypted key", "is not an unencrypted PEM private key"),
        ("ferretdb without password", "With mongodb_tls_enabled, FerretDB needs its user"),
        ("mongodb replica set without key", "then needs mongodb_keyfile_content"),
    ],
)
def test_the_preflight_checks_the_tls_inputs(tmp_path: Path, case: str, refused: str | None) -> None:
    binary = tmp_path / "ferretdb"
    binary.write_bytes(b"")
    variables: dict[str, Any] = {"mongodb_tls_enabled": True, **_tls_sources(tmp_path)}
    if case.startswith("ferretdb"):
        variables |= {"mongodb_flavor": "ferretdb", "mongodb_ferretdb_binary_src": str(binary)}
        variables |= {} if case.endswith("without password") else {"mongodb_app_password": SECRET}
        if case.endswith("without files"):
            variables["mongodb_tls_key_src"] = str(tmp_path / "missing.key")
        if case.endswith("an encrypted key"):
            key = serialization.load_pem_private_key(Path(variables["mongodb_tls_key_src"]).read_bytes(), None)
            encryption = serialization.BestAvailableEncryption(b"passphrase")
            encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
            Path(variables["mongodb_tls_key_src"]).write_bytes(encrypted)
    else:
        # the replica set of this host alone ("all": localhost)
        variables |= {"mongodb_admin_password": SECRET, "mongodb_app_password": SECRET}
        variables |= {"mongodb_replica_set_group": "all"}
    done = _preflight(tmp_path, variables)
    if refused is None:
        assert done.returncode == 0, done.stdout[-3000:]
    else:
        assert done.returncode != 0, done.stdout[-3000:]
        assert refused in done.stdout, done.stdout[-3000:]


# ---------------------------------------------------------------------- a real FerretDB ----
@dataclass
class Running:
    tls_port: int
    plain_port: int
    ca: str
    database: str
    user: str
    password: str

    def uri(
        self, *, login: bool = True, password: str | None = None, tls: bool = True, plain_port: bool = False
    ) -> str:
        who = f"{self.user}:{self.password if password is None else password}@" if login else ""
        query = f"tls=true&tlsCAFile={self.ca}" if tls else "tls=false"
        if login:
            query += f"&authSource={self.database}"
        return f"mongodb://{who}localhost:{self.plain_port if plain_port else self.tls_port}/?{query}"


@pytest.fixture
def ferretdb(tmp_path: Path) -> Iterator[Running]:
    """FerretDB with the role's environment for a host whose bind address is on the network (so both the TLS
    listener and the loopback plain one), the TLS one moved to loopback for the test."""
    binary = Path(services.FERRETDB_BIN)
    if not binary.is_file():
        pytest.skip(f"no FerretDB binary at {binary}: build it with .venv/bin/python -m tools.services install")
    tls_dir, data = tmp_path / "tls", tmp_path / "data"
    tls_dir.mkdir()
    (data / "state").mkdir(parents=True)
    ca = pki.new_ca("test CA")
    pki.service_cert(ca, "mongodb", "localhost", "127.0.0.1").write(tls_dir, "mongodb")  # mongodb.pem, mongodb.key
    plain_port, tls_port = free_port(), free_port()
    password = 'a "quoted" pa$$word'
    env = ferretdb_env(
        **FERRETDB_TLS | {"mongodb_app_password": password},
        mongodb_bind_address="192.0.2.10",
        mongodb_port=plain_port,
        mongodb_tls_dir=str(tls_dir),
        mongodb_ferretdb_data_dir=str(data),
        mongodb_ferretdb_debug_addr="-",
    )
    assert (env["FERRETDB_LISTEN_TLS"], env["FERRETDB_LISTEN_ADDR"]) == (
        f"192.0.2.10:{plain_port}",
        f"127.0.0.1:{plain_port}",
    )
    env["FERRETDB_LISTEN_TLS"] = f"127.0.0.1:{tls_port}"
    log = (tmp_path / "ferretdb.log").open("wb")
    proc = subprocess.Popen([str(binary)], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not _port_open(tls_port) or not _port_open(plain_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"FerretDB did not listen: {(tmp_path / 'ferretdb.log').read_text()[-2000:]}")
            time.sleep(0.1)
        ca_file = pki.write_bundle(tmp_path / "ca.pem", ca)
        yield Running(tls_port, plain_port, ca_file, env["FERRETDB_SETUP_DATABASE"], "ams", password)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _ping(uri: str) -> list[str]:
    from pymongo import MongoClient

    client: Any = MongoClient(uri, serverSelectionTimeoutMS=3000)
    try:
        client["argo_msg"]["probe"].insert_one({"seen": True})
        return list(client["argo_msg"].list_collection_names())
    finally:
        client.close()


def test_the_rendered_ferretdb_wants_tls_and_a_login(ferretdb: Running) -> None:
    from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

    assert _ping(ferretdb.uri()) == ["probe"]  # the control: the setup user over TLS
    with pytest.raises(ServerSelectionTimeoutError):
        _ping(ferretdb.uri(tls=False))
    with pytest.raises(OperationFailure) as anonymous:
        _ping(ferretdb.uri(login=False))
    assert anonymous.value.code == 13  # Unauthorized
    with pytest.raises(OperationFailure) as wrong:
        _ping(ferretdb.uri(password="not-the-password"))
    assert wrong.value.code == 18  # AuthenticationFailed
    # the loopback plain listener (local tools) wants the login too
    with pytest.raises(OperationFailure) as local:
        _ping(ferretdb.uri(login=False, tls=False, plain_port=True))
    assert local.value.code == 13
    assert _ping(ferretdb.uri(tls=False, plain_port=True)) == ["probe"]
