#!/usr/bin/env python3
"""AuthN on one machine: AMS and ``ams authn`` with a CA of their own, and a client certificate
that gets its token through argo-ams-library (docs/authn.md).

    python tools/authn_demo.py up      # start both, bind the demo certificate, publish and pull with it
    python tools/authn_demo.py down    # stop both

AMS serves the embedded backend over HTTPS on 127.0.0.2:443 (argo-ams-library puts no port in the
AMS URL, so it must be 443; binding it needs root or CAP_NET_BIND_SERVICE), and ``ams authn``
listens on 127.0.0.2:8443. Everything lives under ``.cache/authn-demo/`` of the checkout
(``AMS_AUTHN_DEMO_DIR`` to put it elsewhere): the CA,
the server and client certificates and keys (``pki/``), the data directory, the settings file,
logs and pid files. The CA is a throwaway for the demo: never use it for anything else.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
from pathlib import Path

import requests
import yaml
from cryptography.x509.oid import NameOID

from tools import pki, toolkit

ROOT = Path(__file__).resolve().parent.parent
#: Where everything lives (AMS_AUTHN_DEMO_DIR: elsewhere, as the test of this tool does).
DEMO = Path(os.environ.get("AMS_AUTHN_DEMO_DIR", ROOT / ".cache" / "authn-demo")).resolve()
HOST = "127.0.0.2"
AMS_PORT = 443
AUTHN_PORT = 8443
PROJECT = "demo"
CLIENT = "demo-client"
CLIENT_SUBJECT = [(NameOID.ORGANIZATION_NAME, "AMS demo"), (NameOID.COMMON_NAME, "demo-client.example.org")]
MARKER = str(DEMO)  # on every process's command line (--config under DEMO)


class DemoError(RuntimeError):
    pass


def say(text: str) -> None:
    print(f"authn-demo: {text}", flush=True)


def _write_pki(directory: Path) -> dict[str, str]:
    """CA, server certificate for HOST, client certificate; their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = pki.new_ca("AMS AuthN demo CA")
    server_cert, server_key = pki.server_cert(ca, HOST, "localhost").write(directory, "server")
    client_cert, client_key = pki.client_cert(ca, CLIENT_SUBJECT).write(directory, "client")
    for key in (server_key, client_key):
        os.chmod(key, 0o600)
    return {
        "ca": pki.write_bundle(directory / "ca.pem", ca),
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
    }


def _settings(files: dict[str, str]) -> Path:
    settings = {
        "backend": "embedded",
        "data_dir": str(DEMO / "data"),
        "host": HOST,
        "port": AMS_PORT,
        "tls_cert": files["server_cert"],
        "tls_key": files["server_key"],
        "authn_host": HOST,
        "authn_port": AUTHN_PORT,
        "authn_ca_file": files["ca"],
        "service_token": secrets.token_hex(24),
    }
    path = DEMO / "ams.yml"
    path.write_text(yaml.safe_dump(settings))
    path.chmod(0o600)
    return path


def _ams(*args: str, config: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ams_app", *args, "--config", str(config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise DemoError(f"ams {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _start(name: str, command: str, config: Path, url: str, ca: str) -> None:
    log, pid_file = DEMO / f"{name}.log", DEMO / f"{name}.pid"
    if toolkit.running(pid_file, MARKER):
        say(f"{name} already running")
        return
    pid = toolkit.spawn(
        [sys.executable, "-m", "ams_app", command, "--config", str(config)],
        log=log,
        pid_file=pid_file,
        started_by="tools/authn_demo.py",
        cwd=ROOT,
    )
    toolkit.wait_until(
        name,
        lambda: requests.get(url, verify=ca, timeout=2).status_code == 200,
        timeout=60,
        pid=pid,
        marker=MARKER,
        log=log,
        error=DemoError,
    )
    say(f"{name} up at {url.rsplit('/', 1)[0]} (log {log})")


def up() -> None:
    DEMO.mkdir(parents=True, exist_ok=True)
    files = _write_pki(DEMO / "pki") if not (DEMO / "pki" / "ca.pem").exists() else _known_files()
    config = DEMO / "ams.yml" if (DEMO / "ams.yml").exists() else _settings(files)
    _start("ams", "serve", config, f"https://{HOST}:{AMS_PORT}/v1/status", files["ca"])
    _start("authn", "authn", config, f"https://{HOST}:{AUTHN_PORT}/v1/status", files["ca"])
    _arrange(config, files)
    _use(files)


def _known_files() -> dict[str, str]:
    d = DEMO / "pki"
    names = ("ca", "server_cert", "server_key", "client_cert", "client_key")
    paths = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")
    return {n: str(d / p) for n, p in zip(names, paths, strict=True)}


def _arrange(config: Path, files: dict[str, str]) -> None:
    """A project, a user allowed on its topic and subscription, and the certificate bound to it."""
    token = yaml.safe_load(config.read_text())["service_token"]
    base = f"https://{HOST}:{AMS_PORT}/v1"
    session = requests.Session()
    session.headers["x-api-key"] = token
    session.verify = files["ca"]
    session.trust_env = False  # else REQUESTS_CA_BUNDLE of the environment overrides verify
    session.post(f"{base}/projects/{PROJECT}", json={"description": "AuthN demo"}, timeout=30)
    session.post(
        f"{base}/users/{CLIENT}",
        json={"projects": [{"project": PROJECT, "roles": ["publisher", "consumer"]}]},
        timeout=30,
    )
    session.put(f"{base}/projects/{PROJECT}/topics/news", timeout=30)
    session.put(
        f"{base}/projects/{PROJECT}/subscriptions/reader", json={"topic": f"projects/{PROJECT}/topics/news"}, timeout=30
    )
    for kind, name in (("topics", "news"), ("subscriptions", "reader")):
        r = session.post(
            f"{base}/projects/{PROJECT}/{kind}/{name}:modifyAcl", json={"authorized_users": [CLIENT]}, timeout=30
        )
        if r.status_code != 200:
            raise DemoError(f"modifyAcl of {kind}/{name}: {r.status_code} {r.text}")
    bound = session.get(f"https://{HOST}:{AUTHN_PORT}/v1/bindings/{CLIENT}", timeout=30)
    if bound.status_code == 404:
        bind = ("admin", "bind-dn", CLIENT, "--user", CLIENT, "--host", HOST, "--cert", files["client_cert"])
        _ams(*bind, config=config)
    say(f"certificate {files['client_cert']} bound to user {CLIENT!r} on host {HOST}")


def _use(files: dict[str, str]) -> None:
    """What a client does: argo-ams-library in certificate mode, unchanged."""
    from argo_ams_library import AmsMessage, ArgoMessagingService  # type: ignore[import-untyped]

    os.environ["REQUESTS_CA_BUNDLE"] = files["ca"]  # how the library verifies the servers
    client = ArgoMessagingService(
        endpoint=HOST, project=PROJECT, cert=files["client_cert"], key=files["client_key"], authn_port=AUTHN_PORT
    )
    client.publish("news", [AmsMessage(data="hello through a certificate")])
    pulled = client.pull_sub("reader", num=10, return_immediately=True)
    if pulled:
        client.ack_sub("reader", [ack for ack, _ in pulled])
    say(f"argo-ams-library got a token with the certificate and pulled {len(pulled)} message(s)")
    print(
        f"""
Try it yourself:

    REQUESTS_CA_BUNDLE={files["ca"]} .venv/bin/python - <<'EOF'
    from argo_ams_library import ArgoMessagingService, AmsMessage
    ams = ArgoMessagingService(endpoint="{HOST}", project="{PROJECT}", authn_port={AUTHN_PORT},
                               cert="{files["client_cert"]}", key="{files["client_key"]}")
    ams.publish("news", [AmsMessage(data="hi")])
    print(ams.pull_sub("reader", num=1, return_immediately=True))
    EOF

    curl --cacert {files["ca"]} --cert {files["client_cert"]} --key {files["client_key"]} \\
        https://{HOST}:{AUTHN_PORT}/v1/service-types/ams/hosts/{HOST}:authx509

Stop with: make authn-demo-down
"""
    )


def down() -> None:
    for name in ("authn", "ams"):
        if toolkit.terminate(name, DEMO / f"{name}.pid", MARKER, 30, say):
            say(f"{name} stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("up", "down"))
    args = parser.parse_args(argv)
    try:
        up() if args.command == "up" else down()
    except DemoError as exc:
        say(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
