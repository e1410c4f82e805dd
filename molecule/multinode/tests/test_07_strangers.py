"""A stranger on the appliance's network: this machine, on the scenario's bridge, with no credentials
(or wrong ones), tries every internal link that carries a tenant's data or AMS's coordination, and is
refused. Each refusal sits beside the same link used with the right credentials (the certificates
roles/internal_pki made, the vault's passwords), so that a dead service cannot pass as "refused"
(docs/production.md, "Security").

The tenant's secret: a message published through haproxy, as a client does; then the stranger looks
for it on Kafka, in ZooKeeper and in the metadata store."""

from __future__ import annotations

import contextlib
import shlex
import socket
import ssl
import sys
import time
from importlib.machinery import SourceFileLoader
from types import ModuleType
from typing import Any

import grpc
import pytest
import requests
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from google.pubsub_v1.types import ListTopicsRequest, ListTopicsResponse
from kazoo.exceptions import NoAuthError
from multinode import (
    ADDRESS,
    AMS_PORT,
    CA,
    DATABASE,
    EVERY_HOST,
    GROUPS,
    GRPC_LB,
    GRPC_PORT,
    INTERNAL_CA,
    KAFKA_BROKER_PORT,
    KAFKA_PLAIN_PORT,
    KAFKA_PORT,
    MONGO,
    MONGO_PORT,
    PROJECT,
    ROOT,
    TOKEN,
    WORKER_GRPC_PORTS,
    WORKER_PORTS,
    ZOOKEEPER_PLAIN_PORT,
    ZOOKEEPER_PORT,
    Api,
    b64,
    host,
    identity,
    kafka_client,
    mongo_client,
    report,
    tls_context,
    unique,
    zookeeper_client,
)
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

SECRET = "the tenant's secret payload"
BROKERS = GROUPS["kafka"]
MEMBERS = GROUPS["zookeeper"]
STORE = MONGO


def _pki() -> ModuleType:
    loader = SourceFileLoader("multinode_pki", str(ROOT / "tools" / "pki.py"))
    module = ModuleType(loader.name)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tenant() -> dict[str, str]:
    """A topic with the secret in it, published through haproxy; its Kafka topic's name."""
    api = Api()
    api.call("POST", f"/projects/{PROJECT}", {"description": "molecule multinode"}, ok=(200, 409))
    topic = unique("secret")
    api.topic(topic)
    api.publish(topic, [SECRET])
    store = mongo_client()
    try:
        project_uuid = store.get_database(DATABASE)["projects"].find_one({"name": PROJECT})["uuid"]
    finally:
        store.close()
    return {"topic": topic, "kafka_topic": f"{project_uuid}.{topic}"}


@pytest.fixture(scope="module")
def stranger_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A certificate with AMS's subject, CN=ams, from a CA of the stranger's own."""
    pki = _pki()
    made = pki.service_cert(pki.new_ca("A stranger's CA"), "ams", "stranger")
    cert, key = made.write(tmp_path_factory.mktemp("stranger"), "stranger")
    return cert, key


def _stranger(files: tuple[str, str]) -> ssl.SSLContext:
    """TLS that trusts the internal CA and presents the stranger's certificate."""
    context = ssl.create_default_context(cafile=str(INTERNAL_CA))
    context.load_cert_chain(*files)
    return context


def _refused_tls(address: str, port: int, context: ssl.SSLContext) -> None:
    """A TLS handshake (and a first read, where TLS 1.3 tells a client its certificate was refused)
    that the server must refuse."""
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(address, port, context)


def _handshake(address: str, port: int, context: ssl.SSLContext) -> None:
    with (
        socket.create_connection((address, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=address) as conn,
    ):
        conn.settimeout(2)
        with contextlib.suppress(TimeoutError):  # nothing refused: the server waits for a request
            conn.recv(1)


def _closed_port(address: str, port: int) -> None:
    """Nothing answers: refused where nothing listens, or dropped by the host firewall (which lets no
    one in on a port of no role's; test_nothing_else_listens_on_the_network sees no listener there)."""
    with pytest.raises((ConnectionRefusedError, TimeoutError)):
        socket.create_connection((address, port), timeout=3).close()


def _admin_errors(config: dict[str, Any]) -> tuple[list[KafkaError], KafkaException | None]:
    errors: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": errors.append})
    raised = None
    try:
        admin.list_topics(timeout=8)
    except KafkaException as exc:
        raised = exc
    admin.poll(0.5)
    return errors, raised


# ------------------------------------------------------------------ Kafka ----------------------
@pytest.mark.parametrize("broker", BROKERS)
def test_no_plaintext_kafka_listener(broker: str) -> None:
    _closed_port(ADDRESS[broker], KAFKA_PLAIN_PORT)
    _handshake(ADDRESS[broker], KAFKA_PORT, tls_context(None))  # the control: CLIENT speaks TLS


def test_kafka_refuses_plaintext_and_a_wrong_password(tenant: dict[str, str]) -> None:
    topics = AdminClient(kafka_client()).list_topics(timeout=20).topics
    assert tenant["kafka_topic"] in topics, "the control: AMS's user sees the tenant's topic"
    plain = {"bootstrap.servers": kafka_client()["bootstrap.servers"], "socket.timeout.ms": 5000}
    errors, raised = _admin_errors(plain)
    assert raised is not None
    assert raised.args[0].code() == KafkaError._TRANSPORT
    errors, raised = _admin_errors(kafka_client(password="not-the-password"))
    assert raised is not None
    assert KafkaError._AUTHENTICATION in [e.code() for e in errors], errors


def test_kafka_spark_user_reads_the_tenant_topic_but_cannot_write_it(tenant: dict[str, str]) -> None:
    reader = Consumer(kafka_client("spark", **{"group.id": "spark-kafka-multinode", "enable.auto.commit": False}))
    try:
        reader.assign([TopicPartition(tenant["kafka_topic"], 0, 0)])
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            message = reader.poll(1)
        assert message is not None
        assert message.error() is None
        assert b64(SECRET).encode() in message.value()  # the control: the jobs' user reads
    finally:
        reader.close()
    outcomes: list[Any] = []
    writer = Producer(kafka_client("spark", **{"message.timeout.ms": 10000}))
    writer.produce(tenant["kafka_topic"], b"forged", on_delivery=lambda err, _msg: outcomes.append(err))
    writer.flush(20)
    assert [e.code() for e in outcomes] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_kafka_broker_listener_wants_a_broker_certificate(stranger_files: tuple[str, str]) -> None:
    broker = ADDRESS[BROKERS[0]]
    _handshake(broker, KAFKA_BROKER_PORT, tls_context("kafka"))  # the control
    _refused_tls(broker, KAFKA_BROKER_PORT, tls_context(None))
    _refused_tls(broker, KAFKA_BROKER_PORT, _stranger(stranger_files))
    # a certificate of the internal CA whose subject no ACL names (ZooKeeper's) sees no topic
    other_cert, other_key = identity("zookeeper")
    other = {
        "bootstrap.servers": f"{broker}:{KAFKA_BROKER_PORT}",
        "security.protocol": "ssl",
        "ssl.ca.location": str(INTERNAL_CA),
        "ssl.certificate.location": other_cert,
        "ssl.key.location": other_key,
    }
    assert not AdminClient(other).list_topics(timeout=20).topics
    kafka_cert, kafka_key = identity("kafka")
    brokers = {**other, "ssl.certificate.location": kafka_cert, "ssl.key.location": kafka_key}
    assert AdminClient(brokers).list_topics(timeout=20).topics


# ------------------------------------------------------------------ ZooKeeper ------------------
@pytest.mark.parametrize("member", MEMBERS)
def test_zookeeper_plain_port_is_not_on_the_network(member: str) -> None:
    _closed_port(ADDRESS[member], ZOOKEEPER_PLAIN_PORT)
    # on the member itself it answers the health words, for the role's checks
    assert host(member).run(f"/usr/local/sbin/zookeeper-health 127.0.0.1 {ZOOKEEPER_PLAIN_PORT} --ruok").rc == 0


def test_zookeeper_wants_a_certificate_of_the_internal_ca(stranger_files: tuple[str, str]) -> None:
    member = ADDRESS[MEMBERS[0]]
    _handshake(member, ZOOKEEPER_PORT, tls_context("ams"))  # the control
    _refused_tls(member, ZOOKEEPER_PORT, tls_context(None))
    _refused_tls(member, ZOOKEEPER_PORT, _stranger(stranger_files))
    # the election port takes members only: a member's certificate, from that member's address
    peer = MEMBERS[1]
    control = host(peer).run(
        'python3 -c \'import socket, ssl; d = "/etc/zookeeper/tls/"; '
        'c = ssl.create_default_context(cafile=d + "ca.pem"); '
        'c.load_cert_chain(d + "zookeeper.pem", d + "zookeeper.key"); '
        f's = c.wrap_socket(socket.create_connection(("{MEMBERS[0]}", 3888), timeout=5), '
        f'server_hostname="{MEMBERS[0]}"); print(s.version())\''
    )
    assert control.rc == 0, control.stderr
    _refused_tls(member, 3888, tls_context(None))
    _refused_tls(member, 3888, tls_context("zookeeper"))  # a member's certificate, not from its address


def test_ams_znodes_belong_to_the_ams_certificate(tenant: dict[str, str]) -> None:
    api = Api()
    sub = unique("claimed")
    api.subscription(sub, tenant["topic"])
    api.call("POST", f"/projects/{PROJECT}/subscriptions/{sub}:pull", {"maxMessages": "1", "returnImmediately": "true"})
    owners = f"/ams-consume/{DATABASE}/owners"
    ams = zookeeper_client(MEMBERS)
    ams.start(timeout=20)
    try:
        claims = ams.get_children(owners)
        assert claims
        claim = f"{owners}/{claims[0]}"
        acls, _ = ams.get_acls(claim)
        assert [(a.id.scheme, a.id.id) for a in acls] == [("x509", "CN=ams")]
        ams.get(claim)  # the control
    finally:
        ams.stop()
        ams.close()
    other = zookeeper_client(MEMBERS, who="zookeeper")
    other.start(timeout=20)
    try:
        for path in (claim, f"/ams-metadata/{DATABASE}"):
            with pytest.raises(NoAuthError):
                other.get(path)
            with pytest.raises(NoAuthError):
                other.set(path, b"forged")
        with pytest.raises(NoAuthError):
            other.get("/kafka/config/users/ams")  # Kafka's SCRAM credentials
    finally:
        other.stop()
        other.close()


# ------------------------------------------------------------------ the metadata store ---------
def test_metadata_store_wants_tls_and_a_login(tenant: dict[str, str]) -> None:
    store = mongo_client()
    try:
        projects = list(store.get_database(DATABASE)["projects"].find({"name": PROJECT}))
    finally:
        store.close()
    assert projects, "the control: AMS's login over TLS reads the tenant's project"
    plain = mongo_client(tls=False)
    try:
        with pytest.raises(ServerSelectionTimeoutError):
            plain.get_database(DATABASE).list_collection_names()
    finally:
        plain.close()
    for user, password, code in (("", None, 13), ("ams", "not-the-password", 18)):
        client = mongo_client(user=user, password=password)
        try:
            with pytest.raises(OperationFailure) as refused:
                client.get_database(DATABASE).list_collection_names()
            assert refused.value.code == code
        finally:
            client.close()


def test_a_copy_of_the_store_holds_no_usable_token() -> None:
    api = Api()
    name = unique("tenant-user")
    token = api.call("POST", f"/users/{name}", {"service_roles": []})["token"]
    store = mongo_client()
    try:
        stored = store.get_database(DATABASE)["users"].find_one({"name": name})
    finally:
        store.close()
    assert token not in repr(stored)
    assert str(stored["token"]).startswith("sealed:")
    assert requests.get(f"{api.base}/users/profile", params={"key": token}, verify=str(CA), timeout=30).ok
    refused = requests.get(f"{api.base}/users/profile", params={"key": stored["token"]}, verify=str(CA), timeout=30)
    assert refused.status_code == 401
    report("strangers", {"sealed": True})


# ------------------------------------------------------------------ AMS nodes ------------------
NODES = GROUPS["ams"]
#: The push workers' Prometheus page on each node (inventories: ams_push_worker_metrics_port).
PUSH_WORKER_PAGE = 9108


@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize(("port", "path"), [(AMS_PORT, "/v1/projects"), (PUSH_WORKER_PAGE, "/metrics")])
def test_ams_nodes_speak_https_only_and_want_a_token(node: str, port: int, path: str) -> None:
    """The API and the push worker's page: no plain HTTP (a token sent there would cross the
    network in clear), a certificate of the internal CA that names the node (what haproxy, the other
    nodes and Prometheus check), 401 without a token; the control, with the service token, 200."""
    address = ADDRESS[node]
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://{address}:{port}{path}", timeout=10)
    for name in (node, address):  # the certificate's SANs: the inventory name and the address
        with socket.create_connection((address, port), timeout=5) as raw:
            tls_context(None).wrap_socket(raw, server_hostname=name).close()
    url = f"https://{address}:{port}{path}"
    assert requests.get(url, verify=str(INTERNAL_CA), timeout=10).status_code == 401
    assert requests.get(url, headers={"x-api-key": TOKEN}, verify=str(INTERNAL_CA), timeout=30).status_code == 200


def test_haproxy_verifies_the_nodes_against_the_internal_ca() -> None:
    """haproxy's server lines: TLS to each node, refused unless its certificate chains to the internal
    CA and names it, for the API and for the gRPC API (the control: through haproxy, the API answers;
    test_30 runs it in depth, and its pulls through one node forwarded to the owner prove the nodes'
    forwarding verifies too; test_80 runs the gRPC API through haproxy)."""
    config = host(GROUPS["haproxy"][0]).file("/etc/haproxy/haproxy.cfg").content_string
    servers = [line.split() for line in config.splitlines() if line.split()[:1] == ["server"]]
    nodes = [words for words in servers if words[1] in NODES and words[2].endswith(f":{AMS_PORT}")]
    assert nodes
    for words in nodes:
        assert words[-2:] == ["verifyhost", words[1]], words
    defaults = [line for line in config.splitlines() if line.strip().startswith("default-server") and " ssl " in line]
    assert defaults
    assert all("verify required ca-file /etc/haproxy/backend-ca.pem" in line for line in defaults)
    grpc_servers = [words for words in servers if words[1] in NODES and words[2].endswith(f":{GRPC_PORT}")]
    assert sorted(words[1] for words in grpc_servers) == sorted(NODES)
    for words in grpc_servers:  # gRPC over TLS needs HTTP/2 negotiated
        assert "ssl verify required ca-file /etc/haproxy/backend-ca.pem alpn h2" in " ".join(words), words
        assert words[-2:] == ["verifyhost", words[1]], words
    assert Api().call("GET", "/status") is not None


def _list_topics(channel: grpc.Channel, token: str | None) -> grpc.StatusCode:
    """The Pub/Sub API's ListTopics of the project on ``channel``, with ``token`` as the API key (none:
    no credentials); OK, or the status it was refused with (one attempt: no client's retries)."""
    call = channel.unary_unary(
        "/google.pubsub.v1.Publisher/ListTopics",
        request_serializer=ListTopicsRequest.serialize,
        response_deserializer=ListTopicsResponse.deserialize,
    )
    metadata = [("x-goog-api-key", token)] if token else []
    try:
        call(ListTopicsRequest(project=f"projects/{PROJECT}"), metadata=metadata, timeout=20)
    except grpc.RpcError as refused:
        return refused.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("node", NODES)
def test_ams_nodes_grpc_api_speaks_tls_only_and_wants_a_token(tenant: dict[str, str], node: str) -> None:
    """Each node's Pub/Sub gRPC API (ams_grpc_port): no plaintext (a token sent there would cross the
    network in clear), TLS with the node's certificate of the internal CA (what haproxy checks),
    HTTP/2 negotiated, UNAUTHENTICATED without a token or with a wrong one; the control, with the
    service token, OK."""
    address = ADDRESS[node]
    with grpc.insecure_channel(f"{address}:{GRPC_PORT}") as plain:
        assert _list_topics(plain, TOKEN) == grpc.StatusCode.UNAVAILABLE
    for name in (node, address):  # the certificate's SANs: the inventory name and the address
        context = tls_context(None)
        context.set_alpn_protocols(["h2"])
        with (
            socket.create_connection((address, GRPC_PORT), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=name) as conn,
        ):
            assert conn.selected_alpn_protocol() == "h2"
    credentials = grpc.ssl_channel_credentials(root_certificates=INTERNAL_CA.read_bytes())
    with grpc.secure_channel(f"{address}:{GRPC_PORT}", credentials) as channel:
        assert _list_topics(channel, None) == grpc.StatusCode.UNAUTHENTICATED
        assert _list_topics(channel, "not-a-token") == grpc.StatusCode.UNAUTHENTICATED
        assert _list_topics(channel, TOKEN) == grpc.StatusCode.OK


def test_the_grpc_frontend_speaks_tls_only_and_wants_a_token(tenant: dict[str, str]) -> None:
    """haproxy's gRPC frontend (haproxy_grpc_port): TLS with the public certificate only; the nodes
    behind it refuse a call without a valid token; the control, with the service token, OK."""
    with grpc.insecure_channel(GRPC_LB) as plain:
        assert _list_topics(plain, TOKEN) == grpc.StatusCode.UNAVAILABLE
    credentials = grpc.ssl_channel_credentials(root_certificates=CA.read_bytes())
    with grpc.secure_channel(GRPC_LB, credentials) as channel:
        assert _list_topics(channel, None) == grpc.StatusCode.UNAUTHENTICATED
        assert _list_topics(channel, "not-a-token") == grpc.StatusCode.UNAUTHENTICATED
        assert _list_topics(channel, TOKEN) == grpc.StatusCode.OK


# ------------------------------------------------------------------ Spark ----------------------
SPARK_MASTER = GROUPS["spark_master"][0]
SPARK_MASTER_PORT = 7077
#: An RPC request of Spark's transport (frame length, type 3 = RpcRequest, request id, body length, a
#: one-byte body): what a driver without the secret opens with instead of the authentication challenge.
SPARK_RPC_REQUEST = bytes.fromhex("00000000000000160300000000000000010000000100")


def test_spark_master_wants_the_shared_secret() -> None:
    """spark.authenticate: the master answers a client that does not open with the challenge of the
    shared secret with a failure and closes the connection (a master without it would answer an
    RpcFailure about the body and keep the connection open). The control: both workers, which hold
    the secret, are registered and ALIVE."""
    with socket.create_connection((ADDRESS[SPARK_MASTER], SPARK_MASTER_PORT), timeout=10) as conn:
        conn.sendall(SPARK_RPC_REQUEST)
        conn.settimeout(10)
        answer = b""
        with contextlib.suppress(ConnectionError):
            while chunk := conn.recv(65536):
                answer += chunk
    # closed by the master (recv returned b"" or the connection was reset), after at most a refusal
    assert answer == b"" or b"challenge" in answer, answer[:300]
    state = requests.get(f"http://{ADDRESS[SPARK_MASTER]}:8080/json/", timeout=10).json()
    alive = [worker for worker in state["workers"] if worker["state"] == "ALIVE"]
    assert len(alive) == len(GROUPS["spark_worker"])


# ------------------------------------------------------------------ the firewall ---------------
#: (port, host that serves it, a host of the scenario the allow-list leaves out, one it lets in):
#: roles/firewall's entries, each probed from a host inside the network, where only the firewall
#: stands between the two (this machine, the tests' host, is in firewall_admin_sources).
FIREWALL_PAIRS = [
    (KAFKA_PORT, BROKERS[0], GROUPS["monitoring"][0], NODES[0]),
    (ZOOKEEPER_PORT, MEMBERS[0], GROUPS["spark_worker"][0], NODES[0]),
    (MONGO_PORT, STORE, GROUPS["haproxy"][0], NODES[0]),
    (AMS_PORT, NODES[0], GROUPS["spark_worker"][0], GROUPS["haproxy"][0]),
    # the nodes' gRPC API: haproxy's, and the other nodes' (a call passed on to a subscription's owner)
    (GRPC_PORT, NODES[0], GROUPS["spark_worker"][0], GROUPS["haproxy"][0]),
    (GRPC_PORT, NODES[0], GROUPS["monitoring"][0], NODES[1]),
    # a worker's own ports: the other nodes forward to a subscription's owner there, Prometheus scrapes
    # the API's; haproxy only ever reaches the port the workers share
    (WORKER_PORTS[-1], NODES[0], GROUPS["haproxy"][0], NODES[1]),
    (WORKER_PORTS[0], NODES[0], GROUPS["spark_worker"][0], GROUPS["monitoring"][0]),
    (WORKER_GRPC_PORTS[-1], NODES[0], GROUPS["monitoring"][0], NODES[1]),
    (PUSH_WORKER_PAGE, NODES[0], GROUPS["haproxy"][0], GROUPS["monitoring"][0]),
    (9100, BROKERS[0], GROUPS["haproxy"][0], GROUPS["monitoring"][0]),  # node exporter
    (7071, BROKERS[0], NODES[0], GROUPS["monitoring"][0]),  # Kafka's JMX exporter
    (8405, GROUPS["haproxy"][0], NODES[0], GROUPS["monitoring"][0]),  # haproxy's exporter
    (SPARK_MASTER_PORT, SPARK_MASTER, NODES[0], GROUPS["spark_worker"][0]),
    (8080, SPARK_MASTER, NODES[0], GROUPS["monitoring"][0]),  # the master's web UI
    (8081, GROUPS["spark_worker"][0], NODES[0], GROUPS["monitoring"][0]),  # a worker's web UI
]
#: Run inside a container: connect, and say how it went.
PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except TimeoutError:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
"""


def _probe(source: str, target: str, port: int) -> str:
    done = host(source).run(f"python3 -c {shlex.quote(PROBE)} {ADDRESS[target]} {port}")
    assert done.rc == 0, done.stderr
    return str(done.stdout.strip())


@pytest.mark.parametrize(("port", "target", "stranger", "allowed"), FIREWALL_PAIRS, ids=lambda v: str(v))
def test_the_firewall_lets_in_only_the_groups_of_a_port(port: int, target: str, stranger: str, allowed: str) -> None:
    assert _probe(stranger, target, port) == "timeout"  # dropped: not even a refusal comes back
    assert _probe(allowed, target, port) == "connected"


@pytest.mark.parametrize("port", [9090, 9093])
def test_the_monitoring_host_answers_only_the_admin_sources(port: int) -> None:
    """Prometheus and Alertmanager: no group's hosts, only firewall_admin_sources (here, this machine)."""
    monitor = GROUPS["monitoring"][0]
    assert _probe(NODES[0], monitor, port) == "timeout"
    socket.create_connection((ADDRESS[monitor], port), timeout=5).close()


# ------------------------------------------------------------------ listeners ------------------
#: What may listen on the network (not loopback), by the host's groups: the ports the roles open
#: and roles/firewall lets in. Anything else, such as a leftover PLAINTEXT://:9092 or ZooKeeper's
#: plain 2181, fails here. The Spark hosts' drivers and executors listen on ephemeral ports while a
#: job runs (their peers, the other Spark hosts, are the only ones the firewall lets in there).
ALLOWED = {
    "all": {9100},
    "haproxy": {80, 443, 8443, 8444, 8405},
    "ams": {AMS_PORT, 8443, GRPC_PORT, PUSH_WORKER_PAGE, *WORKER_PORTS, *WORKER_GRPC_PORTS},
    "zookeeper": {ZOOKEEPER_PORT, 2888, 3888, 7000},
    "kafka": {KAFKA_BROKER_PORT, KAFKA_PORT, 7071},
    "mongodb": {MONGO_PORT},
    "spark_master": {SPARK_MASTER_PORT, 8080},
    "spark_worker": {7078, 8081},
    "monitoring": {9090, 9093},
}
#: The control: the port each group's service must listen on.
SERVING = {
    "haproxy": 443,
    "ams": AMS_PORT,
    "zookeeper": ZOOKEEPER_PORT,
    "kafka": KAFKA_PORT,
    "mongodb": MONGO_PORT,
    "spark_master": SPARK_MASTER_PORT,
    "spark_worker": 7078,
    "monitoring": 9090,
}
EPHEMERAL = range(32768, 61000)


@pytest.mark.parametrize("name", EVERY_HOST)
def test_nothing_else_listens_on_the_network(name: str) -> None:
    listing = host(name).run("ss -ltnH")
    assert listing.rc == 0, listing.stderr
    ports = set()
    for line in listing.stdout.splitlines():
        address, _, port = line.split()[3].rpartition(":")
        address = address.strip("[]").removeprefix("::ffff:")  # Java's listeners show IPv4 mapped
        if not address.startswith("127.") and address != "::1":
            ports.add(int(port))
    groups = [group for group, members in GROUPS.items() if name in members]
    allowed = set().union(ALLOWED["all"], *(ALLOWED.get(group, set()) for group in groups))
    if any(group.startswith("spark") for group in groups):
        ports = {port for port in ports if port not in EPHEMERAL}
    assert ports <= allowed, sorted(ports - allowed)
    serving = {SERVING[group] for group in groups if group in SERVING}
    assert serving
    assert serving <= ports  # the control: the services do listen on the network
