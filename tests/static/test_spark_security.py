"""The spark role's security (``spark_authenticate_secret``, ``spark_network_crypto_enabled``,
``spark_ui_kill_enabled``): what it writes to spark-defaults.conf, that the secret is in that file alone
(on no command line, in no unit), and that the file is readable by the daemons and the AMS jobs but by
nobody else. The role's templates are rendered with Ansible's own templating, as in test_tool_configs.py.

Spark 3.5's Master and Worker load spark-defaults.conf from SPARK_CONF_DIR themselves
(MasterArguments/WorkerArguments call Utils.loadDefaultSparkProperties), spark-submit does too, and a
standalone cluster takes its secret only from the configuration (secret files are for Kubernetes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from tests.static.test_tool_configs import render_role_template

SECRET = "0123456789abcdef0123456789abcdef"  # the form of `openssl rand -hex 16`
AUTHENTICATION = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET}
ENCRYPTION = {
    "spark.network.crypto.enabled": "true",
    # authenticated encryption (the default AES/CTR is not) and the key exchange's version 2
    "spark.network.crypto.cipher": "AES/GCM/NoPadding",
    "spark.network.crypto.authEngineVersion": "2",
    # no fallback to SASL, whose links are not encrypted
    "spark.network.crypto.saslFallback": "false",
}
#: What a Debian 12 host's facts give the role's paths (SPARK_HOME under python3.11), and a JAVA_HOME so
#: that the units render without the preflight's look at /usr/bin/java.
HOST = {
    "ansible_facts": {"python": {"version": {"major": 3, "minor": 11}}},
    "spark_java_home": "/usr/lib/jvm/java-17-openjdk-amd64",
    "groups": {"spark_master": ["host1"], "spark_worker": ["host1"]},
    "hostvars": {"host1": {}},
}


def spark_defaults(**variables: Any) -> dict[str, str]:
    """spark-defaults.conf as Spark reads it: a property name, blanks, its value."""
    text = render_role_template("spark", "spark-defaults.conf.j2", **HOST, **variables)
    pairs = (line.split(None, 1) for line in text.splitlines() if line.strip() and not line.startswith("#"))
    return {name: value.strip() for name, value in pairs}


def security(properties: dict[str, str]) -> dict[str, str]:
    """The properties of authentication and of the links' encryption."""
    return {key: value for key, value in properties.items() if key.startswith(("spark.authenticate", "spark.network"))}


def test_with_a_secret_every_link_is_authenticated_and_encrypted() -> None:
    properties = spark_defaults(spark_authenticate_secret=SECRET)
    assert security(properties) == AUTHENTICATION | ENCRYPTION
    assert properties["spark.ui.killEnabled"] == "false"


def test_with_a_secret_and_without_encryption_the_links_are_only_authenticated() -> None:
    properties = spark_defaults(spark_authenticate_secret=SECRET, spark_network_crypto_enabled=False)
    assert security(properties) == AUTHENTICATION


@pytest.mark.parametrize("crypto", [True, False])
def test_without_a_secret_nothing_of_it_is_written_but_the_kill_links_stay_off(crypto: bool) -> None:
    """Encryption applies only with a secret (it has no key without one): its default, true, writes nothing."""
    properties = spark_defaults(spark_network_crypto_enabled=crypto)
    assert security(properties) == {}
    assert properties["spark.ui.killEnabled"] == "false"
    assert set(properties) == {"spark.master", "spark.pyspark.python", "spark.ui.killEnabled"}


def test_the_kill_links_can_be_turned_on() -> None:
    assert spark_defaults(spark_ui_kill_enabled=True)["spark.ui.killEnabled"] == "true"


def test_spark_defaults_override_what_the_role_sets() -> None:
    """Java properties keep the last value of a name: spark_defaults follow the role's own lines."""
    text = render_role_template(
        "spark", "spark-defaults.conf.j2", **HOST, spark_defaults={"spark.ui.killEnabled": "true"}
    )
    assert [line.split()[1] for line in text.splitlines() if line.startswith("spark.ui.killEnabled")][-1] == "true"


# ------------------------------------------------------------------- where the secret is ----
#: Every other file the role renders that a process list, `systemctl cat` or a reader of /etc may see.
OTHER_TEMPLATES = [
    ("spark.service.j2", {"spark_node_type": "master"}),
    ("spark.service.j2", {"spark_node_type": "worker"}),
    ("spark-env.sh.j2", {}),
    ("ams-spark-job.j2", {}),
    ("ams-spark-job@.service.j2", {}),
    ("ams-jobs.env.j2", {}),
]


@pytest.mark.parametrize(("template", "variables"), OTHER_TEMPLATES, ids=[f"{t}-{v}" for t, v in OTHER_TEMPLATES])
def test_the_secret_is_in_no_other_file(template: str, variables: dict[str, Any]) -> None:
    rendered = render_role_template("spark", template, **HOST, spark_authenticate_secret=SECRET, **variables)
    assert SECRET not in rendered
    assert "spark.authenticate" not in rendered


def _task(tasks_file: str, name: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROOT / "roles" / "spark" / "tasks" / tasks_file).read_text())
    found: list[dict[str, Any]] = [task for task in tasks if task.get("name") == name]
    assert len(found) == 1, [task.get("name") for task in tasks]
    return found[0]


def _systemd(unit: str, key: str) -> str:
    values = [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(f"{key}=")]
    assert len(values) == 1, unit
    return values[0]


def test_spark_defaults_conf_is_readable_by_the_spark_group_alone() -> None:
    task = _task("configure.yml", "Render spark-defaults.conf")
    template = task["ansible.builtin.template"]
    assert (template["owner"], template["group"], template["mode"]) == ("root", "{{ spark_user }}", "0640")
    # a diff of the file would show the secret
    assert task["no_log"] == "{{ spark_authenticate_secret | length > 0 }}"


@pytest.mark.parametrize(
    ("template", "variables"),
    [
        ("spark.service.j2", {"spark_node_type": "master"}),
        ("spark.service.j2", {"spark_node_type": "worker"}),
        ("ams-spark-job@.service.j2", {}),
    ],
    ids=["master", "worker", "ams-spark-job"],
)
def test_the_daemons_and_the_jobs_run_in_the_group_that_reads_it(template: str, variables: dict[str, Any]) -> None:
    """The file's group is spark_user's group: the units that read it run as that user and group."""
    unit = render_role_template("spark", template, **HOST, spark_user="sparky", **variables)
    assert (_systemd(unit, "User"), _systemd(unit, "Group")) == ("sparky", "sparky")


def test_ams_spark_job_submits_as_the_spark_user() -> None:
    """Run by hand as root, ams-spark-job switches to spark_user before spark-submit reads the file."""
    script = render_role_template("spark", "ams-spark-job.j2", **HOST, spark_user="sparky")
    assert "user=sparky\n" in script
    assert 'exec runuser -u "$user" -- "$0" "$@"' in script


# ------------------------------------------------------------------------- the preflight ----
@pytest.mark.parametrize(
    ("secret", "accepted"),
    [
        ("", True),
        (SECRET, True),
        ("c2VjcmV0LW9mLTMyLWJ5dGVzLWluLWJhc2U2NC4uLg==", True),  # openssl rand -base64 32
        ("0123456789abcde", False),  # 15 characters
        ("0123456789abcdef 0123456789abcdef", False),  # a space: the properties file would cut it
        ("0123456789abcdef\\0123456789abcdef", False),  # a backslash: the properties file would unescape it
    ],
)
def test_the_preflight_checks_the_secrets_form(tmp_path: Path, secret: str, accepted: bool) -> None:
    task = _task("preflight.yml", "Assert that the cluster's shared secret is usable")
    (expression,) = task["ansible.builtin.assert"]["that"]
    check = tmp_path / "check.j2"
    check.write_text(f"{{% if {expression} %}}accepted{{% else %}}refused{{% endif %}}")
    assert render_role_template("spark", str(check), spark_authenticate_secret=secret) == (
        "accepted" if accepted else "refused"
    )
