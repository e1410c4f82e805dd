"""Settings layers: defaults <- YAML <- AMS_* environment <- command line (ams_app.settings)."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from ams_app.settings import Constraint, Settings, SettingsError, constraint, constraints, load_settings, setting


def test_defaults() -> None:
    s = load_settings(environ={})
    assert (s.port, s.pull_wait_seconds, s.default_ack_deadline) == (8080, 10.0, 10)


def test_layers_in_order(tmp_path: Path) -> None:
    f = tmp_path / "ams.yml"
    f.write_text("port: 9000\nservice_token: from-file\npull_wait_seconds: 3\n")
    s = load_settings(f, environ={"AMS_SERVICE_TOKEN": "from-env", "AMS_PER_RESOURCE_AUTH": "false"})
    assert (s.port, s.service_token, s.pull_wait_seconds, s.per_resource_auth) == (9000, "from-env", 3.0, False)
    s = load_settings(f, environ={}, overrides={"port": 9100, "data_dir": None})
    assert s.port == 9100


def test_config_path_from_environment(tmp_path: Path) -> None:
    f = tmp_path / "ams.yml"
    f.write_text("max_attributes: 7\n")
    assert load_settings(environ={"AMS_CONFIG": str(f)}).max_attributes == 7


@pytest.mark.parametrize(
    ("content", "env"),
    [
        ("port: 0\n", {}),
        ("bogus: 1\n", {}),
        ("- a list\n", {}),
        ("", {"AMS_PORT": "eighty"}),
        ("", {"AMS_PUSH_ENABLED": "maybe"}),
        ("tls_cert: /x.pem\n", {}),
        ("default_ack_deadline: 601\n", {}),
        ("max_message_bytes: 0\n", {}),
    ],
)
def test_bad_settings_are_refused(tmp_path: Path, content: str, env: dict[str, str]) -> None:
    f = tmp_path / "ams.yml"
    f.write_text(content)
    with pytest.raises(SettingsError):
        load_settings(f, environ=env)


# --- legal values: declared once on each field (ams_app/settings.py setting(), constraint()) ---

#: Settings for the accepting cases, so that the rules between settings hold whatever the one
#: setting under test is (backend kafka needs ZooKeeper for push delivery).
VALID_BASE: dict[str, Any] = {"zookeeper_hosts": "127.0.0.1:2181"}
#: What a value needs beside it to be legal (the rules between settings in Settings.validate()).
COMPANIONS: dict[tuple[str, Any], dict[str, Any]] = {
    ("kafka_security_protocol", "SASL_SSL"): {"kafka_sasl_username": "ams", "kafka_sasl_password": "secret"},
    # several workers: backend kafka only (the embedded backend is one process)
    ("workers", 0): {"backend": "kafka"},
    ("workers", 2): {"backend": "kafka"},
    ("workers", 256): {"backend": "kafka"},
}


def _with(name: str, value: Any) -> dict[str, Any]:
    """The overrides that set ``name`` to ``value`` in otherwise valid settings."""
    return {**VALID_BASE, **COMPANIONS.get((name, value), {}), name: value}


KINDS = {f.name: f.type for f in dataclasses.fields(Settings)}


def _edges(name: str, rule: Constraint) -> list[tuple[Any, bool]]:
    """(value, legal) pairs at the edges of a declared constraint: each boundary accepted when
    it is included, and the nearest value outside refused."""
    if rule.choices:
        cases: list[tuple[Any, bool]] = [(choice, True) for choice in rule.choices]
        cases.append(("no-such-" + rule.choices[0], False))
        other_case = rule.choices[0].swapcase()
        cases.append((other_case, rule.ignore_case))
        return cases
    integer = KINDS[name] == "int"

    def below(x: float) -> float:
        return x - 1 if integer else math.nextafter(x, -math.inf)

    def over(x: float) -> float:
        return x + 1 if integer else math.nextafter(x, math.inf)

    cases = []
    if rule.low is not None:
        if rule.low_exclusive:
            cases += [(rule.low, False), (over(rule.low), True)]
        else:
            cases += [(rule.low, True), (below(rule.low), False)]
    if rule.high is not None:
        cases += [(rule.high, True), (over(rule.high), False)]
    if not integer:
        cases.append((math.nan, False))
    return cases


EDGES = [(name, value, legal) for name, rule in constraints().items() for value, legal in _edges(name, rule)]


@pytest.mark.parametrize(("name", "value", "legal"), EDGES, ids=[f"{n}={v!r}" for n, v, _ in EDGES])
def test_every_declared_constraint_is_enforced_at_its_edges(name: str, value: Any, legal: bool) -> None:
    if legal:
        assert getattr(load_settings(environ={}, overrides=_with(name, value)), name) == value
    else:
        with pytest.raises(SettingsError, match=rf"^{name} must be ") as refused:
            load_settings(environ={}, overrides=_with(name, value))
        assert constraints()[name].describe() in str(refused.value)


#: The same bounds written out by hand, so that a wrong declaration fails here.
LITERAL = [
    ("kafka_security_protocol", "SASL_SSL", "SASL_PLAINTEXT"),
    ("kafka_sasl_mechanism", "SCRAM-SHA-256", "PLAIN"),
    ("port", 1, 0),
    ("port", 65535, 65536),
    ("authn_port", 1, 0),
    ("authn_port", 65535, 65536),
    ("push_worker_metrics_port", 0, -1),
    ("push_worker_metrics_port", 65535, 65536),
    ("grpc_port", 0, -1),
    ("grpc_port", 65535, 65536),
    ("workers", 0, -1),
    ("workers", 256, 257),
    ("worker_port_base", 0, -1),
    ("worker_port_base", 65535, 65536),
    ("worker_grpc_port_base", 0, -1),
    ("worker_grpc_port_base", 65535, 65536),
    ("default_ack_deadline", 1, 0),
    ("default_ack_deadline", 600, 601),
    ("kafka_replication_factor", 1, 0),
    ("max_connections", 1, 0),
    ("max_pull_messages", 1, 0),
    ("max_pull_bytes", 1, 0),
    ("max_message_bytes", 1, 0),
    ("max_publish_messages", 1, 0),
    ("max_request_bytes", 1, 0),
    ("max_attributes", 1, 0),
    ("push_max_in_flight", 1, 0),
    ("authn_max_connections", 1, 0),
    ("prometheus_series_limit", 0, -1),
    ("prometheus_figures_wait", 0, -0.5),
    ("log_retention_seconds", 0, -1),
    ("shutdown_timeout", 0, -0.5),
    ("shutdown_idle_seconds", 0, -0.5),
    ("pull_wait_seconds", 0, -0.5),
    ("push_max_rate", 0, -0.5),
    ("client_timeout", 0.01, 0),
    ("request_head_timeout", 0.01, 0),
    ("request_body_timeout", 0.01, 0),
    ("metrics_flush_seconds", 0.01, 0),
    ("kafka_timeout_seconds", 0.01, 0),
    ("consume_session_seconds", 0.01, 0),
    ("push_session_seconds", 0.01, 0),
    ("push_scan_seconds", 0.01, 0),
    ("push_timeout_seconds", 0.01, 0),
    ("backend", "kafka", "Kafka"),
    ("backend", "embedded", "sqlite"),
    ("prometheus_access", "off", "none"),
    ("prometheus_access", "open", ""),
    ("push_worker", "external", "elsewhere"),
    ("log_level", "debug", "verbose"),
    ("log_level", "Warn", "TRACE"),
    ("log_level", "fatal", "10"),
]


@pytest.mark.parametrize(("name", "good", "bad"), LITERAL)
def test_literal_bounds(name: str, good: Any, bad: Any) -> None:
    load_settings(environ={}, overrides=_with(name, good))
    with pytest.raises(SettingsError, match=rf"^{name} must be "):
        load_settings(environ={}, overrides=_with(name, bad))


def test_every_constrained_setting_has_a_literal_case() -> None:
    assert {name for name, _, _ in LITERAL} == set(constraints())


def test_every_number_declares_its_range() -> None:
    """A numeric setting without bounds would take any value, negative or NaN: declare them."""
    numbers = {name for name, kind in KINDS.items() if kind in ("int", "float")}
    assert numbers - set(constraints()) == set()


def test_the_message_names_the_setting_its_legal_values_and_the_value() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(environ={}, overrides={"port": 0})
    assert str(refused.value) == "port must be between 1 and 65535, not 0"
    with pytest.raises(SettingsError) as refused:
        Settings(push_worker="elsewhere").validate()
    assert str(refused.value) == "push_worker must be in-process or external, not 'elsewhere'"
    with pytest.raises(SettingsError) as refused:
        Settings(metrics_flush_seconds=0.0).validate()
    assert str(refused.value) == "metrics_flush_seconds must be more than 0, not 0.0"


def test_describe() -> None:
    described = {name: (rule.describe(), rule.describe(markdown=True)) for name, rule in constraints().items()}
    assert described["backend"] == ("embedded or kafka", "`embedded` or `kafka`")
    assert described["prometheus_access"] == ("token, open or off", "`token`, `open` or `off`")
    assert described["default_ack_deadline"] == ("between 1 and 600", "between 1 and 600")
    assert described["max_attributes"][0] == "at least 1"
    assert described["push_scan_seconds"][0] == "more than 0"
    assert described["log_level"][0].endswith("CRITICAL or FATAL (any case)")
    assert constraint("host") is None
    assert Constraint(high=10).describe() == "at most 10"
    assert Constraint(low=0, low_exclusive=True, high=1.5).describe() == "more than 0 and at most 1.5"


def test_log_level_takes_what_logging_takes() -> None:
    """ams_app/logs.py hands the upper-cased value to logging.basicConfig: every name it knows."""
    rule = constraint("log_level")
    assert rule is not None
    assert rule.ignore_case
    assert set(rule.choices) == set(logging.getLevelNamesMapping())


@pytest.mark.parametrize(
    "declaration",
    [
        {},
        {"choices": ("a",), "low": 0},
        {"low": 1, "high": 1},
        {"low_exclusive": True, "high": 1},
        {"ignore_case": True, "low": 0},
    ],
)
def test_a_constraint_must_make_sense(declaration: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        Constraint(**declaration)


def test_setting_takes_one_lower_bound() -> None:
    with pytest.raises(TypeError):
        setting(1, at_least=0, above=0)


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"tls_cert": "/c.pem"}, "tls_cert and tls_key must be given together"),
        ({"backend": "kafka"}, "backend kafka needs kafka_bootstrap_servers or zookeeper_hosts"),
        ({"backend": "kafka", "kafka_bootstrap_servers": "k:9092"}, "push delivery on backend kafka needs"),
        (  # consume_owner is on by default
            {"backend": "kafka", "kafka_bootstrap_servers": "k:9092", "push_enabled": False},
            r"consume_owner on backend kafka needs zookeeper_hosts \(or consume_owner: false\)",
        ),
        ({"authn_tls_key": "/k.pem"}, "authn_tls_cert and authn_tls_key must be given together"),
        ({"authn_check_crls": True}, "authn_check_crls needs authn_ca_dir"),
        ({"grpc_port": 8080}, "grpc_port must differ from port"),
        ({"workers": 2}, "workers must be 1 on backend embedded, not 2"),
        (
            {"workers": 2, "backend": "kafka", "zookeeper_hosts": "zk:2181", "worker_port_base": 8079},
            "the workers' own ports 8079-8080 .* include port 8080",
        ),
        ({"grpc_emulator_user": "dev", "host": "0.0.0.0"}, "grpc_emulator_user lets calls without credentials in"),
        ({"grpc_emulator_user": "dev", "host": "10.0.0.5"}, "host must be a loopback address"),
    ],
)
def test_rules_between_settings(values: dict[str, Any], reason: str) -> None:
    with pytest.raises(SettingsError, match=reason):
        load_settings(environ={}, overrides=values)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_emulator_mode_is_allowed_on_loopback(host: str) -> None:
    assert load_settings(environ={}, overrides={"grpc_emulator_user": "dev", "host": host}).grpc_emulator_user == "dev"


def test_consume_owner_is_the_default_on_backend_kafka() -> None:
    """On by default; it applies to backend kafka only (the embedded backend ignores it), and is
    turned off explicitly to run backend kafka without ZooKeeper."""
    assert Settings().consume_owner is True
    assert load_settings(environ={}).consume_owner is True  # backend embedded: valid, and ignored
    with_zookeeper = load_settings(environ={}, overrides={"backend": "kafka", "zookeeper_hosts": "zk:2181"})
    assert with_zookeeper.consume_owner is True
    without = {"backend": "kafka", "kafka_bootstrap_servers": "k:9092", "push_enabled": False}
    assert load_settings(environ={"AMS_CONSUME_OWNER": "false"}, overrides=without).consume_owner is False
