"""Shared fixtures: a trusted test CA, and a real AMS server speaking HTTPS on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import trustme
from requests.adapters import HTTPAdapter

from tests.helpers import AmsServer, Api, service_settings, services_reachable
from tests.inprocess import InProcessServer, WsgiAdapter
from tests.openapi_check import ResponseChecker, load_document

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The Spark JVMs the tests start (tools/spark_cluster.py's daemons, drivers and executors, and the
# local sessions) each live seconds to minutes: the C2 compiler's work would never pay back, and
# a parallel collector's threads only add to the load (a third of the Spark tests' CPU).
os.environ.setdefault("AMS_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
#: Backends the API tests run against: both, unless AMS_TEST_BACKENDS narrows it (make test-fast).
BACKENDS = [b for b in os.environ.get("AMS_TEST_BACKENDS", "embedded,kafka").split(",") if b]


def require_backend(backend: str) -> None:
    """The Kafka backend needs its servers: a skip outside CI, a failure under CI=true."""
    if backend == "kafka":
        missing = services_reachable(service_settings())
        if missing:
            pytest.skip(f"kafka backend: {missing}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """Under CI=true a skipped test is a failure: nothing may be silently left out."""
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true: {report.longrepr}"


@pytest.fixture(scope="session")
def test_ca() -> trustme.CA:
    """The tests' CA: it issues the servers' certificates and the push receivers'."""
    return trustme.CA()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory, test_ca: trustme.CA) -> Iterator[tuple[str, str, str]]:
    """(cert, key, ca) for 127.0.0.1 and localhost; requests trusts the CA through
    REQUESTS_CA_BUNDLE, which is how argo-ams-library's calls verify the server. The servers
    trust it for push endpoints through AMS_PUSH_CA_FILE."""
    ca = test_ca
    cert = ca.issue_cert("127.0.0.1", "localhost")
    root = tmp_path_factory.mktemp("tls")
    cert_path, key_path, ca_path = root / "cert.pem", root / "key.pem", root / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    old = os.environ.get("REQUESTS_CA_BUNDLE")
    os.environ["REQUESTS_CA_BUNDLE"] = str(ca_path)
    # gRPC's roots, for Google's Pub/Sub clients over TLS (read once, at the first secure channel)
    os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(ca_path)
    yield str(cert_path), str(key_path), str(ca_path)
    if old is None:
        os.environ.pop("REQUESTS_CA_BUNDLE", None)
    else:
        os.environ["REQUESTS_CA_BUNDLE"] = old


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend of the API tests: each runs once per backend."""
    require_backend(request.param)
    return str(request.param)


@pytest.fixture(scope="session")
def socket_server(
    backend: str, tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[str, str, str]
) -> Iterator[AmsServer]:
    """One HTTPS server per backend for the API tests; each test works in projects of its own."""
    data = tmp_path_factory.mktemp(f"ams-{backend}") / "data"
    srv = AmsServer(data, tls=(tls_files[0], tls_files[1]), backend=backend, env={"AMS_PUSH_CA_FILE": tls_files[2]})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def inprocess_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """The service in this process on the embedded backend (tests/inprocess.py)."""
    srv = InProcessServer(tmp_path_factory.mktemp("ams-inprocess") / "data")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def server(request: pytest.FixtureRequest, backend: str) -> AmsServer | InProcessServer:
    """The service a module's tests talk to. A module marked ``inprocess`` (the rules, nothing
    that needs a socket) reaches the embedded backend in-process, the Kafka backend over HTTPS;
    any other module reaches both over HTTPS."""
    if backend == "embedded" and request.node.get_closest_marker("inprocess"):
        return request.getfixturevalue("inprocess_server")  # type: ignore[no-any-return]
    return request.getfixturevalue("socket_server")  # type: ignore[no-any-return]


@pytest.fixture
def api(server: AmsServer | InProcessServer) -> Api:
    """A client holding the service token."""
    return server.api()


@pytest.fixture
def project(api: Api) -> str:
    return api.new_project()


@pytest.fixture
def make_server(tmp_path: Path, tls_files: tuple[str, str, str]) -> Iterator[Any]:
    """Start servers of one's own (for restarts, kills and settings); all stopped at the end."""
    started: list[AmsServer] = []

    def make(
        data_dir: Path | None = None, tls: bool = True, backend: str = "embedded", clock_shift: float = 0.0, **env: str
    ) -> AmsServer:
        require_backend(backend)
        srv = AmsServer(
            data_dir or tmp_path / "data",
            tls=(tls_files[0], tls_files[1]) if tls else None,
            env={"AMS_PUSH_CA_FILE": tls_files[2], **{k.upper(): v for k, v in env.items()}},
            backend=backend,
            clock_shift=clock_shift,
        )
        started.append(srv)
        return srv.start()

    yield make
    for srv in started:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.kill()


# ---------------------------------------------------------------- OpenAPI response check ----
@pytest.fixture(scope="session", autouse=True)
def openapi_checker() -> Iterator[ResponseChecker]:
    """Every response the tests receive from the server (``/v1/...`` on 127.0.0.1, through
    ``requests``, so argo-ams-library's calls too, and from the in-process service) is checked
    against ams_app/openapi.yaml."""
    checker = ResponseChecker(load_document())
    original = HTTPAdapter.send

    def check(request: requests.PreparedRequest, response: requests.Response) -> None:
        content_type = response.headers.get("Content-Type", "")
        checker.check(request.method or "", request.url or "", response.status_code, content_type, response.content)

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        response = original(self, request, **kwargs)
        if not kwargs.get("stream"):
            check(request, response)
        return response

    def send_inprocess(self: WsgiAdapter, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        response = inprocess(self, request, **kwargs)
        check(request, response)
        return response

    inprocess = WsgiAdapter.send
    HTTPAdapter.send = send  # type: ignore[method-assign,assignment]
    WsgiAdapter.send = send_inprocess  # type: ignore[method-assign]
    yield checker
    HTTPAdapter.send = original  # type: ignore[method-assign]
    WsgiAdapter.send = inprocess  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _responses_match_openapi(openapi_checker: ResponseChecker) -> Iterator[None]:
    """After each test: no response it received contradicted the OpenAPI document."""
    yield
    failures = openapi_checker.take()
    if failures:
        listed = "\n".join(f"  {failure}" for failure in failures)
        pytest.fail(f"{len(failures)} response(s) do not match ams_app/openapi.yaml:\n{listed}", pytrace=False)
