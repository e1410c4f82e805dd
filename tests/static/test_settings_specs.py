"""The ams role's variables that are AMS settings take the legal values the settings declare.

``ams_app/settings.py`` declares each setting's legal values on its field (``constraint(name)``).
The ams role passes some of its variables straight into the settings file: the entries of
``_ams_settings`` in ``roles/ams/vars/main.yml`` whose value is one ``ams_*`` variable, at most
through ``| int``, ``| float`` or ``| bool``. For each of those:

- the argument spec has ``choices`` exactly when the setting has, and the same ones;
- the argument spec's ``default`` is a legal value of the setting, checked by ``load_settings``
  itself (argument specs have no bounds, so a range can be held to the default only; the rendered
  file is checked with ``ams check-config`` on the host, ``roles/ams/tasks/configure.yml``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jinja2
import pytest
import yaml

from ams_app.settings import Settings, SettingsError, constraint, load_settings
from tests.helpers import ROOT

ROLE = ROOT / "roles" / "ams"
VARS_TEXT = (ROLE / "vars" / "main.yml").read_text()
OPTIONS: dict[str, dict[str, Any]] = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())[
    "argument_specs"
]["main"]["options"]
SETTING_NAMES = {f.name for f in dataclasses.fields(Settings)}

# The dict literal of _ams_settings, one "'setting': expression," per line.
_BLOCK = VARS_TEXT[VARS_TEXT.index("_ams_settings:") : VARS_TEXT.index("| combine(ams_settings_extra)")]
ENTRIES = dict(re.findall(r"^\s+'(\w+)': (.+),$", _BLOCK, re.MULTILINE))
#: setting name -> the role variable that is its value, unchanged but for its type.
DIRECT = {
    setting: match.group(1)
    for setting, expression in ENTRIES.items()
    if (match := re.fullmatch(r"(ams_\w+)(?: \| (?:int|float|bool))?", expression.strip()))
}
PAIRS = sorted(DIRECT.items())


def _settings_with(values: dict[str, Any]) -> Settings:
    return load_settings(environ={}, overrides=values)


def test_the_settings_mapping_is_read() -> None:
    """Every line of the mapping was parsed, and names real settings and real variables."""
    lines = [line for line in _BLOCK.splitlines() if line.strip().startswith("'")]
    assert len(ENTRIES) == len(lines), "an entry of _ams_settings was not parsed"
    assert set(ENTRIES) <= SETTING_NAMES, sorted(set(ENTRIES) - SETTING_NAMES)
    assert set(DIRECT.values()) <= set(OPTIONS), sorted(set(DIRECT.values()) - set(OPTIONS))
    # the ones this test exists for: the settings with choices that the role exposes
    assert {"backend", "prometheus_access", "push_worker", "log_level", "port"} <= set(DIRECT)


@pytest.mark.parametrize(("setting", "variable"), PAIRS, ids=[f"{v}->{s}" for s, v in PAIRS])
def test_spec_choices_are_the_setting_choices(setting: str, variable: str) -> None:
    rule = constraint(setting)
    declared = list(rule.choices) if rule else []
    spec = list(OPTIONS[variable].get("choices") or [])
    assert sorted(spec) == sorted(declared), (
        f"{variable} choices {spec} in roles/ams/meta/argument_specs.yml, "
        f"setting {setting} choices {declared} in ams_app/settings.py"
    )


#: Hosts a templated default is rendered for: its backend (a role variable) and its facts.
HOSTS: list[dict[str, Any]] = [
    {"ams_backend": "embedded", "ansible_facts": {"processor_vcpus": 4}},
    {"ams_backend": "kafka", "ansible_facts": {"processor_vcpus": 4}},
    {"ams_backend": "kafka", "ansible_facts": {}},  # no facts gathered
]


def _templated(default: Any) -> bool:
    return isinstance(default, str) and "{{" in default


@pytest.mark.parametrize(("setting", "variable"), PAIRS, ids=[f"{v}->{s}" for s, v in PAIRS])
def test_spec_default_is_a_legal_setting(setting: str, variable: str) -> None:
    option = OPTIONS[variable]
    if "default" not in option:
        assert option.get("required"), f"{variable} has neither a default nor required: true"
        return
    if _templated(option["default"]):  # computed on the host (ams_workers: its vCPUs): each host's value
        for host in HOSTS:
            rendered = jinja2.Template(option["default"]).render(**host)
            backend = {"backend": host["ams_backend"], "zookeeper_hosts": "zk:2181"}
            try:
                settings = _settings_with({**backend, setting: rendered})
            except SettingsError as exc:
                pytest.fail(f"{variable} default renders {rendered!r} for {host}, not a legal {setting}: {exc}")
            assert str(getattr(settings, setting)) == rendered
        return
    try:
        settings = _settings_with({setting: option["default"]})
    except SettingsError as exc:
        pytest.fail(f"{variable} default {option['default']!r} is not a legal {setting}: {exc}")
    assert getattr(settings, setting) == option["default"]


def test_spec_defaults_together_are_legal_settings() -> None:
    """The role's defaults as one settings file pass validate(), rules between settings included."""
    values = {s: OPTIONS[v]["default"] for s, v in PAIRS if "default" in OPTIONS[v]}
    rendered = {s: jinja2.Template(value).render(**HOSTS[0]) for s, value in values.items() if _templated(value)}
    _settings_with({**values, **rendered})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ams_bind_port", 0),
        ("ams_bind_port", 65536),
        ("ams_grpc_port", -1),
        ("ams_grpc_port", 65536),
        ("ams_kafka_replication_factor", 0),
        ("ams_max_connections", 0),
        ("ams_prometheus_series_limit", -1),
        ("ams_push_worker_metrics_port", 65536),
        ("ams_shutdown_timeout", -1),
        ("ams_log_level", "TRACE"),
        ("ams_workers", -1),
        ("ams_worker_port_base", 65536),
        ("ams_worker_grpc_port_base", -1),
    ],
)
def test_a_bad_variable_value_is_refused_by_the_settings(variable: str, value: Any) -> None:
    """The check the spec cannot make is the setting's: a value out of range fails validation
    (on the host, ``ams check-config``) naming the setting."""
    setting = next(s for s, v in PAIRS if v == variable)
    with pytest.raises(SettingsError, match=rf"^{setting} must be "):
        _settings_with({setting: value})
