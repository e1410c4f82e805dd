"""Rerunnable throughput benchmarks (their figures: docs/benchmarks.md). Run each from the
repository's root with the checkout's venv as ``.venv/bin/python -m benchmarks.<name>`` (``make
bench`` runs api_throughput); they import ``tests`` and ``tools`` as packages of the checkout."""
