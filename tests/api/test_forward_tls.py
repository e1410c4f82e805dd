"""The connections on which a node forwards a request to the subscription's owner
(ams_app/api/forward.py) verify the owner's certificate against ``forward_ca_file``, or the
system's CAs when it is empty, over a real TLS listener (``ams serve`` with the tests' CA)."""

from __future__ import annotations

from typing import Any

import pytest
import urllib3

from ams_app.api import forward


def test_an_owner_certified_by_forward_ca_file_is_reached(make_server: Any, tls_files: tuple[str, str, str]) -> None:
    srv = make_server()
    answer = forward._pool(tls_files[2]).request("GET", f"{srv.url}/status", retries=False, timeout=10)
    assert answer.status == 200
    assert answer.json()["status"] == "ok"


def test_an_owner_certified_by_another_ca_is_refused(make_server: Any) -> None:
    srv = make_server()
    # the tests' CA is not among the system's: the handshake fails, which forward() answers with
    # 503 at once (a certificate is not mended by waiting), unlike an owner that cannot be reached
    with pytest.raises(urllib3.exceptions.SSLError) as refused:
        forward._pool("").request("GET", f"{srv.url}/status", retries=False, timeout=10)
    assert not isinstance(refused.value, forward._UNREACHABLE)
