"""``ams authn``: AuthN's own process and HTTPS listener, with the API server's protections
against hostile clients (deadlines, connection limit; ams_app/serve.py)."""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import logging  # noqa: E402
import signal  # noqa: E402

import gevent  # noqa: E402
from gevent.pool import Pool  # noqa: E402
from OpenSSL import SSL  # noqa: E402

import ams_app.serve as ams_serve  # noqa: E402
from ams_app.authn.app import create_authn_app  # noqa: E402
from ams_app.authn.manage import MAX_BODY  # noqa: E402
from ams_app.authn.service import AuthnService  # noqa: E402
from ams_app.authn.tls import AuthnHandler, PeerCertContext  # noqa: E402
from ams_app.authn.x509 import TrustStore  # noqa: E402
from ams_app.backends import open_metadata_store  # noqa: E402
from ams_app.logs import configure_logging  # noqa: E402
from ams_app.settings import Settings  # noqa: E402

log = logging.getLogger("ams.authn")


def serve_authn(settings: Settings) -> int:
    configure_logging(settings)
    problems = settings.authn_problems()
    if problems:
        for problem in problems:
            log.error("ams authn needs %s", problem)
        return 2
    try:
        trust = TrustStore(settings.authn_ca_file, settings.authn_ca_dir, settings.authn_check_crls)
        context = PeerCertContext(
            settings.authn_tls_cert or settings.tls_cert or "", settings.authn_tls_key or settings.tls_key or ""
        )
    except (OSError, ValueError, SSL.Error) as exc:  # a missing CA file, a certificate that does not load
        log.error("ams authn cannot start: %s", exc)
        return 2
    store = open_metadata_store(settings)
    app = create_authn_app(AuthnService(store, trust, settings.service_token))
    server = ams_serve.Server(
        (settings.authn_host, settings.authn_port),
        app,
        spawn=Pool(settings.authn_max_connections + 10),
        handler_class=AuthnHandler,
        log=logging.getLogger("ams.authn.access"),
        error_log=logging.getLogger("ams.authn.error"),
        ssl_context=context,
    )
    server.client_timeout = settings.client_timeout
    server.head_timeout = settings.request_head_timeout
    server.body_timeout = settings.request_body_timeout
    server.max_body = MAX_BODY
    server.max_connections = settings.authn_max_connections
    server.stop_timeout = settings.shutdown_timeout

    def stop(signum: int) -> None:
        log.info("signal %d: stopping", signum)
        server.drain(settings.shutdown_timeout, min(settings.shutdown_idle_seconds, 1.0))

    for signum in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(signum, lambda s=signum: gevent.spawn(stop, s))
    server.start()
    log.info("AuthN listening on https://%s:%d (backend %s)", settings.authn_host, server.server_port, settings.backend)
    server.serve_forever()
    store.close()
    log.info("stopped")
    return 0
