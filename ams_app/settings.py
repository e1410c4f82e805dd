"""One typed settings object: defaults <- YAML file <- ``AMS_*`` environment <- command line.

Each setting's legal values are declared once, on its field: ``setting(default, choices=...)`` or
``setting(default, at_least=..., above=..., at_most=...)`` keeps a ``Constraint`` in the field's
metadata. ``Settings.validate()`` checks every declared constraint in one loop, then the rules
that tie several settings together, which it spells out by hand. The same ``Constraint`` words
the legal values for the table of docs/configuration.md (``tests/unit/ams_app/test_docs.py``) and
is compared with the ams role's argument specs (``tests/static/test_settings_specs.py``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

_T = TypeVar("_T")
#: The key of a field's metadata that holds its Constraint.
_CONSTRAINT = "constraint"


class SettingsError(ValueError):
    """A setting has a value of the wrong type or out of range."""


@dataclass(frozen=True)
class Constraint:
    """The legal values of one setting: a list of strings, or a range of numbers.

    ``describe()`` is the one wording of them: in ``validate()``'s message, in the configuration
    table of docs/configuration.md (with ``markdown=True``), and in the tests that hold the role's
    argument specs to it.
    """

    #: The accepted strings, in the order they are shown; empty for a numeric setting.
    choices: tuple[str, ...] = ()
    #: The choices match in any case (the reader of the setting upper-cases the value).
    ignore_case: bool = False
    #: Smallest accepted number (excluded when low_exclusive); None: no lower bound.
    low: float | None = None
    #: Largest accepted number (included); None: no upper bound.
    high: float | None = None
    low_exclusive: bool = False

    def __post_init__(self) -> None:
        ranged = self.low is not None or self.high is not None
        if bool(self.choices) == ranged:
            raise TypeError("a Constraint has choices or bounds, one of the two")
        if self.ignore_case and not self.choices:
            raise TypeError("ignore_case applies to choices")
        if self.low_exclusive and self.low is None:
            raise TypeError("low_exclusive needs low")
        if self.low is not None and self.high is not None and self.low >= self.high:
            raise TypeError(f"empty range: {self.low} to {self.high}")

    def allows(self, value: object) -> bool:
        """Whether ``value`` (already of the setting's type) is legal."""
        if self.choices:
            if not isinstance(value, str):
                return False
            if self.ignore_case:
                return value.upper() in {choice.upper() for choice in self.choices}
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        # written so that NaN, which compares false with everything, is refused
        if self.low is not None and not (self.low < value if self.low_exclusive else self.low <= value):
            return False
        return self.high is None or value <= self.high

    def describe(self, markdown: bool = False) -> str:
        """The legal values in words, e.g. ``token, open or off``, ``between 1 and 65535``,
        ``at least 0``, ``more than 0``; with ``markdown`` the choices are in backticks."""
        if self.choices:
            shown = [f"`{choice}`" if markdown else choice for choice in self.choices]
            text = " or ".join(shown) if len(shown) < 3 else f"{', '.join(shown[:-1])} or {shown[-1]}"
            return f"{text} (any case)" if self.ignore_case else text
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None and not self.low_exclusive:
            return f"between {low} and {high}"
        words = []
        if self.low is not None:
            words.append(f"more than {low}" if self.low_exclusive else f"at least {low}")
        if self.high is not None:
            words.append(f"at most {high}")
        return " and ".join(words)


def _number(bound: float | None) -> str:
    if isinstance(bound, float) and bound.is_integer():
        return str(int(bound))
    return str(bound)


def setting(
    default: _T,
    *,
    choices: tuple[str, ...] = (),
    ignore_case: bool = False,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
) -> _T:
    """A field of ``Settings`` with its legal values: ``choices`` (``ignore_case`` to match in any
    case), or bounds: ``at_least`` (included) or ``above`` (excluded), and ``at_most`` (included)."""
    if at_least is not None and above is not None:
        raise TypeError("setting(): give at_least or above, not both")
    rule = Constraint(
        choices=choices,
        ignore_case=ignore_case,
        low=above if above is not None else at_least,
        high=at_most,
        low_exclusive=above is not None,
    )
    return field(default=default, metadata={_CONSTRAINT: rule})


@dataclass
class Settings:
    """Every AMS setting: a ``#:`` comment, then ``name: type = default``, or with legal values
    ``name: type = setting(default, choices=(...))`` or ``setting(default, at_least=1, at_most=600)``
    (numbers always declare theirs); and a row in docs/configuration.md, whose "Allowed:" sentence
    is ``constraint(name).describe(markdown=True)``."""

    # --- listening -------------------------------------------------------------------------
    #: Address to bind; keep it private behind a load balancer.
    host: str = "127.0.0.1"
    #: TCP port of the API.
    port: int = setting(8080, at_least=1, at_most=65535)
    #: PEM certificate and key: when both are set the service speaks HTTPS itself.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Client connections held at once (each long-poll pull holds one). At the limit, a new
    #: connection closes the oldest idle one (no request under way); when every one is busy it
    #: gets 503 at once.
    max_connections: int = setting(1000, at_least=1)
    #: Seconds a connection may stay silent (idle keep-alive, or a request trickling in).
    client_timeout: float = setting(60.0, above=0)
    #: Seconds from a request's first byte to the end of its headers, however they trickle in.
    request_head_timeout: float = setting(10.0, above=0)
    #: Seconds to receive a request's whole body, however it trickles in.
    request_body_timeout: float = setting(60.0, above=0)
    #: Seconds that in-flight requests get to finish after SIGTERM.
    shutdown_timeout: float = setting(15.0, at_least=0)
    #: Seconds an idle keep-alive connection stays open after SIGTERM (at most shutdown_timeout), so
    #: that a proxy reusing connections to this node sees it stop before the connection goes.
    shutdown_idle_seconds: float = setting(8.0, at_least=0)
    #: Name of this node in the operational metrics (default: the host name). With workers, each
    #: worker's is this with ``-w{i}`` after it.
    node_name: str = ""
    #: Seconds between flushes of the usage counters to the store (a crash loses at most this much).
    metrics_flush_seconds: float = setting(2.0, above=0)
    #: Who may read the Prometheus text at /metrics: ``token`` (service_admin or metrics_viewer),
    #: ``open`` (anyone who reaches the port) or ``off``.
    prometheus_access: str = setting("token", choices=("token", "open", "off"))
    #: At most this many series per per-topic or per-subscription family on the Prometheus page
    #: (the largest first; per-project figures are always whole; docs/monitoring.md). 0: none.
    prometheus_series_limit: int = setting(500, at_least=0)
    #: Seconds a scrape of /metrics waits for the service-wide figures it starts computing; when
    #: they take longer, the page has the last ones computed, with their age (docs/monitoring.md).
    prometheus_figures_wait: float = setting(3.0, at_least=0)
    #: Host name reported by /v1/version (omitted when empty).
    proxy_hostname: str = ""
    #: TCP port of Google's Pub/Sub v1 gRPC API on ``host`` (docs/pubsub.md), with TLS when
    #: tls_cert and tls_key are set; 0: no gRPC listener.
    grpc_port: int = setting(0, at_least=0, at_most=65535)
    #: Emulator mode, for developers: the name of the user whose rights gRPC calls without
    #: credentials get (Google's clients send none when PUBSUB_EMULATOR_HOST is set). Empty: such
    #: calls are UNAUTHENTICATED. Refused unless host is a loopback address.
    grpc_emulator_user: str = ""

    # --- a process per core (backend kafka; docs/production.md, "A process per core") ---------
    #: Processes serving this node's API: 1, one process (no parent); N > 1, a parent that starts N
    #: workers, each a node of its own (its name, its ports, its subscriptions) sharing port and
    #: grpc_port; 0, one worker per CPU core this process may run on. Backend kafka only.
    workers: int = setting(1, at_least=0, at_most=256)
    #: First of the workers' own API ports: worker i also listens on worker_port_base + i, where
    #: the other nodes forward to it (0: port + 1).
    worker_port_base: int = setting(0, at_least=0, at_most=65535)
    #: First of the workers' own gRPC ports (with grpc_port): worker i also listens on
    #: worker_grpc_port_base + i, where the other nodes relay gRPC calls to it (0: grpc_port + 1).
    worker_grpc_port_base: int = setting(0, at_least=0, at_most=65535)

    # --- backend ---------------------------------------------------------------------------
    #: Which backend pair to use: ``embedded`` keeps everything in SQLite under data_dir;
    #: ``kafka`` keeps messages in Apache Kafka and metadata in MongoDB.
    backend: str = setting("embedded", choices=("embedded", "kafka"))
    #: Where the embedded backend keeps its databases.
    data_dir: str = "/var/lib/ams"
    #: Messages older than this are removed from the embedded log (0 keeps them for ever).
    log_retention_seconds: int = setting(7 * 24 * 3600, at_least=0)

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
    kafka_replication_factor: int = setting(1, at_least=1)
    #: Seconds a Kafka operation may take before the request fails with 503.
    kafka_timeout_seconds: float = setting(30.0, above=0)

    # --- the links to Kafka and ZooKeeper (docs/production.md, "Security") ------------------
    #: How AMS talks to Kafka: ``PLAINTEXT``, ``SSL`` (TLS; mutual with kafka_cert_file) or
    #: ``SASL_SSL`` (TLS, and a SCRAM user and password).
    kafka_security_protocol: str = setting("PLAINTEXT", choices=("PLAINTEXT", "SSL", "SASL_SSL"))
    #: SCRAM mechanism of SASL_SSL.
    kafka_sasl_mechanism: str = setting("SCRAM-SHA-512", choices=("SCRAM-SHA-512", "SCRAM-SHA-256"))
    #: SCRAM user and password of SASL_SSL (a secret: keep the settings file 0640).
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = ""
    #: PEM bundle of the CAs that the brokers' certificates are verified against (empty: the system's).
    kafka_ca_file: str = ""
    #: PEM certificate and key that AMS presents to the brokers (SSL with client authentication).
    kafka_cert_file: str = ""
    kafka_key_file: str = ""
    #: The listener discovery takes from the brokers' registrations in ZooKeeper, e.g. CLIENT
    #: (empty: the first whose protocol is kafka_security_protocol).
    kafka_listener: str = ""
    #: Speak TLS to ZooKeeper, checking its certificate and host name.
    zookeeper_tls: bool = False
    #: PEM bundle of the CAs that ZooKeeper's certificate is verified against (empty: the system's).
    zookeeper_ca_file: str = ""
    #: PEM certificate and key that AMS presents to ZooKeeper; ZooKeeper then knows AMS by the
    #: certificate's subject, and the znodes AMS creates are that subject's alone.
    zookeeper_cert_file: str = ""
    zookeeper_key_file: str = ""

    # --- auth ------------------------------------------------------------------------------
    #: Bootstrap key that acts as a service admin; empty disables it.
    service_token: str = ""
    #: Enforce per-topic and per-subscription ACLs for publishers and consumers.
    per_resource_auth: bool = True
    #: Keyring file whose keys seal users' tokens in the metadata store, readable by the service
    #: only (docs/production.md, "Tokens at rest"); empty: tokens are kept in clear.
    token_key_file: str = ""

    # --- messaging -------------------------------------------------------------------------
    #: Longest time a pull with returnImmediately=false waits for messages (seconds).
    pull_wait_seconds: float = setting(10.0, at_least=0)
    #: Ack deadline given to subscriptions created without one (seconds).
    default_ack_deadline: int = setting(10, at_least=1, at_most=600)
    #: Most messages one pull returns.
    max_pull_messages: int = setting(1000, at_least=1)
    #: Most payload bytes one pull returns (at least one message is always returned).
    max_pull_bytes: int = setting(10 * 1024 * 1024, at_least=1)
    #: Largest message accepted: decoded data plus attribute keys and values (bytes).
    max_message_bytes: int = setting(1024 * 1024, at_least=1)
    #: Most messages in one publish request.
    max_publish_messages: int = setting(1000, at_least=1)
    #: Largest request body accepted (bytes).
    max_request_bytes: int = setting(10 * 1024 * 1024, at_least=1)
    #: Most attributes on one message.
    max_attributes: int = setting(100, at_least=1)
    # --- consumption on several nodes (backend kafka) ----------------------------------------
    #: Backend kafka with zookeeper_hosts: each node caches the users, projects, topics and
    #: subscriptions that requests look up, and checks one ZooKeeper znode per request for
    #: changes made through any node (docs/production.md). Off: every lookup asks MongoDB.
    metadata_cache: bool = True
    #: With metadata_cache: the znode's read sets a ZooKeeper watch, and until it fires requests
    #: take the generation without a read of their own (docs/production.md "Metadata cache").
    #: Off: a read per request (shared by the requests that begin while one is under way).
    metadata_watch: bool = True
    #: Backend kafka: one node at a time owns a pull subscription's leases (a ZooKeeper claim),
    #: keeps them in memory and writes only acknowledgements to the store; other nodes forward the
    #: subscription's pull, acknowledge, offsets and modifyOffset requests to it. Needs
    #: zookeeper_hosts. Off: every node changes the cursor in the store with compare-and-swap, as
    #: the embedded backend always does (it ignores this setting; docs/production.md).
    consume_owner: bool = True
    #: Base URL at which the other nodes reach this node's API, e.g. http://ams1:8080 (empty:
    #: built from host, port and TLS, with node_name or the host name when host is 0.0.0.0).
    advertise_url: str = ""
    #: ZooKeeper path of the subscription owners. Empty: ``/ams-consume/{mongo_database}``.
    consume_znode: str = ""
    #: ZooKeeper session timeout of a node as an owner (seconds): how soon a dead node's
    #: subscriptions move to another; an owner that cannot confirm its session within a third of
    #: it stops handing out leases.
    consume_session_seconds: float = setting(6.0, above=0)
    #: PEM bundle of the CAs that other nodes' certificates are verified against when a request
    #: is forwarded over HTTPS (empty: the system's).
    forward_ca_file: str = ""

    # --- push delivery ---------------------------------------------------------------------
    #: Push subscriptions can be configured.
    push_enabled: bool = True
    #: Where push deliveries run: ``in-process`` (inside ``ams serve``) or ``external`` (only
    #: ``ams push-worker`` processes deliver; this node just reports their status).
    push_worker: str = setting("in-process", choices=("in-process", "external"))
    #: The user that push workers act as: added to the ACL of every active push subscription
    #: (created with service role push_worker when first needed).
    push_worker_user: str = "push_worker_0"
    #: Port on which ``ams push-worker`` serves its Prometheus page (``/metrics`` on ``host``,
    #: with the API's ``prometheus_access``); 0: none (docs/monitoring.md).
    push_worker_metrics_port: int = setting(0, at_least=0, at_most=65535)
    #: ZooKeeper path under which push workers (backend kafka) register and own subscriptions.
    #: Empty: ``/ams-push/{mongo_database}``, so that deployments sharing an ensemble stay apart.
    push_znode: str = ""
    #: ZooKeeper session timeout of a push worker (seconds): how soon a dead worker's
    #: subscriptions move to another.
    push_session_seconds: float = setting(6.0, above=0)
    #: Seconds between two scans of the push subscriptions (new, changed, deleted).
    push_scan_seconds: float = setting(2.0, above=0)
    #: Seconds a push endpoint (or its verification) may take to answer.
    push_timeout_seconds: float = setting(30.0, above=0)
    #: Verify the TLS certificates of push endpoints.
    push_tls_verify: bool = True
    #: PEM bundle of the CAs that push endpoints' certificates are verified against
    #: (empty: the system's).
    push_ca_file: str = ""
    #: Most push requests one worker has in flight at once.
    push_max_in_flight: int = setting(16, at_least=1)
    #: Most push requests per second one worker sends (0: no limit).
    push_max_rate: float = setting(200.0, at_least=0)

    # --- AuthN: certificates in, tokens out (ams authn; docs/authn.md) ---------------------
    #: Address ``ams authn`` binds.
    authn_host: str = "127.0.0.1"
    #: TCP port of ``ams authn`` (HTTPS only).
    authn_port: int = setting(8443, at_least=1, at_most=65535)
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
    authn_max_connections: int = setting(200, at_least=1)

    # --- logging ---------------------------------------------------------------------------
    #: Level of the processes' logs on stdout, in any case (ams_app/logs.py upper-cases it): the
    #: level names Python's logging knows, aliases included.
    log_level: str = setting(
        "INFO",
        choices=("NOTSET", "DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"),
        ignore_case=True,
    )

    def validate(self) -> Settings:
        """Check every setting's declared constraint, then the rules between settings."""
        for each in fields(self):
            rule = each.metadata.get(_CONSTRAINT)
            value = getattr(self, each.name)
            if rule is not None and not rule.allows(value):
                raise SettingsError(f"{each.name} must be {rule.describe()}, not {value!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise SettingsError("tls_cert and tls_key must be given together")
        if self.backend == "kafka" and not (self.kafka_bootstrap_servers or self.zookeeper_hosts):
            raise SettingsError("backend kafka needs kafka_bootstrap_servers or zookeeper_hosts")
        if self.backend == "kafka" and self.push_enabled and not self.zookeeper_hosts:
            raise SettingsError("push delivery on backend kafka needs zookeeper_hosts (or push_enabled: false)")
        if self.consume_owner and self.backend == "kafka" and not self.zookeeper_hosts:
            raise SettingsError("consume_owner on backend kafka needs zookeeper_hosts (or consume_owner: false)")
        self._check_links()
        if self.grpc_port and self.grpc_port == self.port:
            raise SettingsError("grpc_port must differ from port")
        if self.grpc_emulator_user and not _loopback(self.host):
            raise SettingsError(
                "grpc_emulator_user lets calls without credentials in: host must be a loopback address"
                f" (127.0.0.1, ::1, localhost), not {self.host!r}"
            )
        if self.workers != 1:
            self._check_workers()
        if bool(self.authn_tls_cert) != bool(self.authn_tls_key):
            raise SettingsError("authn_tls_cert and authn_tls_key must be given together")
        if self.authn_check_crls and not self.authn_ca_dir:
            raise SettingsError("authn_check_crls needs authn_ca_dir (where the CRLs are)")
        return self

    def _check_links(self) -> None:
        """The security settings of the Kafka and ZooKeeper links fit together."""
        sasl = self.kafka_security_protocol == "SASL_SSL"
        if sasl and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise SettingsError("kafka_security_protocol SASL_SSL needs kafka_sasl_username and kafka_sasl_password")
        if not sasl and (self.kafka_sasl_username or self.kafka_sasl_password):
            raise SettingsError("kafka_sasl_username and kafka_sasl_password need kafka_security_protocol SASL_SSL")
        if bool(self.kafka_cert_file) != bool(self.kafka_key_file):
            raise SettingsError("kafka_cert_file and kafka_key_file must be given together")
        if self.kafka_security_protocol == "PLAINTEXT" and (self.kafka_ca_file or self.kafka_cert_file):
            raise SettingsError(
                "kafka_ca_file, kafka_cert_file and kafka_key_file need kafka_security_protocol SSL or SASL_SSL"
            )
        if bool(self.zookeeper_cert_file) != bool(self.zookeeper_key_file):
            raise SettingsError("zookeeper_cert_file and zookeeper_key_file must be given together")
        if not self.zookeeper_tls and (self.zookeeper_ca_file or self.zookeeper_cert_file):
            raise SettingsError("zookeeper_ca_file, zookeeper_cert_file and zookeeper_key_file need zookeeper_tls")

    def _check_workers(self) -> None:
        """A parent and its workers (workers other than 1): backend kafka, and the workers' own
        ports within 1-65535, apart from each other and from the node's other ports."""
        if self.backend != "kafka":
            raise SettingsError(
                f"workers must be 1 on backend {self.backend}, not {self.workers}: its SQLite databases have one"
                " writer, one process (several processes serve backend kafka)"
            )
        count = self.worker_count
        others = {
            "port": self.port,
            "grpc_port": self.grpc_port,
            "authn_port": self.authn_port,
            "push_worker_metrics_port": self.push_worker_metrics_port,
        }
        ranges = {"worker_port_base": self.worker_ports}
        if self.grpc_port:
            ranges["worker_grpc_port_base"] = self.worker_grpc_ports
        for name, ports in ranges.items():
            if ports.stop - 1 > 65535:
                raise SettingsError(
                    f"{count} workers from {name} {ports.start} take ports {ports.start}-{ports.stop - 1},"
                    f" beyond 65535: set a lower {name}"
                )
            for other, value in others.items():
                if value and value in ports:
                    raise SettingsError(
                        f"the workers' own ports {ports.start}-{ports.stop - 1} ({name}, {count} workers) include"
                        f" {other} {value}: set {name} where {count} ports are free"
                    )
        if len(ranges) == 2 and set(self.worker_ports) & set(self.worker_grpc_ports):
            raise SettingsError(
                f"the workers' own API ports {self.worker_ports.start}-{self.worker_ports.stop - 1} and gRPC ports"
                f" {self.worker_grpc_ports.start}-{self.worker_grpc_ports.stop - 1} overlap: set worker_port_base"
                " or worker_grpc_port_base apart"
            )

    @property
    def worker_count(self) -> int:
        """How many workers serve: ``workers``, or with 0 one per CPU core this process may run on."""
        return self.workers or len(os.sched_getaffinity(0))

    @property
    def worker_ports(self) -> range:
        """The workers' own API ports, worker i's at [i]."""
        base = self.worker_port_base or self.port + 1
        return range(base, base + self.worker_count)

    @property
    def worker_grpc_ports(self) -> range:
        """The workers' own gRPC ports, worker i's at [i]; empty when grpc_port is 0."""
        if not self.grpc_port:
            return range(0)
        base = self.worker_grpc_port_base or self.grpc_port + 1
        return range(base, base + self.worker_count)

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
    def node_grpc(self) -> str:
        """Where the other nodes reach this one's Pub/Sub gRPC API (host:port, the host of
        ``node_url``, with TLS when it is https); "" when grpc_port is 0."""
        if not self.grpc_port:
            return ""
        from urllib.parse import urlsplit

        host = urlsplit(self.node_url).hostname or "localhost"
        return f"[{host}]:{self.grpc_port}" if ":" in host else f"{host}:{self.grpc_port}"

    @property
    def listener_tls(self) -> dict[str, Any]:
        """The TLS arguments of a gevent server that listens with tls_cert and tls_key (the API's,
        the push worker's Prometheus page); empty without them. The handshake happens on the first
        read, inside the handler: a client that never sends its hello is then an idle connection
        like any other, under client_timeout and the connection limit."""
        if not (self.tls_cert and self.tls_key):
            return {}
        return {"certfile": self.tls_cert, "keyfile": self.tls_key, "do_handshake_on_connect": False}

    @property
    def push_root(self) -> str:
        """The ZooKeeper path of the push workers."""
        return (self.push_znode or f"/ams-push/{self.mongo_database}").rstrip("/")


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_FIELDS = {f.name: f for f in fields(Settings)}


def constraint(name: str) -> Constraint | None:
    """The legal values of setting ``name`` as its field declares them; None: any value of its type."""
    rule = _FIELDS[name].metadata.get(_CONSTRAINT)
    return rule if isinstance(rule, Constraint) else None


def constraints() -> dict[str, Constraint]:
    """Every declared constraint, by setting name, in the order of the fields."""
    return {name: rule for name in _FIELDS if (rule := constraint(name)) is not None}


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
