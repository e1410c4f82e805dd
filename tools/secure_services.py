"""A ZooKeeper, a Kafka broker and a FerretDB on loopback with every link secured as in the
appliance (docs/production.md, "Security"), for the tests that prove AMS speaks that security and
that a client without it is refused (tests/api/test_secure_links.py).

- ZooKeeper serves TLS on its secure port and wants a client certificate from the test CA; every
  session must authenticate with it (x509, enforced). Its plain port is on loopback for the
  four-letter health words only: a session there is closed.
- Kafka has two listeners: ``BROKER`` (mutual TLS; the broker's own certificate, subject
  ``CN=kafka``, is the super user) and ``CLIENT`` (SASL_SSL with SCRAM-SHA-512). An ACL authorizer
  refuses whatever no ACL allows. Kafka speaks TLS to ZooKeeper with its certificate and puts ACLs
  on its znodes.
- The users ``ams`` (all rights on topics, its consumer group, cluster describe) and ``spark``
  (read only) are made after the broker starts, over ``BROKER`` as the super user.
- FerretDB (the MongoDB wire protocol) listens with TLS only, and with its authentication on
  (SCRAM; a command of a client that has not logged in is refused). Its user ``ams`` is made at
  its first start (``--setup-*``).

It stands on tools/services.py's installation (the Kafka jars, Debian's ZooKeeper) and runs in a
directory of its own, on ports it is given, so it can run beside ``make services-up``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tools import pki, services, toolkit

AMS_USER = "ams"
SPARK_USER = "spark"
SPARK_GROUP_PREFIX = "spark-kafka-"
AMS_GROUP = "ams-reader"
KAFKA_ZNODE = "/secure-kafka"
#: Netty's codec, which ZooKeeper's TLS needs and Debian's zookeeper.jar leaves off its class path
#: (its manifest names netty-handler, -buffer, -common and -transport only)
NETTY_CODEC_JAR = "/usr/share/java/netty-codec.jar"
STARTED_BY = "tools/secure_services.py"
READY_TIMEOUT = {"zookeeper": 45.0, "kafka": 90.0, "ferretdb": 45.0}
#: The database where FerretDB keeps its users (a URI's ``authSource``)
MONGO_AUTH_DATABASE = "ams_auth"


class SecureServicesError(RuntimeError):
    pass


# ============================================================================================
# configuration (pure)
# ============================================================================================
@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of the pair: the CA, and per identity a key-and-chain file (the form Kafka's
    and ZooKeeper's PEM key stores read) beside the certificate and key as separate files."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    def store(self, who: str) -> Path:
        return self.directory / f"{who}-store.pem"

    def cert(self, who: str) -> Path:
        return self.directory / f"{who}.pem"

    def key(self, who: str) -> Path:
        return self.directory / f"{who}.key"


def render_zoo_cfg(data_dir: Path, tls: TlsFiles, secure_port: int, plain_port: int) -> str:
    return "\n".join(
        [
            f"# Written by {STARTED_BY}: a standalone ZooKeeper on loopback, TLS and x509 enforced.",
            "tickTime=2000",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={data_dir}",
            f"clientPort={plain_port}",
            f"clientPortAddress={services.HOST}",
            f"secureClientPort={secure_port}",
            f"secureClientPortAddress={services.HOST}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            "authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider",
            "ssl.keyStore.type=PEM",
            f"ssl.keyStore.location={tls.store('zookeeper')}",
            "ssl.trustStore.type=PEM",
            f"ssl.trustStore.location={tls.ca}",
            "ssl.clientAuth=need",
            "enforce.auth.enabled=true",
            "enforce.auth.schemes=x509",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr",
            "",
        ]
    )


def render_server_properties(
    log_dir: Path, tls: TlsFiles, broker_port: int, client_port: int, zk_port: int, znode: str = KAFKA_ZNODE
) -> str:
    host = services.HOST
    store, ca = tls.store("kafka"), tls.ca
    return "\n".join(
        [
            f"# Written by {STARTED_BY}: one Kafka broker (ZooKeeper mode) on loopback, every link secured.",
            "broker.id=0",
            f"listeners=BROKER://{host}:{broker_port},CLIENT://{host}:{client_port}",
            f"advertised.listeners=BROKER://localhost:{broker_port},CLIENT://localhost:{client_port}",
            "listener.security.protocol.map=BROKER:SSL,CLIENT:SASL_SSL",
            "inter.broker.listener.name=BROKER",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={store}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={ca}",
            "listener.name.broker.ssl.client.auth=required",
            "ssl.principal.mapping.rules=RULE:^CN=([^,]+)$/$1/,DEFAULT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "listener.name.client.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
            "super.users=User:kafka",
            "allow.everyone.if.no.acl.found=false",
            f"zookeeper.connect={host}:{zk_port}{znode}",
            "zookeeper.connection.timeout.ms=30000",
            "zookeeper.ssl.client.enable=true",
            "zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
            "zookeeper.ssl.keystore.type=PEM",
            f"zookeeper.ssl.keystore.location={store}",
            "zookeeper.ssl.truststore.type=PEM",
            f"zookeeper.ssl.truststore.location={ca}",
            "zookeeper.set.acl=true",
            f"log.dirs={log_dir}",
            *services.SINGLE_BROKER,
            "",
        ]
    )


def super_user_config(tls: TlsFiles, broker_port: int) -> dict[str, str | int | float | bool]:
    """librdkafka's options to act as the broker's own identity over ``BROKER`` (the super user)."""
    return {
        "bootstrap.servers": f"localhost:{broker_port}",
        "security.protocol": "ssl",
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.cert("kafka")),
        "ssl.key.location": str(tls.key("kafka")),
    }


# ============================================================================================
# the pair
# ============================================================================================
@dataclass
class SecureServices:
    """The pair's files under ``root`` and its ports; ``start()`` makes the PKI, the configurations
    and the users, ``stop()`` ends both processes."""

    root: Path
    zk_port: int
    zk_plain_port: int
    broker_port: int
    client_port: int
    mongo_port: int
    passwords: dict[str, str] = field(default_factory=lambda: {AMS_USER: "ams-secret", SPARK_USER: "spark-secret"})
    mongo_password: str = "ams-mongo-secret"

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.root / "tls")

    def _paths(self, name: str) -> tuple[Path, Path]:
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{name}.log", directory / f"{name}.pid"

    # ------------------------------------------------------------------ PKI ---------------
    def make_pki(self) -> None:
        """The test CA, a certificate per identity, and a stranger's CA with a client of its own."""
        directory = self.tls.directory
        directory.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca("AMS internal test CA")
        self.tls.ca.write_bytes(ca.cert_pem())
        names = ("localhost", services.HOST)
        issued = {
            "zookeeper": pki.service_cert(ca, "zookeeper", *names),
            "mongo": pki.service_cert(ca, "mongo", *names),
            "kafka": pki.service_cert(ca, "kafka", *names),
            "ams": pki.service_cert(ca, "ams", *names),
            # signed by the same CA, but not an identity any ACL names
            "other": pki.service_cert(ca, "other", *names),
            "stranger": pki.service_cert(pki.new_ca("A stranger's CA"), "ams", *names),
        }
        for who, cert in issued.items():
            cert.write(directory, who)
            self.tls.store(who).write_bytes(cert.key_pem() + cert.cert_pem(with_chain=True))
            for path in (self.tls.key(who), self.tls.store(who)):
                path.chmod(0o600)

    # ------------------------------------------------------------------ processes ---------
    def _zookeeper_argv(self) -> list[str]:
        conf = self.root / "zookeeper" / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        data = self.root / "zookeeper" / "data"
        data.mkdir(parents=True, exist_ok=True)
        (conf / "zoo.cfg").write_text(render_zoo_cfg(data, self.tls, self.zk_port, self.zk_plain_port))
        (conf / "log4j.properties").write_text(services.render_log4j())
        classpath = ":".join([str(services.ZOOKEEPER_JAR), NETTY_CODEC_JAR, *services._log4j_jars(), str(conf)])
        return [
            services._java(),
            "-Xmx256m",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            "-cp",
            classpath,
            services.ZOOKEEPER.marker,
            str(conf / "zoo.cfg"),
        ]

    def _kafka_argv(self) -> list[str]:
        conf = self.root / "kafka" / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        data = self.root / "kafka" / "data"
        props = render_server_properties(data, self.tls, self.broker_port, self.client_port, self.zk_port)
        (conf / "server.properties").write_text(props)
        (conf / "log4j.properties").write_text(services.render_log4j({"kafka.server.KafkaServer": "INFO"}))
        return [
            services._java(),
            "-Xmx512m",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self.root / 'kafka'}",
            "-cp",
            f"{services.KAFKA_LIB}/*",
            services.KAFKA.marker,
            str(conf / "server.properties"),
        ]

    def _ferretdb_argv(self) -> list[str]:
        data = self.root / "ferretdb" / "data"
        state = self.root / "ferretdb" / "state"
        for directory in (data, state):
            directory.mkdir(parents=True, exist_ok=True)
        return [
            str(services.FERRETDB_BIN),
            "--handler=sqlite",
            f"--sqlite-url=file:{data}/",
            "--listen-addr=",
            f"--listen-tls={services.HOST}:{self.mongo_port}",
            f"--listen-tls-cert-file={self.tls.cert('mongo')}",
            f"--listen-tls-key-file={self.tls.key('mongo')}",
            "--test-enable-new-auth",
            f"--setup-database={MONGO_AUTH_DATABASE}",
            f"--setup-username={AMS_USER}",
            f"--setup-password={self.mongo_password}",
            f"--state-dir={state}",
            "--telemetry=disable",
            "--debug-addr=-",
            "--log-level=warn",
        ]

    def mongo_uri(self, user: str = AMS_USER, password: str | None = None, *, tls: bool = True) -> str:
        """A MongoDB URI of the FerretDB: as ``user`` (empty: no login), over TLS unless not."""
        login = f"{user}:{self.mongo_password if password is None else password}@" if user else ""
        query = f"tls=true&tlsCAFile={self.tls.ca}" if tls else "tls=false"
        if user:
            query += f"&authSource={MONGO_AUTH_DATABASE}&authMechanism=SCRAM-SHA-256"
        return f"mongodb://{login}localhost:{self.mongo_port}/?{query}"

    def _mongo_ready(self) -> bool:
        from pymongo import MongoClient

        client: MongoClient[dict[str, object]] = MongoClient(self.mongo_uri(), serverSelectionTimeoutMS=2000)
        try:
            client["ams_ready"].list_collection_names()
            return True
        finally:
            client.close()

    def _spawn(self, name: str, argv: list[str], ready: object, marker: str) -> None:
        log, pid_file = self._paths(name)
        pid = toolkit.spawn(argv, log=log, pid_file=pid_file, started_by=STARTED_BY)
        toolkit.wait_until(
            f"secure {name}",
            ready,  # type: ignore[arg-type]
            timeout=READY_TIMEOUT[name],
            pid=pid,
            marker=marker,
            log=log,
            error=SecureServicesError,
        )

    def start(self) -> None:
        services.install()
        self.make_pki()
        self._spawn(
            "zookeeper",
            self._zookeeper_argv(),
            lambda: services.zookeeper_ready(self.zk_plain_port),
            services.ZOOKEEPER.marker,
        )
        self._spawn("kafka", self._kafka_argv(), self._kafka_ready, services.KAFKA.marker)
        self.make_users()
        self._spawn("ferretdb", self._ferretdb_argv(), self._mongo_ready, str(services.FERRETDB_BIN))

    def stop(self) -> None:
        for name, marker in (
            ("ferretdb", str(services.FERRETDB_BIN)),
            ("kafka", services.KAFKA.marker),
            ("zookeeper", services.ZOOKEEPER.marker),
        ):
            _, pid_file = self._paths(name)
            toolkit.terminate(f"secure {name}", pid_file, marker, 30.0, services.say)

    def _kafka_ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not toolkit.port_open(self.client_port):
            return False
        admin = AdminClient(super_user_config(self.tls, self.broker_port) | {"log_level": 0})
        metadata = admin.list_topics(timeout=3)
        return bool(metadata.brokers) and int(metadata.controller_id) >= 0

    # ------------------------------------------------------------------ users -------------
    def make_users(self) -> None:
        """The SCRAM credentials of ``ams`` and ``spark`` and their ACLs, as the super user."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AclBinding,
            AclOperation,
            AclPermissionType,
            AdminClient,
            ResourcePatternType,
            ResourceType,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient(super_user_config(self.tls, self.broker_port))
        upserts = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
            )
            for user, password in self.passwords.items()
        ]
        for future in admin.alter_user_scram_credentials(upserts).values():  # type: ignore[arg-type]
            future.result(timeout=30)
        literal, prefixed, allow = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED, AclPermissionType.ALLOW
        ams, spark = f"User:{AMS_USER}", f"User:{SPARK_USER}"
        bindings = [
            AclBinding(ResourceType.TOPIC, "*", literal, ams, "*", AclOperation.ALL, allow),
            AclBinding(ResourceType.GROUP, AMS_GROUP, literal, ams, "*", AclOperation.READ, allow),
            AclBinding(ResourceType.BROKER, "kafka-cluster", literal, ams, "*", AclOperation.DESCRIBE, allow),
            AclBinding(ResourceType.TOPIC, "*", literal, spark, "*", AclOperation.READ, allow),
            AclBinding(ResourceType.TOPIC, "*", literal, spark, "*", AclOperation.DESCRIBE, allow),
            AclBinding(ResourceType.GROUP, SPARK_GROUP_PREFIX, prefixed, spark, "*", AclOperation.READ, allow),
            AclBinding(ResourceType.GROUP, "ams-spark-bounds", literal, spark, "*", AclOperation.READ, allow),
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)

    # ------------------------------------------------------------------ for AMS -----------
    def ams_settings(self) -> dict[str, str]:
        """The ``AMS_*`` settings of an AMS process on this pair (brokers found in ZooKeeper)."""
        return {
            "AMS_MONGO_URI": self.mongo_uri(),
            "AMS_ZOOKEEPER_HOSTS": f"localhost:{self.zk_port}",
            "AMS_KAFKA_ZNODE": KAFKA_ZNODE,
            "AMS_ZOOKEEPER_TLS": "true",
            "AMS_ZOOKEEPER_CA_FILE": str(self.tls.ca),
            "AMS_ZOOKEEPER_CERT_FILE": str(self.tls.cert("ams")),
            "AMS_ZOOKEEPER_KEY_FILE": str(self.tls.key("ams")),
            "AMS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "AMS_KAFKA_SASL_USERNAME": AMS_USER,
            "AMS_KAFKA_SASL_PASSWORD": self.passwords[AMS_USER],
            "AMS_KAFKA_CA_FILE": str(self.tls.ca),
        }

    def registration(self) -> dict[str, object]:
        """What the broker wrote of itself in ZooKeeper (read over TLS as AMS)."""
        from kazoo.client import KazooClient

        client = KazooClient(
            hosts=f"localhost:{self.zk_port}",
            use_ssl=True,
            ca=str(self.tls.ca),
            certfile=str(self.tls.cert("ams")),
            keyfile=str(self.tls.key("ams")),
        )
        client.start(timeout=10)
        try:
            data, _ = client.get(f"{KAFKA_ZNODE}/brokers/ids/0")
            return dict(json.loads(data))
        finally:
            client.stop()
            client.close()
