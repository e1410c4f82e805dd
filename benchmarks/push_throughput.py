"""Push delivery throughput of `ams serve` (its in-process worker) to a local HTTPS receiver.

    .venv/bin/python -m benchmarks.push_throughput [--messages 5000] [--max-messages 100] [--period 1]
                                                   [--subs 1] [--size 512] [--backend embedded|kafka]

(--backend kafka needs `make services-up`.)

Publishes --messages to a topic with --subs push subscriptions on it (unverified, so nothing
moves yet), then verifies them all and times until the receiver has accepted every message of
every subscription: the backlog drain rate, messages per second. --period is the linear
retry policy's interval between two requests of one subscription (ms). Loopback only.
"""

from __future__ import annotations

import argparse
import base64
import os
import tempfile
import time
from pathlib import Path

import trustme

from tests.helpers import AmsServer
from tests.push_receiver import Receiver


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.push_throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--max-messages", type=int, default=100, help="the subscriptions' maxMessages")
    parser.add_argument("--period", type=int, default=1, help="linear retry period (ms)")
    parser.add_argument("--subs", type=int, default=1)
    parser.add_argument("--size", type=int, default=512, help="bytes of data per message")
    parser.add_argument("--backend", choices=["embedded", "kafka"], default="embedded")
    args = parser.parse_args()

    ca = trustme.CA()
    receiver = Receiver(ca)
    with tempfile.TemporaryDirectory() as tmp:
        ca_file = Path(tmp) / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        env = {"AMS_LOG_LEVEL": "WARNING", "AMS_PUSH_CA_FILE": str(ca_file), "AMS_PUSH_MAX_RATE": "0"}
        server = AmsServer(Path(tmp) / "data", env=env, backend=args.backend).start()
        try:
            api = server.api()
            api.ok("POST", "/projects/bench", {})
            api.ok("PUT", "/projects/bench/topics/t")
            config = {
                "type": "http_endpoint",
                "pushEndpoint": receiver.url(),
                "maxMessages": args.max_messages,
                "retryPolicy": {"type": "linear", "period": args.period},
            }
            hashes = []
            for i in range(args.subs):
                body = {"topic": "projects/bench/topics/t", "pushConfig": config}
                hashes.append(api.ok("PUT", f"/projects/bench/subscriptions/s{i}", body)["pushConfig"])
            data = base64.b64encode(os.urandom(args.size)).decode()
            for i in range(0, args.messages, 500):
                count = min(500, args.messages - i)
                api.ok("POST", "/projects/bench/topics/t:publish", {"messages": [{"data": data}] * count})
            started = time.monotonic()
            for i, pushed in enumerate(hashes):
                receiver.verification = (200, pushed["verificationHash"])
                api.ok("POST", f"/projects/bench/subscriptions/s{i}:verifyPushEndpoint")
            total = args.messages * args.subs
            receiver.wait_for(total, timeout=600)
            elapsed = time.monotonic() - started
        finally:
            server.stop()
            receiver.close()
    requests_made = len(receiver.accepted())
    print(
        f"backend={args.backend} subs={args.subs} maxMessages={args.max_messages} period={args.period}ms "
        f"size={args.size}B: {total} messages in {elapsed:.2f}s = {total / elapsed:,.0f} msg/s "
        f"({requests_made} requests, {requests_made / elapsed:,.0f} req/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
