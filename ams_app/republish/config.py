"""The republisher's configuration: YAML in, a checked :class:`Config` out (docs/republisher.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ams_app.republish.routing import PLACEHOLDER, Rules, valid_topic


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or wrong; the message says where."""


@dataclass(frozen=True)
class Config:
    url: str
    token: str
    verify: bool | str
    timeout: float
    project: str
    subscription: str
    rules: Rules
    target_project: str
    unroutable_topic: str
    create_topics: bool
    source_attribute: str
    max_messages: int
    #: ``host:port`` of the republisher's Prometheus page; None: no page (docs/monitoring.md).
    metrics_address: tuple[str, int] | None = None


_KEYS = {
    "ams": {"url", "token", "token_file", "verify", "timeout_seconds"},
    "source": {"project", "subscription"},
    "route": {"attribute", "json_field"},
    "target": {"project", "topic", "unroutable_topic", "create_topics", "source_attribute"},
    "batch": {"max_messages"},
    "metrics": {"host", "port"},
}
_REQUIRED_SECTIONS = ("ams", "source", "route", "target")


def load_config(path: str) -> Config:
    """Read and check the YAML file at ``path``."""
    try:
        with open(path, encoding="utf-8") as stream:
            raw = yaml.safe_load(stream)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with the sections {', '.join(_KEYS)}")
    return parse_config(raw)


def parse_config(raw: Mapping[str, Any]) -> Config:
    """A checked :class:`Config` from the parsed YAML document."""
    unknown = sorted(set(map(str, raw)) - set(_KEYS))
    if unknown:
        raise ConfigError(f"unknown section(s): {', '.join(unknown)}")
    sections = {name: _section(raw, name) for name in _KEYS}
    ams, source, target = sections["ams"], sections["source"], sections["target"]
    project = _name(source, "source", "project")
    return Config(
        url=_url(ams),
        token=_token(ams),
        verify=_verify(ams),
        timeout=_positive(ams, "ams", "timeout_seconds", 30.0),
        project=project,
        subscription=_name(source, "source", "subscription"),
        rules=_rules(sections["route"], target),
        target_project=_name(target, "target", "project", project),
        unroutable_topic=_name(target, "target", "unroutable_topic"),
        create_topics=_bool(target, "target", "create_topics", False),
        source_attribute=_str(target, "target", "source_attribute", "republish_source"),
        max_messages=int(_positive(sections["batch"], "batch", "max_messages", 100, integer=True)),
        metrics_address=_metrics(sections["metrics"]),
    )


def _metrics(section: Mapping[str, Any]) -> tuple[str, int] | None:
    if "port" not in section:
        if section:
            raise ConfigError("metrics.port is required with metrics.host")
        return None
    port = section["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ConfigError("metrics.port must be a TCP port (1-65535)")
    return _str(section, "metrics", "host", "127.0.0.1"), port


def _section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    section = raw.get(name)
    if section is None:
        if name in _REQUIRED_SECTIONS:
            raise ConfigError(f"the section {name!r} is missing")
        return {}
    if not isinstance(section, dict):
        raise ConfigError(f"{name}: expected a mapping")
    unknown = sorted(set(map(str, section)) - _KEYS[name])
    if unknown:
        raise ConfigError(f"{name}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_KEYS[name]))})")
    return section


def _str(section: Mapping[str, Any], where: str, key: str, default: str | None = None) -> str:
    value = section.get(key, default)
    if value is None:
        raise ConfigError(f"{where}.{key} is required")
    if not isinstance(value, str):
        raise ConfigError(f"{where}.{key} must be a string")
    return value


def _name(section: Mapping[str, Any], where: str, key: str, default: str | None = None) -> str:
    value = _str(section, where, key, default)
    if not valid_topic(value):
        raise ConfigError(f"{where}.{key}: {value!r} is not a valid name (letters, digits, '_' and '-')")
    return value


def _bool(section: Mapping[str, Any], where: str, key: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key} must be true or false")
    return value


def _positive(section: Mapping[str, Any], where: str, key: str, default: float, *, integer: bool = False) -> float:
    value = section.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        raise ConfigError(f"{where}.{key} must be a positive {'integer' if integer else 'number'}")
    return float(value)


def _url(ams: Mapping[str, Any]) -> str:
    url = _str(ams, "ams", "url").rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise ConfigError(f"ams.url: {url!r} must start with https:// (or http://)")
    if url.endswith("/v1"):
        raise ConfigError(f"ams.url: give the base URL without /v1 (e.g. {url[:-3]!r})")
    return url


def _token(ams: Mapping[str, Any]) -> str:
    if ("token" in ams) == ("token_file" in ams):
        raise ConfigError("ams: set exactly one of token and token_file")
    if "token" in ams:
        token = _str(ams, "ams", "token").strip()
    else:
        path = _str(ams, "ams", "token_file")
        try:
            with open(path, encoding="utf-8") as stream:
                token = stream.read().strip()
        except OSError as exc:
            raise ConfigError(f"ams.token_file: cannot read {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ConfigError("ams: the token is empty")
    return token


def _verify(ams: Mapping[str, Any]) -> bool | str:
    value = ams.get("verify", True)
    if isinstance(value, bool):
        return value
    if not isinstance(value, str) or not value:
        raise ConfigError("ams.verify must be true, false or the path of a CA bundle")
    if not os.path.exists(value):
        raise ConfigError(f"ams.verify: no CA bundle at {value}")
    return value


def _rules(route_section: Mapping[str, Any], target: Mapping[str, Any]) -> Rules:
    if ("attribute" in route_section) == ("json_field" in route_section):
        raise ConfigError("route: set exactly one of attribute and json_field")
    template = _str(target, "target", "topic", PLACEHOLDER)
    if (
        PLACEHOLDER not in template
        or "{" in template.replace(PLACEHOLDER, "")
        or "}" in template.replace(PLACEHOLDER, "")
    ):
        raise ConfigError(f"target.topic: {template!r} must hold {PLACEHOLDER} and no other braces")
    if not valid_topic(template.replace(PLACEHOLDER, "x")):
        raise ConfigError(
            f"target.topic: {template!r} cannot make a valid topic name (letters, digits, '_' and '-', "
            "as the API's names)"
        )
    if "attribute" in route_section:
        attribute = _str(route_section, "route", "attribute")
        if not attribute:
            raise ConfigError("route.attribute must not be empty")
        return Rules(attribute=attribute, template=template)
    path = tuple(_str(route_section, "route", "json_field").split("."))
    if not all(path):
        raise ConfigError("route.json_field must be a dotted path like meta.site")
    return Rules(json_field=path, template=template)
