"""Concurrent publishers and consumers on one subscription get consistent results."""

from __future__ import annotations

import base64
import threading
from collections import Counter
from typing import Any

import pytest

from tests.helpers import AmsServer, b64, unique

pytestmark = pytest.mark.slow

PUBLISHERS, CONSUMERS, BATCHES, PER_BATCH = 4, 4, 25, 8


def test_every_message_reaches_exactly_one_consumer(server: AmsServer) -> None:
    api = server.api()
    project = api.new_project()
    api.ok("PUT", f"/projects/{project}/topics/t")
    body = {"topic": f"projects/{project}/topics/t", "ackDeadlineSeconds": 120}
    api.ok("PUT", f"/projects/{project}/subscriptions/s", body)

    published: list[str] = []
    received: list[tuple[str, str]] = []  # (messageId, payload)
    lock = threading.Lock()
    done_publishing = threading.Event()
    errors: list[str] = []

    def publisher(worker: int) -> None:
        client = server.api()
        for batch in range(BATCHES):
            payloads = [f"p{worker}-{batch}-{i}" for i in range(PER_BATCH)]
            r = client.post(f"/projects/{project}/topics/t:publish", {"messages": [{"data": b64(p)} for p in payloads]})
            if r.status_code != 200:
                errors.append(r.text)
                return
            with lock:
                published.extend(payloads)

    def consumer() -> None:
        client = server.api()
        idle = 0
        while idle < 3:
            r = client.post(
                f"/projects/{project}/subscriptions/s:pull", {"maxMessages": "7", "returnImmediately": "false"}
            )
            if r.status_code != 200:
                errors.append(r.text)
                return
            got = r.json()["receivedMessages"]
            if not got:
                idle += 1 if done_publishing.is_set() else 0
                continue
            idle = 0
            with lock:
                received.extend(
                    (m["message"]["messageId"], base64.b64decode(m["message"]["data"]).decode()) for m in got
                )
            a = client.ack(project, "s", [m["ackId"] for m in got])
            if a.status_code != 200:
                errors.append(a.text)

    consumers = [threading.Thread(target=consumer) for _ in range(CONSUMERS)]
    publishers = [threading.Thread(target=publisher, args=(w,)) for w in range(PUBLISHERS)]
    for t in consumers + publishers:
        t.start()
    for t in publishers:
        t.join(120)
    done_publishing.set()
    for t in consumers:
        t.join(120)

    assert errors == []
    total = PUBLISHERS * BATCHES * PER_BATCH
    assert len(published) == total
    ids = Counter(mid for mid, _ in received)
    assert [mid for mid, n in ids.items() if n > 1] == [], "a message went to two consumers within its deadline"
    assert sorted(p for _, p in received) == sorted(published)
    assert sorted(int(mid) for mid in ids) == list(range(total))
    assert api.ok("GET", f"/projects/{project}/subscriptions/s:offsets") == {"max": total, "min": 0, "current": total}


def test_concurrent_creates_of_one_name_make_one_resource(server: AmsServer) -> None:
    api = server.api()
    project = api.new_project()
    name = unique("t")
    codes: list[int] = []

    def create() -> None:
        codes.append(server.api().put(f"/projects/{project}/topics/{name}").status_code)

    threads = [threading.Thread(target=create) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(codes) == [200] + [409] * 9
    listed: Any = api.ok("GET", f"/projects/{project}/topics")
    assert listed["totalSize"] == 1
