"""``python -m spark <job>``: the dispatcher and the jobs' arguments (no Spark session)."""

from __future__ import annotations

import pytest

from spark.__main__ import main
from spark.jobs import archive, usage_report


def test_unknown_or_missing_job_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["no_such_job"]) == 2
    assert "usage: python -m spark {usage_report,archive}" in capsys.readouterr().err


def test_jobs_need_their_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMS_SPARK_MONGO_URI", raising=False)
    with pytest.raises(SystemExit):
        usage_report.parse_args(["--output-dir", "/tmp/x"])
    with pytest.raises(SystemExit):
        archive.parse_args(["--bootstrap-servers", "k:9092"])
    args = archive.parse_args(["--bootstrap-servers", "k:9092", "--output-dir", "/tmp/x"])
    assert (args.mongo_uri, args.mongo_database, args.master) == ("mongodb://127.0.0.1:27017", "argo_msg", None)


def test_the_store_uri_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """ams-spark-job (the spark role) passes the URI, with its credentials, in AMS_SPARK_MONGO_URI."""
    monkeypatch.setenv("AMS_SPARK_MONGO_URI", "mongodb://ams:secret@db1:27017/?replicaSet=rs0")
    base = ["--bootstrap-servers", "k:9092", "--output-dir", "/tmp/x"]
    for job in (archive, usage_report):
        assert job.parse_args(base).mongo_uri == "mongodb://ams:secret@db1:27017/?replicaSet=rs0"
        assert job.parse_args([*base, "--mongo-uri", "mongodb://other"]).mongo_uri == "mongodb://other"
    monkeypatch.setenv("AMS_SPARK_MONGO_URI", "")
    assert archive.parse_args(base).mongo_uri == "mongodb://127.0.0.1:27017"
