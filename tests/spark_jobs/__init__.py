"""Tiny PySpark job files the tests submit to the standalone cluster (tools/spark_cluster.py submit)."""
