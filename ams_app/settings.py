"""One typed settings object: defaults <- YAML file <- ``AMS_*`` environment <- command line."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml


class SettingsError(ValueError):
    """A setting has a value of the wrong type or out of range."""


@dataclass
class Settings:
    # --- listening -------------------------------------------------------------------------
    #: Address to bind; keep it private behind a load balancer.
    host: str = "127.0.0.1"
    #: TCP port of the API.
    port: int = 8080
    #: PEM certificate and key: when both are set the service speaks HTTPS itself.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Client connections held at once (each long-poll pull holds one). At the limit, a new
    #: connection closes the oldest idle one (no request under way); when every one is busy it
    #: gets 503 at once.
    max_connections: int = 1000
    #: Seconds a connection may stay silent (idle keep-alive, or a request trickling in).
    client_timeout: float = 60.0
    #: Seconds from a request's first byte to the end of its headers, however they trickle in.
    request_head_timeout: float = 10.0
    #: Seconds to receive a request's whole body, however it trickles in.
    request_body_timeout: float = 60.0
    #: Seconds that in-flight requests get to finish after SIGTERM.
    shutdown_timeout: float = 15.0
    #: Seconds an idle keep-alive connection stays open after SIGTERM (at most shutdown_timeout), so
    #: that a proxy reusing connections to this node sees it stop before the connection goes.
    shutdown_idle_seconds: float = 8.0
    #: Name of this node in the operational metrics (default: the host name).
    node_name: str = ""
    #: Seconds between flushes of the usage counters to the store (a crash loses at most this much).
    metrics_flush_seconds: float = 2.0
    #: Who may read the Prometheus text at /metrics: ``token`` (service_admin or metrics_viewer),
    #: ``open`` (anyone who reaches the port) or ``off``.
    prometheus_access: str = "token"
    #: At most this many series per per-topic or per-subscription family on the Prometheus page
    #: (the largest first; per-project figures are always whole; docs/monitoring.md). 0: none.
    prometheus_series_limit: int = 500
    #: Host name reported by /v1/version (omitted when empty).
    proxy_hostname: str = ""

    # --- backend ---------------------------------------------------------------------------
    #: Which backend pair to use: ``embedded`` keeps everything in SQLite under data_dir;
    #: ``kafka`` keeps messages in Apache Kafka and metadata in MongoDB.
    backend: str = "embedded"
    #: Where the embedded backend keeps its databases.
    data_dir: str = "/var/lib/ams"
    #: Messages older than this are removed from the embedded log (0 keeps them for ever).
    log_retention_seconds: int = 7 * 24 * 3600

    #: MongoDB connection string (backend kafka); credentials may go in it (keep the file 0640).
    mongo_uri: str = "mongodb://127.0.0.1:27017"
    #: MongoDB database holding the metadata.
    mongo_database: str = "argo_msg"
    #: Kafka bootstrap servers, comma-separated host:port. Empty: discover them in ZooKeeper.
    kafka_bootstrap_servers: str = ""
    #: ZooKeeper ensemble, comma-separated host:port, to discover brokers (when no bootstrap list).
    zookeeper_hosts: str = ""
    #: ZooKeeper path under which Kafka keeps its znodes (its chroot), e.g. /kafka.
    kafka_znode: str = ""
    #: Replication factor of the Kafka topics AMS creates.
    kafka_replication_factor: int = 1
    #: Seconds a Kafka operation may take before the request fails with 503.
    kafka_timeout_seconds: float = 30.0

    # --- auth ------------------------------------------------------------------------------
    #: Bootstrap key that acts as a service admin; empty disables it.
    service_token: str = ""
    #: Enforce per-topic and per-subscription ACLs for publishers and consumers.
    per_resource_auth: bool = True

    # --- messaging -------------------------------------------------------------------------
    #: Longest time a pull with returnImmediately=false waits for messages (seconds).
    pull_wait_seconds: float = 10.0
    #: Ack deadline given to subscriptions created without one (seconds).
    default_ack_deadline: int = 10
    #: Most messages one pull returns.
    max_pull_messages: int = 1000
    #: Most payload bytes one pull returns (at least one message is always returned).
    max_pull_bytes: int = 10 * 1024 * 1024
    #: Largest message accepted: decoded data plus attribute keys and values (bytes).
    max_message_bytes: int = 1024 * 1024
    #: Most messages in one publish request.
    max_publish_messages: int = 1000
    #: Largest request body accepted (bytes).
    max_request_bytes: int = 10 * 1024 * 1024
    #: Most attributes on one message.
    max_attributes: int = 100
    # --- consumption on several nodes (backend kafka) ----------------------------------------
    #: Backend kafka with zookeeper_hosts: each node caches the users, projects, topics and
    #: subscriptions that requests look up, and checks one ZooKeeper znode per request for
    #: changes made through any node (docs/production.md). Off: every lookup asks MongoDB.
    metadata_cache: bool = True
    #: One node at a time owns a pull subscription's leases (a ZooKeeper claim), keeps them in
    #: memory and writes only acknowledgements to the store; other nodes forward the
    #: subscription's pull, acknowledge, offsets and modifyOffset requests to it. Off: every node
    #: changes the cursor in the store with compare-and-swap (docs/production.md).
    consume_owner: bool = False
    #: Base URL at which the other nodes reach this node's API, e.g. http://ams1:8080 (empty:
    #: built from host, port and TLS, with node_name or the host name when host is 0.0.0.0).
    advertise_url: str = ""
    #: ZooKeeper path of the subscription owners. Empty: ``/ams-consume/{mongo_database}``.
    consume_znode: str = ""
    #: ZooKeeper session timeout of a node as an owner (seconds): how soon a dead node's
    #: subscriptions move to another; an owner that cannot confirm its session within a third of
    #: it stops handing out leases.
    consume_session_seconds: float = 6.0
    #: PEM bundle of the CAs that other nodes' certificates are verified against when a request
    #: is forwarded over HTTPS (empty: the system's).
    forward_ca_file: str = ""

    # --- push delivery ---------------------------------------------------------------------
    #: Push subscriptions can be configured.
    push_enabled: bool = True
    #: Where push deliveries run: ``in-process`` (inside ``ams serve``) or ``external`` (only
    #: ``ams push-worker`` processes deliver; this node just reports their status).
    push_worker: str = "in-process"
    #: The user that push workers act as: added to the ACL of every active push subscription
    #: (created with service role push_worker when first needed).
    push_worker_user: str = "push_worker_0"
    #: Port on which ``ams push-worker`` serves its Prometheus page (``/metrics`` on ``host``,
    #: with the API's ``prometheus_access``); 0: none (docs/monitoring.md).
    push_worker_metrics_port: int = 0
    #: ZooKeeper path under which push workers (backend kafka) register and own subscriptions.
    #: Empty: ``/ams-push/{mongo_database}``, so that deployments sharing an ensemble stay apart.
    push_znode: str = ""
    #: ZooKeeper session timeout of a push worker (seconds): how soon a dead worker's
    #: subscriptions move to another.
    push_session_seconds: float = 6.0
    #: Seconds between two scans of the push subscriptions (new, changed, deleted).
    push_scan_seconds: float = 2.0
    #: Seconds a push endpoint (or its verification) may take to answer.
    push_timeout_seconds: float = 30.0
    #: Verify the TLS certificates of push endpoints.
    push_tls_verify: bool = True
    #: PEM bundle of the CAs that push endpoints' certificates are verified against
    #: (empty: the system's).
    push_ca_file: str = ""
    #: Most push requests one worker has in flight at once.
    push_max_in_flight: int = 16
    #: Most push requests per second one worker sends (0: no limit).
    push_max_rate: float = 200.0

    # --- AuthN: certificates in, tokens out (ams authn; docs/authn.md) ---------------------
    #: Address ``ams authn`` binds.
    authn_host: str = "127.0.0.1"
    #: TCP port of ``ams authn`` (HTTPS only).
    authn_port: int = 8443
    #: PEM certificate and key of ``ams authn``'s listener (empty: tls_cert and tls_key).
    authn_tls_cert: str = ""
    authn_tls_key: str = ""
    #: PEM bundle of the CAs that client certificates are verified against.
    authn_ca_file: str = ""
    #: Directory of CA files (every ``*.pem``; the IGTF layout of /etc/grid-security/certificates).
    authn_ca_dir: str = ""
    #: Check client certificates against the CRLs in authn_ca_dir (``*.r0``, ``*.crl.pem``), as
    #: fetch-crl keeps them; a CA without a CRL there then fails every certificate it issued.
    authn_check_crls: bool = False
    #: Most connections ``ams authn`` holds at once.
    authn_max_connections: int = 200

    # --- logging ---------------------------------------------------------------------------
    log_level: str = "INFO"

    def validate(self) -> Settings:
        if not 0 < self.port < 65536:
            raise SettingsError("port must be between 1 and 65535")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("tls_cert and tls_key must be given together")
        if self.backend not in ("embedded", "kafka"):
            raise SettingsError(f"unknown backend {self.backend!r} (known: embedded, kafka)")
        if self.backend == "kafka" and not (self.kafka_bootstrap_servers or self.zookeeper_hosts):
            raise SettingsError("backend kafka needs kafka_bootstrap_servers or zookeeper_hosts")
        if self.kafka_replication_factor < 1:
            raise SettingsError("kafka_replication_factor must be at least 1")
        for name in (
            "max_connections",
            "max_pull_messages",
            "max_pull_bytes",
            "max_message_bytes",
            "max_publish_messages",
            "max_request_bytes",
            "max_attributes",
            "push_max_in_flight",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be at least 1")
        if self.prometheus_access not in ("token", "open", "off"):
            raise SettingsError("prometheus_access must be token, open or off")
        if self.prometheus_series_limit < 0:
            raise SettingsError("prometheus_series_limit must be 0 or more")
        if self.metrics_flush_seconds <= 0:
            raise SettingsError("metrics_flush_seconds must be positive")
        for name in ("client_timeout", "request_head_timeout", "request_body_timeout"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be positive")
        if self.shutdown_idle_seconds < 0:
            raise SettingsError("shutdown_idle_seconds must not be negative")
        if self.pull_wait_seconds < 0:
            raise SettingsError("pull_wait_seconds must not be negative")
        if not 1 <= self.default_ack_deadline <= 600:
            raise SettingsError("default_ack_deadline must be between 1 and 600")
        if not 0 <= self.push_worker_metrics_port <= 65535:
            raise SettingsError("push_worker_metrics_port must be a TCP port, or 0")
        if self.push_worker not in ("in-process", "external"):
            raise SettingsError("push_worker must be in-process or external")
        if self.backend == "kafka" and self.push_enabled and not self.zookeeper_hosts:
            raise SettingsError("push delivery on backend kafka needs zookeeper_hosts (or push_enabled: false)")
        if self.consume_owner and self.backend == "kafka" and not self.zookeeper_hosts:
            raise SettingsError("consume_owner on backend kafka needs zookeeper_hosts")
        for name in ("push_session_seconds", "push_scan_seconds", "push_timeout_seconds", "consume_session_seconds"):
            if getattr(self, name) <= 0:
                raise SettingsError(f"{name} must be positive")
        if self.push_max_rate < 0:
            raise SettingsError("push_max_rate must not be negative")
        if not 0 < self.authn_port < 65536:
            raise SettingsError("authn_port must be between 1 and 65535")
        if bool(self.authn_tls_cert) != bool(self.authn_tls_key):
            raise SettingsError("authn_tls_cert and authn_tls_key must be given together")
        if self.authn_max_connections < 1:
            raise SettingsError("authn_max_connections must be at least 1")
        if self.authn_check_crls and not self.authn_ca_dir:
            raise SettingsError("authn_check_crls needs authn_ca_dir (where the CRLs are)")
        return self

    def authn_problems(self) -> list[str]:
        """What ``ams authn`` lacks to start (the API server does not need any of it)."""
        problems = []
        if not (self.authn_tls_cert or self.tls_cert):
            problems.append("authn_tls_cert and authn_tls_key (or tls_cert and tls_key): AuthN speaks HTTPS only")
        if not (self.authn_ca_file or self.authn_ca_dir):
            problems.append("authn_ca_file or authn_ca_dir: the CAs that client certificates are verified against")
        return problems

    @property
    def consume_root(self) -> str:
        """The ZooKeeper path of the subscription owners."""
        return (self.consume_znode or f"/ams-consume/{self.mongo_database}").rstrip("/")

    @property
    def node_url(self) -> str:
        """Where the other nodes reach this one (advertise_url, or built from the listener)."""
        if self.advertise_url:
            return self.advertise_url.rstrip("/")
        import socket

        host = self.host if self.host not in ("0.0.0.0", "::", "") else (self.node_name or socket.getfqdn())
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{host}:{self.port}"

    @property
    def push_root(self) -> str:
        """The ZooKeeper path of the push workers."""
        return (self.push_znode or f"/ams-push/{self.mongo_database}").rstrip("/")


_FIELDS = {f.name: f for f in fields(Settings)}


def _coerce(name: str, value: Any) -> Any:
    kind = _FIELDS[name].type
    if value is None:
        if "None" in str(kind):
            return None
        raise SettingsError(f"{name} must not be empty")
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError(value)
            return int(value)
        if kind == "float":
            return float(value)
        text = str(value)
        return text if text or "None" not in str(kind) else None
    except (TypeError, ValueError) as exc:
        raise SettingsError(f"{name}: {value!r} is not a valid {kind}") from exc


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the settings from the layers, in increasing precedence."""
    values: dict[str, Any] = {}
    env = os.environ if environ is None else environ
    config_file = config_file or env.get("AMS_CONFIG") or None
    if config_file:
        loaded = yaml.safe_load(Path(config_file).read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise SettingsError(f"{config_file}: the settings file must hold a mapping")
        for key, value in loaded.items():
            if key not in _FIELDS:
                raise SettingsError(f"{config_file}: unknown setting {key!r}")
            values[key] = _coerce(key, value)
    for key, value in env.items():
        if key.startswith("AMS_") and key != "AMS_CONFIG":
            name = key[4:].lower()
            if name in _FIELDS:
                values[name] = _coerce(name, value)
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = _coerce(key, value)
    return dataclasses.replace(Settings(), **values).validate()
