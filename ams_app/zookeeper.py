"""The ZooKeeper client every part of the service uses (push ownership, subscription owners, the
metadata cache, broker discovery): one that fits the process it runs in, and speaks the ensemble's
security (docs/production.md, "Security").

With ``zookeeper_tls`` the client speaks TLS and checks the server's certificate against
``zookeeper_ca_file`` and its host name. With a client certificate as well, the ensemble knows the
client by the certificate's subject (ZooKeeper's x509 authentication), and every znode AMS creates
gets the ACL "all rights to the creator's identity, nothing to anyone else" (``CREATOR_ALL_ACL``).
So every AMS node and push worker must present a certificate with the same subject: it is that
subject, not the host, that owns the claims and the metadata generation. Without a client
certificate the znodes stay open, as ZooKeeper creates them by default."""

from __future__ import annotations

from typing import Any

from ams_app.settings import Settings


def zookeeper_options(settings: Settings) -> dict[str, Any]:
    """The keyword arguments of ``KazooClient`` for the settings' security (none in plaintext)."""
    if not settings.zookeeper_tls:
        return {}
    options: dict[str, Any] = {"use_ssl": True, "verify_certs": True, "check_hostname": True}
    if settings.zookeeper_ca_file:
        options["ca"] = settings.zookeeper_ca_file
    if settings.zookeeper_cert_file:
        from kazoo.security import CREATOR_ALL_ACL

        options |= {
            "certfile": settings.zookeeper_cert_file,
            "keyfile": settings.zookeeper_key_file,
            "default_acl": CREATOR_ALL_ACL,
        }
    return options


def zookeeper_client(settings: Settings, session_seconds: float, max_delay: float) -> Any:
    """A kazoo client of ``settings.zookeeper_hosts`` that reconnects for ever, waiting at most
    ``max_delay`` between attempts.

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
        hosts=settings.zookeeper_hosts,
        timeout=session_seconds,
        handler=handler,
        connection_retry={"max_tries": -1, "max_delay": max_delay},
        **zookeeper_options(settings),
    )
