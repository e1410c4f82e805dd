"""Run a module with its wall clock shifted: ``python -m tests.shifted_clock SECONDS MODULE [ARG ...]``.

The Spark pipeline test needs a past day's traffic, published through the API of a real AMS node
on the Kafka backend. libfaketime would shift the whole process, but librdkafka's timed waits
hang under it (measured with libfaketime 0.9.10: ``list_topics(timeout=5)`` never returns), so
time-machine shifts the clock where Python reads it instead (``time.time``/``time_ns``,
``datetime.now``, ``date.today``, ...) and lets it tick on. Monotonic clocks, C libraries and
the servers (Kafka, MongoDB) keep real time; the node sets each Kafka record's timestamp
itself, from its publish time."""

from __future__ import annotations

import runpy
import sys
import time

import time_machine


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: python -m tests.shifted_clock SECONDS MODULE [ARG ...]")
    seconds, module = float(argv[0]), argv[1]
    sys.argv = [module, *argv[2:]]
    with time_machine.travel(time.time() + seconds, tick=True):
        runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
