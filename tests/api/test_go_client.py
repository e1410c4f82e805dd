"""Google's Go client for Pub/Sub (cloud.google.com/go/pubsub/v2, built from tests/go/pubsub through
the Go module proxy) against the gRPC API of ``ams serve``, on both backends: over TLS with an AMS
token as its API key, and in emulator mode (PUBSUB_EMULATOR_HOST: plaintext, no credentials).

The scenario (tests/go/pubsub/main.go): a topic and a subscription, 500 messages published, all
received through StreamingPull with the client's own flow control, each exactly once, their data and
attributes intact, acknowledged, and the two deleted; and a stream held open past the client's
heartbeat check, which must be answered (the client opens a new stream when it is not)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests import go_client
from tests.helpers import AmsServer, Api

pytestmark = pytest.mark.slow

#: Outside the clone: a fresh clone on the same machine reuses the binary and Go's build cache.
CACHE = Path.home() / ".cache" / "ams-tests" / "go-pubsub"


@pytest.fixture(scope="session")
def scenario() -> Path:
    return go_client.build(CACHE)


def test_the_go_client_publishes_and_receives_over_tls(
    scenario: Path, server: AmsServer, project: str, tls_files: tuple[str, str, str]
) -> None:
    env = {
        "AMS_GRPC_ENDPOINT": server.grpc_host,
        "AMS_GRPC_CA_FILE": tls_files[2],
        "AMS_TOKEN": server.token,
        "PUBSUB_PROJECT": project,
    }
    result = go_client.run(scenario, env, timeout=120, args=["-n", "500"])
    assert (result["published"], result["received_distinct"], result["duplicates"]) == (500, 500, 0)
    assert result["mismatched"] == 0
    assert result["publish_time_missing"] == 0


def test_the_go_client_in_emulator_mode_keeps_one_stream(scenario: Path, make_server: Callable[..., AmsServer]) -> None:
    """Plaintext, no credentials; the stream stays open 55 s past its last message: the client's
    heartbeat (after 30 s; unanswered within 15 s, the client opens the stream again, some 50 s in)
    is answered."""
    first = make_server(tls=False)
    api: Api = first.api()
    project = api.new_project()
    user = api.new_user(projects=[{"project": project, "roles": ["project_admin"]}])
    first.stop()
    served = make_server(data_dir=first.data_dir, tls=False, ams_grpc_emulator_user=user["name"])
    env = {"PUBSUB_EMULATOR_HOST": served.grpc_host, "PUBSUB_PROJECT": project}
    result = go_client.run(scenario, env, timeout=180, args=["-n", "200", "-linger", "55s"])
    assert (result["received_distinct"], result["duplicates"]) == (200, 0)
    assert result["streams_opened"] == 1
