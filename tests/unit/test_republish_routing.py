"""The republisher's routing decision (a pure function of one message) and its configuration."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from ams_app.republish.config import ConfigError, load_config, parse_config
from ams_app.republish.routing import Message, Routed, Rules, Unroutable, route

BY_SITE = Rules(attribute="site", template="site-{value}")
BY_FIELD = Rules(json_field=("meta", "site"), template="site_{value}")


def msg(data: bytes = b"x", **attributes: str) -> Message:
    return Message("projects/P/subscriptions/S:0", "0", base64.b64encode(data).decode(), attributes)


def doc(value: Any) -> bytes:
    return json.dumps(value).encode()


# ------------------------------------------------------------------------------ attribute ----
def test_an_attribute_picks_the_topic() -> None:
    assert route(msg(site="GRNET"), BY_SITE) == Routed("site-GRNET")
    assert route(msg(site="a_b-C9"), Rules(attribute="site")) == Routed("a_b-C9")  # default template


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({}, "no attribute 'site'"),
        ({"other": "GRNET"}, "no attribute 'site'"),
        ({"site": ""}, "attribute 'site' is empty"),
    ],
)
def test_no_attribute_value_is_unroutable(attributes: dict[str, str], reason: str) -> None:
    assert route(msg(**attributes), BY_SITE) == Unroutable(reason)


@pytest.mark.parametrize("value", ["bad/site", "a.b", "sp ace", "ünï", "{value}", "x" * 250, "a:b", "x\n"])
def test_a_value_making_an_invalid_topic_name_is_unroutable(value: str) -> None:
    decision = route(msg(site=value), BY_SITE)
    assert isinstance(decision, Unroutable)
    assert "invalid topic name" in decision.reason
    assert repr(value) in decision.reason


def test_the_source_topic_is_never_a_target() -> None:
    rules = Rules(attribute="site", template="{value}", loop_topic="all")
    decision = route(msg(site="all"), rules)
    assert isinstance(decision, Unroutable)
    assert "routes back to the source topic" in decision.reason
    assert route(msg(site="GRNET"), rules) == Routed("GRNET")


# ------------------------------------------------------------------------------ JSON field ----
@pytest.mark.parametrize(
    ("payload", "topic"),
    [
        (doc({"meta": {"site": "GRNET"}}), "site_GRNET"),
        (doc({"meta": {"site": "A", "other": 1}, "x": [1]}), "site_A"),
        (doc({"meta": {"site": 42}}), "site_42"),  # an integer value is its decimal text
    ],
)
def test_a_json_field_picks_the_topic(payload: bytes, topic: str) -> None:
    assert route(msg(payload), BY_FIELD) == Routed(topic)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "the data is not JSON"),
        (b"\xff\xfe\x00garbage", "the data is not JSON"),
        (b"", "the data is not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "the data is not JSON"),  # too deep to parse
        (doc(["meta"]), "the data is not a JSON object"),
        (doc("GRNET"), "the data is not a JSON object"),
        (doc({"site": "GRNET"}), "no field 'meta.site' in the data"),
        (doc({"meta": "GRNET"}), "no field 'meta.site' in the data"),
        (doc({"meta": {"site": None}}), "field 'meta.site' is not a string or an integer"),
        (doc({"meta": {"site": True}}), "field 'meta.site' is not a string or an integer"),
        (doc({"meta": {"site": 1.5}}), "field 'meta.site' is not a string or an integer"),
        (doc({"meta": {"site": {"name": "A"}}}), "field 'meta.site' is not a string or an integer"),
        (doc({"meta": {"site": ""}}), "field 'meta.site' is empty"),
    ],
)
def test_no_json_value_is_unroutable(payload: bytes, reason: str) -> None:
    assert route(msg(payload), BY_FIELD) == Unroutable(reason)


def test_data_that_is_not_base64_is_unroutable() -> None:
    bad = Message("a", "0", "***", {})
    assert route(bad, BY_FIELD) == Unroutable("the data is not JSON")


def test_a_one_level_field() -> None:
    assert route(msg(doc({"site": "X"})), Rules(json_field=("site",))) == Routed("X")


# ---------------------------------------------------------------------------------- config ----
def minimal() -> dict[str, Any]:
    return {
        "ams": {"url": "https://ams.example.org:8443", "token": "secret"},
        "source": {"project": "ARGO", "subscription": "all-sites"},
        "route": {"attribute": "site"},
        "target": {"unroutable_topic": "unroutable"},
    }


def test_defaults() -> None:
    config = parse_config(minimal())
    assert config.url == "https://ams.example.org:8443"
    assert config.token == "secret"
    assert config.verify is True
    assert config.timeout == 30.0
    assert config.target_project == "ARGO"
    assert config.rules == Rules(attribute="site", template="{value}")
    assert config.create_topics is False
    assert config.source_attribute == "republish_source"
    assert config.max_messages == 100


def test_every_key(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    (tmp_path / "ca.pem").write_text("")
    raw = {
        "ams": {
            "url": "http://h/",
            "token_file": str(tmp_path / "token"),
            "verify": str(tmp_path / "ca.pem"),
            "timeout_seconds": 5,
        },
        "source": {"project": "ARGO", "subscription": "all-sites"},
        "route": {"json_field": "meta.site"},
        "target": {
            "project": "OTHER",
            "topic": "site-{value}",
            "unroutable_topic": "unroutable",
            "create_topics": True,
            "source_attribute": "",
        },
        "batch": {"max_messages": 20},
    }
    config = parse_config(raw)
    assert (config.url, config.token, config.verify, config.timeout) == (
        "http://h",
        "from-file",
        raw["ams"]["verify"],
        5,
    )
    assert config.rules == Rules(json_field=("meta", "site"), template="site-{value}")
    assert (config.target_project, config.create_topics, config.source_attribute) == ("OTHER", True, "")
    assert config.max_messages == 20


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"target": {"unroutable_topic": None}}, "target.unroutable_topic is required"),
        ({"route": {"json_field": "meta.site"}}, "exactly one of attribute and json_field"),
        ({"route": {"attribute": None}}, "exactly one of attribute and json_field"),
        ({"route": {"attribute": None, "json_field": "meta..site"}}, "dotted path"),
        ({"ams": {"token_file": "/x"}}, "exactly one of token and token_file"),
        ({"ams": {"token": " "}}, "the token is empty"),
        ({"ams": {"url": "ams.example.org"}}, "must start with https://"),
        ({"ams": {"url": "https://h/v1"}}, "without /v1"),
        ({"ams": {"verify": "/no/such/ca.pem"}}, "no CA bundle"),
        ({"ams": {"verify": 1}}, "ams.verify must be"),
        ({"ams": {"timeout_seconds": 0}}, "ams.timeout_seconds must be a positive number"),
        ({"batch": {"max_messages": 2.5}}, "batch.max_messages must be a positive integer"),
        ({"batch": {"max_messages": True}}, "batch.max_messages must be a positive integer"),
        ({"target": {"create_topics": "yes"}}, "target.create_topics must be true or false"),
        ({"target": {"topic": "site-{site}"}}, "must hold {value} and no other braces"),
        ({"target": {"topic": "site"}}, "must hold {value}"),
        ({"target": {"topic": "site.{value}"}}, "cannot make a valid topic name"),
        ({"target": {"project": "AR GO"}}, "target.project: 'AR GO' is not a valid name"),
        ({"source": {"subscription": None}}, "source.subscription is required"),
        ({"source": {"subscripton": "x"}}, "source: unknown key(s) subscripton"),
        ({"sources": {"x": 1}}, "unknown section(s): sources"),
        ({"route": None}, "the section 'route' is missing"),
    ],
)
def test_bad_configs_say_what_is_wrong(change: dict[str, Any], message: str) -> None:
    raw = minimal()
    for name, values in change.items():
        if values is None:
            del raw[name]
            continue
        section = raw.setdefault(name, {})
        for key, value in values.items():
            if value is None:
                section.pop(key, None)
            else:
                section[key] = value
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert message in str(caught.value)


def test_load_config_reports_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yml"))
    (tmp_path / "bad.yml").write_text("ams: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(str(tmp_path / "bad.yml"))
    (tmp_path / "list.yml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(str(tmp_path / "list.yml"))
