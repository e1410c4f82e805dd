"""``ams push-worker``: push delivery as a service of its own (backend kafka, every AMS node).

Workers find each other and share the push subscriptions through ZooKeeper; SIGTERM hands the
worker's subscriptions over at once (after the posts in flight), SIGKILL within the session
timeout.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import logging  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402

from ams_app.backends import open_backends  # noqa: E402
from ams_app.logs import configure_logging  # noqa: E402
from ams_app.push.worker import PushWorker, coordinator_for  # noqa: E402
from ams_app.service.core import AmsService  # noqa: E402
from ams_app.settings import Settings  # noqa: E402

log = logging.getLogger("ams.push")


def run_worker(settings: Settings) -> int:
    configure_logging(settings)
    if settings.backend != "kafka":
        print("ams: push-worker needs backend kafka (the embedded backend delivers in ams serve)", file=sys.stderr)
        return 2
    if not settings.push_enabled:
        print("ams: push_enabled is false: there is nothing to deliver", file=sys.stderr)
        return 2
    store, message_log = open_backends(settings)
    service = AmsService(settings, store, message_log)
    worker = PushWorker(service, coordinator_for(settings, register=True), settings).start()
    log.info(
        "push worker %s started (ZooKeeper %s, %s)",
        worker.coordinator.worker_id,
        settings.zookeeper_hosts,
        settings.push_root,
    )
    done = Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(signum, done.set)
    done.wait()
    log.info("push worker stopping")
    worker.stop(settings.shutdown_timeout)
    service.close()
    log.info("push worker stopped")
    return 0
