"""AMS on a ZooKeeper and a Kafka whose links are secured as in the appliance (tools/secure_services.py,
docs/production.md "Security"): AMS works over them, and a client without the right credentials is
refused, each refusal beside a control with the right ones (so a dead server cannot pass as
"refused").

Identities: ``ams`` (AMS's certificate for ZooKeeper, its SCRAM user for Kafka), ``spark`` (a
SCRAM user that may only read), ``kafka`` (the brokers' certificate: the super user), ``other``
(a certificate of the same CA that no ACL names) and ``stranger`` (subject ``CN=ams``, from
another CA)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from ams_app.backends.kafka.connect import discover_brokers
from ams_app.settings import load_settings
from tests.helpers import ROOT, b64, free_port, load_tool, run_probe, unique

secure_services = load_tool("secure_services")


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ports = [free_port() for _ in range(5)]
    running = secure_services.SecureServices(tmp_path_factory.mktemp("secure-pair"), *ports)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def served(pair: Any, tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[str, str, str]) -> Iterator[Any]:
    """One AMS node on the services, as in the appliance: brokers found in ZooKeeper, subscription
    owners and the metadata cache in ZooKeeper, the metadata over TLS with a login, users' tokens
    sealed in it."""
    from tests.helpers import AmsServer, backend_env

    keyring = tmp_path_factory.mktemp("secure-keys") / "tokens.keys"
    keyring.write_text(f"k1:{base64.b64encode(os.urandom(32)).decode()}\n")
    keyring.chmod(0o600)
    env = {
        **backend_env("kafka"),
        **pair.ams_settings(),
        "AMS_KAFKA_BOOTSTRAP_SERVERS": "",
        "AMS_CONSUME_OWNER": "true",
        "AMS_TOKEN_KEY_FILE": str(keyring),
        "AMS_PUSH_CA_FILE": tls_files[2],
    }
    data = tmp_path_factory.mktemp("secure-ams") / "data"
    srv = AmsServer(data, tls=(tls_files[0], tls_files[1]), backend="kafka", env=env)
    srv.start()
    yield srv
    srv.stop()


def _kazoo(pair: Any, who: str | None, *, port: int | None = None, tls: bool = True) -> KazooClient:
    options: dict[str, Any] = {}
    if tls:
        options = {"use_ssl": True, "ca": str(pair.tls.ca), "check_hostname": True}
        if who:
            options |= {"certfile": str(pair.tls.cert(who)), "keyfile": str(pair.tls.key(who))}
    host = "localhost" if tls else "127.0.0.1"
    return KazooClient(hosts=f"{host}:{port or pair.zk_port}", timeout=4, connection_retry={"max_tries": 0}, **options)


def _session(client: KazooClient) -> KazooClient:
    client.start(timeout=8)
    return client


def _closed(client: KazooClient) -> None:
    client.stop()
    client.close()


def _refused(client: KazooClient) -> str:
    """How a session that ZooKeeper should refuse ends (the exception's name)."""
    try:
        client.start(timeout=3)
        client.get_children("/")
    except Exception as exc:  # kazoo raises a timeout or a session error, depending on the stage
        return type(exc).__name__
    finally:
        _closed(client)
    return "a session"


def _kafka(pair: Any, **options: Any) -> dict[str, Any]:
    return {"bootstrap.servers": f"localhost:{pair.client_port}", "socket.timeout.ms": 4000, **options}


def _sasl(pair: Any, user: str, password: str) -> dict[str, Any]:
    return _kafka(
        pair,
        **{
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(pair.tls.ca),
        },
    )


def _errors_of(config: dict[str, Any], seconds: float = 6.0) -> tuple[list[KafkaError], Exception | None]:
    """The errors librdkafka reports while an admin client lists the topics, and what the listing raised."""
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    raised: Exception | None = None
    try:
        admin.list_topics(timeout=seconds)
    except KafkaException as exc:
        raised = exc
    admin.poll(0.5)
    return errors, raised


# ------------------------------------------------------------------ AMS over the pair -----------
def test_discovery_picks_the_client_listener(pair: Any) -> None:
    """The broker registers BROKER (mutual TLS) first: AMS must take the SASL_SSL one."""
    registration = pair.registration()
    assert registration["endpoints"][0].startswith("BROKER://")
    settings = load_settings(environ={**pair.ams_settings(), "AMS_BACKEND": "kafka"})
    assert discover_brokers(settings) == f"localhost:{pair.client_port}"


def test_ams_publishes_and_consumes_over_the_secured_links(served: Any, pair: Any) -> None:
    api = served.api()
    project = api.new_project()
    assert api.put(f"/projects/{project}/topics/alerts").status_code == 200
    body = {"topic": f"projects/{project}/topics/alerts", "ackDeadlineSeconds": 10}
    assert api.put(f"/projects/{project}/subscriptions/ops", json=body).status_code == 200
    published = api.post(f"/projects/{project}/topics/alerts:publish", json={"messages": [{"data": b64("over TLS")}]})
    assert published.status_code == 200, published.text
    pulled = api.post(
        f"/projects/{project}/subscriptions/ops:pull", json={"maxMessages": "5", "returnImmediately": "true"}
    ).json()
    messages = pulled["receivedMessages"]
    assert [m["message"]["data"] for m in messages] == [b64("over TLS")]
    acked = api.post(f"/projects/{project}/subscriptions/ops:acknowledge", json={"ackIds": [messages[0]["ackId"]]})
    assert acked.status_code == 200, acked.text


def test_a_user_token_works_and_its_stored_copy_does_not(served: Any, pair: Any) -> None:
    from pymongo import MongoClient

    api = served.api()
    name = unique("secure-user")
    token = api.post(f"/users/{name}", json={"service_roles": ["service_admin"]}).json()["token"]
    assert served.api(token).get("/projects").status_code == 200
    client: Any = MongoClient(pair.mongo_uri(), serverSelectionTimeoutMS=3000)
    try:
        stored = client[served.env["AMS_MONGO_DATABASE"]]["users"].find_one({"name": name})
    finally:
        client.close()
    assert token not in repr(stored)
    assert served.api(stored["token"]).get("/projects").status_code == 401


def test_ams_znodes_belong_to_its_certificate(served: Any, pair: Any) -> None:
    """AMS's claims and metadata generation are readable and writable by its subject only."""
    api = served.api()
    project = api.new_project()
    api.put(f"/projects/{project}/topics/t")
    api.put(f"/projects/{project}/subscriptions/s", json={"topic": f"projects/{project}/topics/t"})
    api.post(f"/projects/{project}/subscriptions/s:pull", json={"maxMessages": "1", "returnImmediately": "true"})
    database = served.env["AMS_MONGO_DATABASE"]
    owners = f"/ams-consume/{database}/owners"
    generation = f"/ams-metadata/{database}"
    ams = _session(_kazoo(pair, "ams"))
    try:
        claims = ams.get_children(owners)
        assert claims, "the pull made this node claim the subscription"
        acls, _ = ams.get_acls(f"{owners}/{claims[0]}")
        assert [(acl.id.scheme, acl.id.id, acl.perms) for acl in acls] == [("x509", "CN=ams", 31)]
        ams.get(generation)
    finally:
        _closed(ams)
    other = _session(_kazoo(pair, "other"))
    try:
        for path in (f"{owners}/{claims[0]}", generation):
            with pytest.raises(NoAuthError):
                other.get(path)
            with pytest.raises(NoAuthError):
                other.set(path, b"forged")
        with pytest.raises(NoAuthError):
            other.delete(f"{owners}/{claims[0]}")
        with pytest.raises(NoAuthError):  # Kafka's SCRAM credentials: not for other identities
            other.get(f"{secure_services.KAFKA_ZNODE}/config/users/ams")
    finally:
        _closed(other)


# ------------------------------------------------------------------ ZooKeeper ------------------
def test_zookeeper_refuses_whoever_lacks_a_certificate_of_the_ca(pair: Any) -> None:
    # the control: AMS's certificate opens a session
    _closed(_session(_kazoo(pair, "ams")))
    # plaintext on the TLS port, TLS with no certificate, a certificate of another CA: no session
    # ever opens (kazoo tries again until its time is up)
    assert _refused(_kazoo(pair, None, tls=False)) == "KazooTimeoutError"
    assert _refused(_kazoo(pair, None)) == "KazooTimeoutError"
    assert _refused(_kazoo(pair, "stranger")) == "KazooTimeoutError"
    # what refused the last two: the TLS handshake itself
    mine = ssl.create_default_context(cafile=str(pair.tls.ca))
    mine.load_cert_chain(str(pair.tls.cert("ams")), str(pair.tls.key("ams")))
    _handshake(mine, pair.zk_port)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(ssl.create_default_context(cafile=str(pair.tls.ca)), pair.zk_port)
    stranger = ssl.create_default_context(cafile=str(pair.tls.ca))
    stranger.load_cert_chain(str(pair.tls.cert("stranger")), str(pair.tls.key("stranger")))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(stranger, pair.zk_port)


def test_zookeeper_plain_port_is_for_health_words_only(pair: Any) -> None:
    """On loopback, for the health scripts' ``ruok`` and ``srvr``; a session there is closed, as
    every session must authenticate with a certificate (``enforce.auth.schemes=x509``)."""
    with socket.create_connection(("127.0.0.1", pair.zk_plain_port), timeout=3) as s:
        s.sendall(b"ruok")
        assert s.recv(16) == b"imok"
    assert _refused(_kazoo(pair, None, port=pair.zk_plain_port, tls=False)) == "SessionClosedRequireSaslError"


# ------------------------------------------------------------------ Kafka ----------------------
def test_kafka_client_listener_refuses_plaintext(pair: Any) -> None:
    assert AdminClient(_sasl(pair, "ams", pair.passwords["ams"])).list_topics(timeout=10).brokers
    errors, raised = _errors_of(_kafka(pair))
    assert isinstance(raised, KafkaException)
    assert raised.args[0].code() == KafkaError._TRANSPORT
    assert KafkaError._ALL_BROKERS_DOWN in [e.code() for e in errors], errors


def test_kafka_refuses_a_wrong_password(pair: Any) -> None:
    errors, raised = _errors_of(_sasl(pair, "ams", "not-the-password"))
    assert isinstance(raised, KafkaException)
    assert KafkaError._AUTHENTICATION in [e.code() for e in errors], errors


def test_spark_may_read_but_not_write(pair: Any) -> None:
    topic = unique("secure")
    ams = Producer(_sasl(pair, "ams", pair.passwords["ams"]))
    admin = AdminClient(_sasl(pair, "ams", pair.passwords["ams"]))
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=30)
    ams.produce(topic, b"written by ams")
    assert ams.flush(20) == 0

    outcomes: list[KafkaError] = []
    spark = Producer({**_sasl(pair, "spark", pair.passwords["spark"]), "message.timeout.ms": 8000})
    spark.produce(topic, b"forged by spark", on_delivery=lambda err, _msg: outcomes.append(err))
    spark.flush(15)
    assert [e.code() for e in outcomes] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    reader = Consumer({**_sasl(pair, "spark", pair.passwords["spark"]), "group.id": "spark-kafka-test"})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        message = None
        while message is None and time.monotonic() < deadline:
            message = reader.poll(1)
        assert message is not None
        assert message.error() is None
        assert message.value() == b"written by ams"
    finally:
        reader.close()


def test_broker_listener_wants_a_certificate_of_the_ca(pair: Any) -> None:
    context = ssl.create_default_context(cafile=str(pair.tls.ca))
    context.load_cert_chain(str(pair.tls.cert("kafka")), str(pair.tls.key("kafka")))
    _handshake(context, pair.broker_port)  # the control: the brokers' own certificate

    no_cert = ssl.create_default_context(cafile=str(pair.tls.ca))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(no_cert, pair.broker_port)
    stranger = ssl.create_default_context(cafile=str(pair.tls.ca))
    stranger.load_cert_chain(str(pair.tls.cert("stranger")), str(pair.tls.key("stranger")))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(stranger, pair.broker_port)


def _handshake(context: ssl.SSLContext, port: int) -> None:
    """A TLS handshake, then a read: TLS 1.3 tells the client of a refused certificate only after
    its handshake has returned, with an alert on the first read."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        tls.settimeout(1.5)
        # nothing to read, nothing refused: the server waits for a request
        with contextlib.suppress(TimeoutError):
            tls.recv(1)


def test_a_certificate_no_acl_names_sees_no_topic(pair: Any, tmp_path: Path) -> None:
    config = secure_services.super_user_config(pair.tls, pair.broker_port)
    assert AdminClient(config).list_topics(timeout=10).topics, "the super user sees the topics"
    other = {
        **config,
        "ssl.certificate.location": str(pair.tls.cert("other")),
        "ssl.key.location": str(pair.tls.key("other")),
    }
    assert not AdminClient(other).list_topics(timeout=10).topics


# ------------------------------------------------------------------ the metadata store ---------
def _mongo_ping(uri: str) -> None:
    from pymongo import MongoClient

    client: Any = MongoClient(uri, serverSelectionTimeoutMS=3000)
    try:
        client["argo_msg"].list_collection_names()
    finally:
        client.close()


def test_metadata_store_wants_tls_and_a_login(pair: Any) -> None:
    from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

    _mongo_ping(pair.mongo_uri())  # the control: AMS's user over TLS
    with pytest.raises(ServerSelectionTimeoutError):
        _mongo_ping(pair.mongo_uri(tls=False))
    with pytest.raises(OperationFailure) as anonymous:
        _mongo_ping(pair.mongo_uri(user=""))
    assert anonymous.value.code == 13  # Unauthorized
    with pytest.raises(OperationFailure) as wrong:
        _mongo_ping(pair.mongo_uri(password="not-the-password"))
    assert wrong.value.code == 18  # AuthenticationFailed


# ------------------------------------------------------------------ the Spark jobs' reads ------
def test_spark_jobs_read_the_bounds_as_their_read_only_user(served: Any, pair: Any) -> None:
    from spark.common import KafkaSecurity, kafka_end_offsets, topic_key

    api = served.api()
    project = api.new_project()
    api.put(f"/projects/{project}/topics/bounds")
    api.post(f"/projects/{project}/topics/bounds:publish", json={"messages": [{"data": b64("x")}] * 3})
    key = topic_key(_project_uuid(served, project), "bounds")
    env = {
        "AMS_SPARK_KAFKA_PROTOCOL": "SASL_SSL",
        "AMS_SPARK_KAFKA_SASL_USERNAME": secure_services.SPARK_USER,
        "AMS_SPARK_KAFKA_SASL_PASSWORD": pair.passwords[secure_services.SPARK_USER],
        "AMS_SPARK_KAFKA_CA_FILE": str(pair.tls.ca),
    }
    bootstrap = f"localhost:{pair.client_port}"
    assert kafka_end_offsets(bootstrap, [key], KafkaSecurity.from_env(env)) == {key: (0, 3)}


def _project_uuid(served: Any, project: str) -> str:
    from pymongo import MongoClient

    client: Any = MongoClient(served.env["AMS_MONGO_URI"], serverSelectionTimeoutMS=3000)
    try:
        return str(client[served.env["AMS_MONGO_DATABASE"]]["projects"].find_one({"name": project})["uuid"])
    finally:
        client.close()


# ------------------------------------------------------------------ the roles' health scripts --
KAFKA_HEALTH = ROOT / "roles" / "kafka" / "files" / "kafka-health"
ZOOKEEPER_HEALTH = ROOT / "roles" / "zookeeper" / "files" / "zookeeper-health"


def _tls_args(pair: Any, who: str | None) -> list[str]:
    args = ["--tls-ca", str(pair.tls.ca)]
    return [*args, "--tls-cert", str(pair.tls.cert(who)), "--tls-key", str(pair.tls.key(who))] if who else args


def test_kafka_health_speaks_tls_with_the_brokers_certificate(pair: Any) -> None:
    done = run_probe(KAFKA_HEALTH, pair.broker_port, "--broker-id", "0", *_tls_args(pair, "kafka"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["brokers"] == [0]
    for who in (None, "stranger"):  # the broker listener wants a certificate of the CA
        refused = run_probe(KAFKA_HEALTH, pair.broker_port, *_tls_args(pair, who))
        assert refused.returncode == 2, refused.stdout
    plaintext = run_probe(KAFKA_HEALTH, pair.broker_port)
    assert plaintext.returncode == 2, plaintext.stdout


def test_zookeeper_health_speaks_tls_on_the_secure_port(pair: Any) -> None:
    done = run_probe(ZOOKEEPER_HEALTH, pair.zk_port, "--serving", *_tls_args(pair, "zookeeper"))
    assert (done.returncode, done.stdout.strip()) == (0, "standalone"), done.stderr
    refused = run_probe(ZOOKEEPER_HEALTH, pair.zk_port, "--ruok", *_tls_args(pair, None))
    assert refused.returncode != 0, refused.stdout
    plain = run_probe(ZOOKEEPER_HEALTH, pair.zk_plain_port, "--ruok")  # loopback, for the handlers
    assert (plain.returncode, plain.stdout.strip()) == (0, "imok"), plain.stderr
