"""The ``ams`` command: ``serve``, ``authn``, ``push-worker``, ``check-config``, the admin verbs and
``republish``."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ams_app import __version__
from ams_app.settings import Settings, SettingsError, load_settings


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gives (None: not given)."""
    return {
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
        "data_dir": args.data_dir,
        "tls_cert": getattr(args, "tls_cert", None),
        "tls_key": getattr(args, "tls_key", None),
        "grpc_port": getattr(args, "grpc_port", None),
        "grpc_emulator_user": getattr(args, "grpc_emulator_user", None),
        "workers": getattr(args, "workers", None),
    }


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(args.config, overrides=_overrides(args))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ams", description="ARGO Messaging Service")
    parser.add_argument("--version", action="version", version=f"ams {__version__}", help="print the release")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="YAML settings file (also AMS_CONFIG)")
        p.add_argument("--data-dir", help="where the embedded backend keeps its data")

    serve = sub.add_parser("serve", help="run the API server")
    common(serve)
    serve.add_argument("--host", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8080)")
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    serve.add_argument("--tls-key", help="PEM private key of --tls-cert")
    serve.add_argument("--grpc-port", type=int, help="port of the Pub/Sub gRPC API (default 0: none; docs/pubsub.md)")
    serve.add_argument(
        "--grpc-emulator-user", help="the user that gRPC calls without credentials act as (loopback only)"
    )
    serve.add_argument(
        "--workers",
        type=int,
        help="processes serving the API (default 1; 0: one per CPU core; backend kafka; docs/production.md)",
    )

    authn = sub.add_parser("authn", help="run AuthN: client certificates in, AMS tokens out (docs/authn.md)")
    common(authn)

    worker = sub.add_parser("push-worker", help="deliver push subscriptions (backend kafka; ZooKeeper shares them)")
    common(worker)

    check = sub.add_parser("check-config", help="validate the settings (exit 2 with the reason when they are not)")
    common(check)

    admin = sub.add_parser("admin", help="administer projects and users from the shell")
    verbs = admin.add_subparsers(dest="verb", required=True)
    boot = verbs.add_parser("bootstrap", help="ensure a service admin user exists; print its token")
    common(boot)
    boot.add_argument("--name", default="admin")
    boot.add_argument("--host", help="the address `ams serve` will listen on, for the example it prints")
    boot.add_argument("--port", type=int, help="the port `ams serve` will listen on, for the example it prints")
    project = verbs.add_parser("create-project", help="create a project")
    common(project)
    project.add_argument("name")
    project.add_argument("--description", default="")
    user = verbs.add_parser("create-user", help="create a user and print it with its token")
    common(user)
    user.add_argument("name")
    user.add_argument("--email", default="")
    user.add_argument("--service-role", action="append", default=[], help="a service role (repeatable)")
    user.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="PROJECT[:ROLE,ROLE]",
        help="membership with roles, e.g. ARGO:publisher,consumer (repeatable)",
    )
    token = verbs.add_parser("show-token", help="print a user's token")
    common(token)
    token.add_argument("name")
    reseal = verbs.add_parser(
        "reseal-tokens",
        help="seal every user's token under the first key of token_key_file; print how many changed "
        "(docs/production.md, 'Tokens at rest')",
    )
    common(reseal)
    metrics = verbs.add_parser(
        "metrics", help="write the service-wide Prometheus figures to a file (for a textfile collector)"
    )
    common(metrics)
    metrics.add_argument("--output", required=True, help="the file to replace atomically, e.g. .../ams.prom")

    bind = verbs.add_parser(
        "bind-dn", help="bind a certificate's DN on a host to a user, for AuthN (docs/authn.md); print the binding"
    )
    common(bind)
    bind.add_argument("name", help="the binding's name")
    bind.add_argument("--user", required=True, help="the AMS user whose token the certificate gets")
    bind.add_argument("--host", required=True, help="the AMS host name the client uses")
    what = bind.add_mutually_exclusive_group(required=True)
    what.add_argument("--dn", help="the subject DN, RFC 4514")
    what.add_argument("--cert", help="a PEM certificate: bind its subject DN")
    bind.add_argument("--service-type", default="ams", help="created, or given the host, when needed (default ams)")

    hosts = verbs.add_parser(
        "authn-hosts", help="make these the host names of an AuthN service type (docs/authn.md); says if it changed"
    )
    common(hosts)
    hosts.add_argument("hosts", nargs="+", metavar="HOST", help="a host name clients use for AMS")
    hosts.add_argument("--service-type", default="ams", help="created when missing (default ams)")

    layout = verbs.add_parser(
        "layout",
        help="print the stored layout versions and this release's as JSON; exit 0: this release opens them as "
        "they are, 3: it would upgrade them, 2: they are newer than it knows (docs/production.md, 'Upgrading')",
    )
    common(layout)

    backup = sub.add_parser(
        "backup", help="write a checksummed archive of the metadata (and embedded messages) into a directory"
    )
    common(backup)
    backup.add_argument("--to", required=True, metavar="DIR", help="the directory the archive is written to")
    backup.add_argument("--keep", type=int, metavar="N", help="then remove all but the N newest archives there")
    backup.add_argument("--metrics-file", metavar="PATH", help="record the outcome there, for a textfile collector")
    restore = sub.add_parser("restore", help="restore an archive of `ams backup` (docs/production.md)")
    common(restore)
    restore.add_argument("archive", help="the .tar that `ams backup` wrote")
    restore.add_argument("--replace", action="store_true", help="replace the projects and users the store holds")
    restore.add_argument("--verify", action="store_true", help="only check the archive; write nothing")

    migrate = sub.add_parser("migrate", help="take over from another service (docs/migration.md)")
    sources = migrate.add_subparsers(dest="source", required=True)
    argo = sources.add_parser(
        "from-argo", help="take over the metadata of the original ARGO AMS from its MongoDB (read only)"
    )
    common(argo)
    source_uri = os.environ.get("ARGO_SOURCE_MONGO_URI") or None
    argo.add_argument(
        "--source-mongo-uri",
        default=source_uri,
        required=source_uri is None,
        help="the original's MongoDB, e.g. mongodb://old:27017 (default: ARGO_SOURCE_MONGO_URI, which keeps "
        "credentials off the command line)",
    )
    argo.add_argument("--source-database", required=True, help="the original's database name")
    argo.add_argument("--dry-run", action="store_true", help="say what would be done, write nothing")
    argo.add_argument(
        "--copy-messages-from",
        metavar="KAFKA_BOOTSTRAP",
        help="backend embedded only: copy each topic's messages from the original's Kafka (host:port,...) into the "
        "embedded log at their Kafka offsets, with the settings' kafka_security_protocol and its options",
    )

    republish = sub.add_parser("republish", help="republish a subscription's messages to topics chosen per message")
    republish.add_argument("config_file", metavar="CONFIG", help="the republisher's YAML file (docs/republisher.md)")

    # its arguments are parsed by ams_app/probe.py (main() dispatches it first): bad ones exit 3
    sub.add_parser("probe", help="monitoring check: publish a message, pull it back (Nagios exit codes)")
    return parser


def _reach(settings: Settings) -> str:
    """The URL on this machine of a server with these settings (loopback for one that listens on
    every address)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(settings.host, settings.host)
    scheme = "https" if settings.tls_cert else "http"
    return f"{scheme}://[{host}]:{settings.port}" if ":" in host else f"{scheme}://{host}:{settings.port}"


def _admin(args: argparse.Namespace, settings: Settings) -> int:
    from ams_app.api.views import project_view, user_view
    from ams_app.auth import SERVICE_CALLER
    from ams_app.backends import open_backends
    from ams_app.backends.errors import BackendError
    from ams_app.errors import AmsError
    from ams_app.service import requests
    from ams_app.service.core import AmsService

    if args.verb == "reseal-tokens" and not settings.token_key_file:
        print("ams: token_key_file is not set: there is no key to seal the tokens with", file=sys.stderr)
        return 1
    store, log = open_backends(settings)
    svc = AmsService(settings, store, log)
    try:
        if args.verb == "bootstrap":
            existing = store.get_user(name=args.name)
            if existing is None:
                admin = requests.new_user({"service_roles": ["service_admin"]})
                existing = svc.create_user(SERVICE_CALLER, args.name, admin)
                print(f"created service admin {args.name!r}", file=sys.stderr)
            print(f"token of {args.name!r}: {existing.token}", file=sys.stderr)
            print(f"try: curl -H 'x-api-key: {existing.token}' {_reach(settings)}/v1/projects")
        elif args.verb == "create-project":
            created = svc.create_project(SERVICE_CALLER, args.name, args.description)
            print(json.dumps(project_view(svc, created), indent=2))
        elif args.verb == "create-user":
            projects = []
            for spec in args.project:
                name, _, roles = spec.partition(":")
                projects.append({"project": name, "roles": [r for r in roles.split(",") if r]})
            body = {"email": args.email, "service_roles": args.service_role, "projects": projects}
            created_user = svc.create_user(SERVICE_CALLER, args.name, requests.new_user(body))
            print(json.dumps(user_view(svc, created_user, privileged=True), indent=2))
        elif args.verb == "show-token":
            print(svc.user(args.name).token)
        elif args.verb == "reseal-tokens":
            print(f"{store.reseal_tokens()} user(s) resealed under the first key of {settings.token_key_file}")
        elif args.verb == "metrics":
            from ams_app.telemetry import write_textfile

            write_textfile(Path(args.output), svc.service_figures_text().decode())
        elif args.verb == "bind-dn":
            from ams_app.authn.admin import bind_dn

            print(json.dumps(bind_dn(store, args), indent=2))
        elif args.verb == "authn-hosts":
            from ams_app.authn.admin import set_hosts

            print(set_hosts(store, args.service_type, args.hosts))
    except AmsError as exc:
        print(f"ams: {exc.message}", file=sys.stderr)
        return 1
    except (OSError, BackendError) as exc:
        print(f"ams: {exc}", file=sys.stderr)
        return 1
    finally:
        svc.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["probe"]:  # an API client with Nagios exit codes: none of the service's settings
        from ams_app.probe import main as probe

        return probe(words[1:])
    args = _parser().parse_args(argv)
    if args.command == "republish":  # an API client: none of the service's settings
        from ams_app.republish.loop import main as republish

        return republish(args.config_file)
    try:
        settings = _settings(args)
    except (SettingsError, OSError) as exc:
        print(f"ams: {exc}", file=sys.stderr)
        return 2
    from ams_app.tokenseal import TokenSealError

    if args.command == "check-config":
        from ams_app.backends import token_keyring

        try:
            token_keyring(settings)
        except TokenSealError as exc:
            print(f"ams: {exc}", file=sys.stderr)
            return 2
        where = f"{settings.host}:{settings.port}"
        if settings.workers != 1:
            own = settings.worker_ports
            where += f" with {settings.worker_count} workers (their own ports {own.start}-{own.stop - 1})"
        print(f"settings are valid: backend {settings.backend}, listening on {where}, push {settings.push_worker}")
        return 0
    from ams_app.backends.errors import LayoutRefused, StoreBusy
    from ams_app.backends.sqlite.db import SchemaTooNew

    try:
        return _command(args, settings)
    # data of a newer release, not ours, or in a restore's hands: say so, no traceback
    except (SchemaTooNew, LayoutRefused, StoreBusy) as exc:
        print(f"ams: {exc}", file=sys.stderr)
        return 2
    except TokenSealError as exc:  # token_key_file unusable, or not the keys the store's tokens need
        print(f"ams: {exc}", file=sys.stderr)
        return 2


def _migrate(args: argparse.Namespace, settings: Settings) -> int:
    """``ams migrate from-argo``: the report on stdout; 0 once done (what could not be mapped is
    listed, it does not fail the run), 1 when the source (MongoDB, or Kafka for the messages) cannot
    be read or is the destination, 2 for ``--copy-messages-from`` on the Kafka backend."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    from ams_app.backends import token_keyring
    from ams_app.migrate.argo import migrate
    from ams_app.migrate.messages import CopyError, MessageCopy

    if args.copy_messages_from and settings.backend != "embedded":
        print(
            "ams: --copy-messages-from is for the embedded backend: on the Kafka backend the messages stay in "
            "the Kafka topics, which both servers name alike",
            file=sys.stderr,
        )
        return 2
    same_server = args.source_mongo_uri.rstrip("/") == settings.mongo_uri.rstrip("/")
    if settings.backend == "kafka" and args.source_database == settings.mongo_database and same_server:
        print("ams: the source is the destination database: give ams a database of its own", file=sys.stderr)
        return 1
    client: MongoClient[dict[str, Any]] = MongoClient(args.source_mongo_uri, serverSelectionTimeoutMS=10_000)
    copier: MessageCopy | None = None
    log: Any = None
    try:
        source = client[args.source_database]
        try:
            present = source.list_collection_names()
        except PyMongoError as exc:
            print(f"ams: the source cannot be read: {exc}", file=sys.stderr)
            return 1
        if "users" not in present or "projects" not in present:
            print(
                f"ams: {args.source_database!r} has no projects and users: not the original's database", file=sys.stderr
            )
            return 1
        if settings.backend == "embedded":
            from ams_app.backends.sqlite import open_embedded

            store: Any
            store, log = open_embedded(settings, token_keyring(settings))
        else:
            from ams_app.backends.mongo.store import MongoMetadataStore

            keyring = token_keyring(settings)
            store = MongoMetadataStore(
                settings.mongo_uri, settings.mongo_database, settings.kafka_timeout_seconds, keyring
            )
        try:
            if args.copy_messages_from:
                from ams_app.backends.kafka.connect import client_security

                timeout = settings.kafka_timeout_seconds
                copier = MessageCopy(args.copy_messages_from, client_security(settings), log, timeout)
                copier.check()  # Kafka answers before anything is written
            report = migrate(source, store, dry_run=args.dry_run, messages=copier)
        except CopyError as exc:
            if exc.report is not None:  # the metadata was taken over: what was done, then why it stopped
                print("\n".join(exc.report.lines()))
            print(f"ams: {exc}", file=sys.stderr)
            return 1
        finally:
            store.close()
    finally:
        if copier is not None:
            copier.close()
        if log is not None:
            log.close()
        client.close()
    print("\n".join(report.lines()))
    return 0


def _backup(args: argparse.Namespace, settings: Settings) -> int:
    """``ams backup``: the archive's path on stdout; 1 (the reason on stderr, the failure in the
    metrics file) when it could not be written."""
    import time
    from datetime import UTC, datetime

    from pymongo.errors import PyMongoError

    from ams_app import backup
    from ams_app.backends.errors import LayoutRefused, StoreBusy

    if args.keep is not None and args.keep < 1:
        print("ams: --keep must be at least 1", file=sys.stderr)
        return 2
    metrics = Path(args.metrics_file) if args.metrics_file else None
    started = time.monotonic()
    try:
        path = backup.backup(settings, Path(args.to), now=datetime.now(UTC))
        if args.keep is not None:
            for gone in backup.prune(Path(args.to), args.keep):
                print(f"removed {gone}", file=sys.stderr)
    except (backup.BackupError, LayoutRefused, StoreBusy, OSError, PyMongoError, sqlite3.Error) as exc:
        print(f"ams: backup failed: {exc}", file=sys.stderr)
        if metrics is not None:
            backup.write_metrics(metrics, success=None, failed_at=time.time())
        return 1
    if metrics is not None:
        backup.write_metrics(
            metrics, success=(time.time(), path.stat().st_size, time.monotonic() - started), failed_at=None
        )
    print(path)
    return 0


def _restore(args: argparse.Namespace, settings: Settings) -> int:
    """``ams restore``: what was checked and restored on stdout; 1 with the reason when refused."""
    from pymongo.errors import PyMongoError

    from ams_app import backup
    from ams_app.backends.errors import BackendError, StoreBusy

    try:
        if args.verify:
            print("\n".join(backup.check(Path(args.archive), settings.backend).summary()))
            return 0
        done = backup.restore(settings, Path(args.archive), replace=args.replace)
    except (backup.BackupError, StoreBusy, OSError, PyMongoError, BackendError, sqlite3.Error) as exc:
        print(f"ams: restore failed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(done.lines()))
    return 0


def _layout(settings: Settings) -> int:
    from pymongo.errors import PyMongoError

    from ams_app.backup import known_layouts, stored_layouts

    try:
        stored = stored_layouts(settings)
    except (PyMongoError, OSError, sqlite3.Error) as exc:
        print(f"ams: the stored layout cannot be read: {exc}", file=sys.stderr)
        return 1
    known = known_layouts(settings.backend)
    stores = {name: {"stored": stored[name], "known": known[name]} for name in known}
    print(json.dumps({"release": __version__, "backend": settings.backend, "stores": stores}, sort_keys=True))
    present = {name: version for name, version in stored.items() if version is not None}
    if any(version > known[name] for name, version in present.items()):
        return 2
    return 3 if any(version < known[name] for name, version in present.items()) else 0


def _command(args: argparse.Namespace, settings: Settings) -> int:
    if args.command == "migrate":
        return _migrate(args, settings)
    if args.command == "backup":
        return _backup(args, settings)
    if args.command == "restore":
        return _restore(args, settings)
    if args.command == "admin" and args.verb == "layout":
        return _layout(settings)
    if args.command == "serve" and settings.workers != 1:
        from ams_app.workers import run_workers  # a parent: never ams_app.serve, which patches at import

        return run_workers(settings, args.config, _overrides(args))
    if args.command == "serve":
        from ams_app.serve import serve

        return serve(settings)
    if args.command == "authn":
        from ams_app.authn.serve import serve_authn

        return serve_authn(settings)
    if args.command == "push-worker":
        from ams_app.push.run import run_worker

        return run_worker(settings)
    return _admin(args, settings)


if __name__ == "__main__":
    raise SystemExit(main())
