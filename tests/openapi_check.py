"""Validate HTTP responses of the server against its OpenAPI document (ams_app/openapi.yaml), and
those of AuthN's listeners against ams_app/authn/openapi.yaml.

How a response is checked:

* Only responses from 127.0.0.1 and 127.0.0.2 whose URL path starts with ``/v1/`` are checked;
  the ``/v1`` prefix is the document's server URL and is stripped. A port registered in
  ``ResponseChecker.others`` (an AuthN listener) is checked against that checker's document.
* The path (percent-decoded, as Flask routes it) is matched against the document's path
  templates: ``{var}`` matches ``[^/:]+`` and everything else, ``:verbs`` included, is
  literal. When several templates match, the one with the most literal characters wins
  (``/users/profile`` before ``/users/{user}``), among those that have the request's
  method: like werkzeug, a template without the method does not stop the search.
* An unknown path, or a known path with a method it does not have, must answer the
  Error envelope (404 / 405).
* ``OPTIONS`` on a known path is the CORS pre-flight Flask answers itself: 200 with an
  empty body. ``HEAD`` has no body to check.
* Otherwise the response object is ``responses[status]``: every status an operation answers
  is declared (the document has no ``default`` responses). A
  response object without ``content`` allows only an empty body; one with content needs a
  non-empty body whose Content-Type is one of its
  media types, and JSON media types are validated with jsonschema Draft 2020-12, ``$ref``
  resolved inside the whole document.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

DOC_URI = "urn:ams:openapi"
PREFIX = "/v1"
HOSTS = {"127.0.0.1", "127.0.0.2"}  # 127.0.0.2: AMS on port 443 for argo-ams-library (tests/api/test_authn.py)
ERROR_POINTER = "/components/schemas/Error"
METHODS = ("get", "put", "post", "delete", "patch")


def load_document(package: str = "ams_app") -> dict[str, Any]:
    """The OpenAPI document of ``package``: ams_app's (the AMS API) or ams_app.authn's (AuthN)."""
    text = resources.files(package).joinpath("openapi.yaml").read_text(encoding="utf-8")
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Template:
    path: str
    regex: re.Pattern[str]
    literal: int  # characters outside {vars}: the more, the more specific


def _template(path: str) -> Template:
    parts = re.split(r"(\{[^}]+\})", path)
    regex = "".join("[^/:]+" if p.startswith("{") else re.escape(p) for p in parts)
    literal = sum(len(p) for p in parts if not p.startswith("{"))
    return Template(path, re.compile(f"^{regex}$"), literal)


@dataclass
class Failure:
    method: str
    url: str
    status: int
    problem: str
    body: str

    def __str__(self) -> str:
        return f"{self.method} {self.url} -> {self.status}: {self.problem}\n    body: {self.body}"


class ResponseChecker:
    """Checks responses against one OpenAPI document and records the failures."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        resource: Resource[Any] = Resource.from_contents(document, default_specification=DRAFT202012)
        self.registry: Registry[Any] = Registry().with_resource(DOC_URI, resource)
        self.templates = sorted(
            (_template(p) for p in document.get("paths", {})), key=lambda t: t.literal, reverse=True
        )
        self.failures: list[Failure] = []
        #: Ports whose responses another document describes (AuthN's listener), with its checker.
        self.others: dict[int, ResponseChecker] = {}
        self._lock = threading.Lock()
        self._validators: dict[str, Draft202012Validator] = {}

    # ------------------------------------------------------------------ lookups ----
    def validator(self, pointer: str) -> Draft202012Validator:
        """A validator for the schema at ``pointer`` (a JSON pointer into the document)."""
        with self._lock:
            if pointer not in self._validators:
                ref = {"$ref": f"{DOC_URI}#{pointer}"}
                self._validators[pointer] = Draft202012Validator(ref, registry=self.registry)
            return self._validators[pointer]

    def operation(self, method: str, path: str) -> tuple[str, str] | None:
        """(template, method) of the operation serving ``method path``, if any."""
        for template in self.templates:
            if template.regex.match(path) and method in self.document["paths"][template.path]:
                return template.path, method
        return None

    def known_path(self, path: str) -> bool:
        return any(t.regex.match(path) for t in self.templates)

    def _resolve(self, obj: dict[str, Any], pointer: str) -> tuple[dict[str, Any], str]:
        """Follow a response object's local ``$ref``s; returns (object, its pointer)."""
        while "$ref" in obj:
            ref = str(obj["$ref"])
            assert ref.startswith("#/"), ref
            pointer = ref[1:]
            obj = self.document
            for token in pointer.split("/")[1:]:
                obj = obj[token.replace("~1", "/").replace("~0", "~")]
        return obj, pointer

    # ------------------------------------------------------------------- checks ----
    def problem(self, method: str, url: str, status: int, content_type: str, body: bytes) -> str | None:
        """What is wrong with this response, or None if it conforms to the document."""
        path = unquote(urlsplit(url).path).removeprefix(PREFIX)
        method = method.lower()
        if method == "head":
            return None
        if method == "options" and self.known_path(path):
            if status == 200 and not body:
                return None
            return "CORS pre-flight on a known path must answer 200 with an empty body"
        found = self.operation(method, path)
        if found is None:
            return self._json(ERROR_POINTER, content_type, body, "unknown path or method: the Error envelope")
        template, verb = found
        pointer = f"/paths/{_escape(template)}/{verb}/responses"
        responses: dict[str, Any] = self.document["paths"][template][verb]["responses"]
        key = str(status)
        if key not in responses:
            return f"status {status} is not documented for {verb.upper()} {template}"
        response, pointer = self._resolve(responses[key], f"{pointer}/{_escape(key)}")
        where = f"{verb.upper()} {template} [{key}]"
        content: dict[str, Any] = response.get("content") or {}
        if not content:
            return None if not body else f"{where}: the document allows no body, got {len(body)} bytes"
        if not body:
            return f"{where}: the document requires a body ({', '.join(content)}), got none"
        media = content_type.split(";")[0].strip().lower()
        if media not in content:
            return f"{where}: Content-Type {content_type!r} is not one of {sorted(content)}"
        if "schema" not in content[media] or not media.endswith("json"):
            return None
        return self._json(f"{pointer}/content/{_escape(media)}/schema", content_type, body, where)

    def _json(self, pointer: str, content_type: str, body: bytes, where: str) -> str | None:
        if not content_type.lower().startswith("application/json"):
            return f"{where}: Content-Type {content_type!r} is not application/json"
        try:
            data = json.loads(body)
        except ValueError as exc:
            return f"{where}: body is not JSON ({exc})"
        error = best_match(self.validator(pointer).iter_errors(data))
        if error is None:
            return None
        at = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return f"{where}: schema violation at {at}: {error.message}"

    def check(self, method: str, url: str, status: int, content_type: str, body: bytes) -> None:
        """Check one response; record it as a failure when it does not conform."""
        split = urlsplit(url)
        if split.hostname not in HOSTS or not split.path.startswith(PREFIX + "/"):
            return
        other = self.others.get(split.port or 443)
        problem = (other or self).problem(method, url, status, content_type, body)
        if problem is not None:
            shown = body[:2000].decode("utf-8", "replace")
            with self._lock:
                self.failures.append(Failure(method, url, status, problem, shown))

    def take(self) -> list[Failure]:
        """The failures recorded so far, forgetting them."""
        with self._lock:
            failures, self.failures = self.failures, []
        return failures
