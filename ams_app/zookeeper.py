"""The ZooKeeper client every part of the service uses (push ownership, subscription owners, the
metadata cache): one that fits the process it runs in."""

from __future__ import annotations

from typing import Any


def zookeeper_client(hosts: str, session_seconds: float, max_delay: float) -> Any:
    """A kazoo client that reconnects for ever, waiting at most ``max_delay`` between attempts.

    Under ``ams serve`` (gevent monkey-patched) it runs on greenlets; in a plain process, such as
    ``ams admin``, on threads. kazoo refuses a gevent handler whose retries would sleep with the
    unpatched ``time.sleep``, and that made every ``ams admin`` verb fail on backend kafka."""
    from gevent import monkey
    from kazoo.client import KazooClient

    handler: Any
    if monkey.is_module_patched("socket"):
        from kazoo.handlers.gevent import SequentialGeventHandler

        handler = SequentialGeventHandler()
    else:
        from kazoo.handlers.threading import SequentialThreadingHandler

        handler = SequentialThreadingHandler()
    return KazooClient(
        hosts=hosts,
        timeout=session_seconds,
        handler=handler,
        connection_retry={"max_tries": -1, "max_delay": max_delay},
    )
