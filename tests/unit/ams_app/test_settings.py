"""Settings layers: defaults <- YAML <- AMS_* environment <- command line (ams_app.settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ams_app.settings import SettingsError, load_settings


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
