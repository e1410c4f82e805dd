"""The web console's files as ``ams serve`` serves them over a socket (ams_app/console.py,
docs/console.md): the page at any path of the application, the hashed assets with their types and
a year's cache, nothing else under /console, and the security headers on every answer there.

They need the built console (``make console``): without it they are skipped, and under CI=true
they fail."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest
from flask import Flask

from ams_app import console
from ams_app.errors_http import register_error_handlers
from tests.conftest import IN_CI
from tests.helpers import ROOT, AmsServer, Api

DIST = ROOT / "ams_app" / "console_dist"
#: Spelled out here, not read from ams_app/console.py: a change there must be made here too.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
        "connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
IMMUTABLE = "public, max-age=31536000, immutable"
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".woff2": "font/woff2"}


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = response.headers
        self.body = response.read()

    def media_type(self) -> str:
        return str(self.headers.get("Content-Type", "")).split(";")[0].strip()

    def error(self) -> dict[str, object]:
        assert self.media_type() == "application/json", (self.status, self.headers, self.body[:200])
        envelope = json.loads(self.body)
        assert set(envelope) == {"error"}
        assert envelope["error"]["code"] == self.status
        return dict(envelope["error"])


Fetch = Callable[..., Answer]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    if not (DIST / "index.html").is_file():
        message = f"the console is not built ({DIST.relative_to(ROOT)}/index.html): run make console"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="module")
def fetch(server: AmsServer, tls_files: tuple[str, str, str]) -> Fetch:
    """``fetch(method, path, headers)``: the path sent exactly as written (http.client neither
    resolves ``..`` nor re-encodes), no redirect followed, no token."""
    context = ssl.create_default_context(cafile=tls_files[2])

    def fetch(method: str, path: str, headers: dict[str, str] | None = None) -> Answer:
        connection = http.client.HTTPSConnection(server.address, server.port, context=context, timeout=30)
        try:
            connection.request(method, path, headers=headers or {})
            return Answer(connection.getresponse())
        finally:
            connection.close()

    return fetch


def secured(answer: Answer) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert answer.headers.get(name) == value, (name, answer.status, answer.headers)


def index_html() -> bytes:
    return (DIST / "index.html").read_bytes()


class Page(HTMLParser):
    """What of the page matters to its CSP: scripts (with their src and text), styles, attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.styles = 0
        self.attributes: list[tuple[str, str]] = []
        self.references: list[str] = []
        self.script_sources: list[str] = []
        self.script_text: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attributes += [(tag, name) for name, _ in attrs]
        found = dict(attrs)
        if tag == "script":
            self.scripts.append(found)
            self.script_sources.append(str(found.get("src") or ""))
            self._in_script = True
        elif tag == "style":
            self.styles += 1
        for name in ("src", "href"):
            if found.get(name) and tag in ("script", "link", "img"):
                self.references.append(str(found[name]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)


def parsed(body: bytes) -> Page:
    page = Page()
    page.feed(body.decode("utf-8"))
    page.close()
    return page


def assets() -> list[str]:
    """The paths of the assets index.html loads."""
    return [ref for ref in parsed(index_html()).references if ref.startswith("/console/assets/")]


# ----------------------------------------------------------------------------------- page ----
def test_the_page_is_served_with_no_cache_and_the_security_headers(fetch: Fetch) -> None:
    answer = fetch("GET", "/console/")
    assert answer.status == 200
    assert answer.media_type() == "text/html"
    assert answer.headers["Cache-Control"] == "no-cache"
    assert answer.body == index_html()
    secured(answer)


@pytest.mark.parametrize(
    "path",
    [
        "/console/projects/p1/topics/t1",
        "/console/projects/p1/subscriptions/s1?tab=health",
        "/console/users",
        "/console/cluster/",
        "/console/index.html",
        "/console/projects/p1/topics/t1:publish",
    ],
)
def test_any_path_of_the_application_is_the_page(fetch: Fetch, path: str) -> None:
    answer = fetch("GET", path)
    assert answer.status == 200, answer.body[:200]
    assert answer.body == index_html()
    assert answer.headers["Cache-Control"] == "no-cache"
    secured(answer)


def test_head_answers_like_get_without_a_body(fetch: Fetch) -> None:
    answer = fetch("HEAD", "/console/projects/p1")
    assert answer.status == 200
    assert answer.body == b""
    assert int(answer.headers["Content-Length"]) == len(index_html())
    secured(answer)


def test_the_page_revalidates_with_its_etag(fetch: Fetch) -> None:
    etag = fetch("GET", "/console/").headers["ETag"]
    assert etag
    again = fetch("GET", "/console/users", {"If-None-Match": etag})
    assert again.status == 304
    assert again.body == b""
    secured(again)


@pytest.mark.parametrize("path", ["/console", "/console?next=%2Fconsole%2Fusers"])
def test_console_without_its_slash_redirects_permanently(fetch: Fetch, path: str) -> None:
    answer = fetch("GET", path)
    assert answer.status == 308
    assert answer.headers["Location"] == "/console/" + path.partition("/console")[2]
    secured(answer)


def test_the_page_runs_no_inline_script_or_style() -> None:
    """What the CSP (script-src 'self', style-src 'self') would refuse must not be in the page."""
    page = parsed(index_html())
    assert page.scripts, "index.html loads no script"
    assert all(script.get("src") for script in page.scripts), page.scripts
    assert page.script_text == []
    assert page.styles == 0
    assert [(tag, name) for tag, name in page.attributes if name == "style" or name.startswith("on")] == []
    # every file from its own origin, under the console's path (an image may be data:, as img-src allows)
    assert all(src.startswith("/console/assets/") for src in page.script_sources), page.script_sources
    assert all(ref.startswith(("/console/", "data:")) for ref in page.references), page.references


# --------------------------------------------------------------------------------- assets ----
def test_the_pages_assets_are_immutable_with_their_types(fetch: Fetch) -> None:
    paths = assets()
    assert any(path.endswith(".js") for path in paths), paths
    for path in paths:
        answer = fetch("GET", path)
        assert answer.status == 200, path
        suffix = Path(path).suffix
        assert answer.media_type() == TYPES[suffix], (path, answer.headers["Content-Type"])
        assert answer.headers["Cache-Control"] == IMMUTABLE
        assert answer.body == (DIST / path.removeprefix("/console/")).read_bytes()
        secured(answer)
        head = fetch("HEAD", path)
        assert (head.status, head.body) == (200, b"")
        assert int(head.headers["Content-Length"]) == len(answer.body)


def test_every_built_asset_is_served_with_a_known_type(fetch: Fetch) -> None:
    for file in sorted((DIST / "assets").iterdir()):
        answer = fetch("GET", f"/console/assets/{file.name}")
        assert answer.status == 200, file.name
        if file.suffix in TYPES:
            assert answer.media_type() == TYPES[file.suffix]


@pytest.mark.parametrize(
    "path",
    [
        "/console/assets/",
        "/console/assets",
        "/console/assets/no-such-file.js",
        "/console/assets/nested/file.js",
        "/console/assets/index.html",
    ],
)
def test_no_other_file_is_an_asset(fetch: Fetch, path: str) -> None:
    answer = fetch("GET", path)
    assert answer.status == 404, answer.body[:200]
    assert answer.error()["status"] == "NOT_FOUND"
    secured(answer)


@pytest.mark.parametrize(
    "path",
    [
        "/console/assets/../../app.py",
        "/console/assets/../../console.py",
        "/console/assets/../index.html",
        "/console/assets/..%2f..%2fapp.py",
        "/console/assets/%2e%2e/%2e%2e/app.py",
        "/console/assets/%2e%2e%2f%2e%2e%2fapp.py",
        "/console/assets/%252e%252e%252fapp.py",
        "/console/assets/..%5c..%5capp.py",
        "/console/assets/....//....//app.py",
        "/console/assets//etc/passwd",
        "/console/assets/%2fetc%2fpasswd",
        "/console/assets/..%00.js",
        "/console/assets/../../../../../../etc/passwd",
    ],
)
def test_paths_out_of_the_assets_are_refused(fetch: Fetch, path: str) -> None:
    answer = fetch("GET", path)
    assert answer.status in (400, 404), (answer.status, answer.body[:200])
    answer.error()
    assert b"import" not in answer.body
    assert b"root:" not in answer.body
    if answer.status == 404:
        secured(answer)


# --------------------------------------------------------------------- other answers ----
def test_other_methods_are_refused_with_the_headers(fetch: Fetch) -> None:
    for method, path in [("POST", "/console/"), ("PUT", "/console/assets/x.js"), ("DELETE", "/console/users")]:
        answer = fetch(method, path)
        assert answer.status == 405, (method, path)
        assert answer.error()["status"] == "METHOD_NOT_ALLOWED"
        secured(answer)


def test_the_api_keeps_its_own_headers(fetch: Fetch) -> None:
    """The console's CSP is the console's: the API's answers are not pages."""
    answer = fetch("GET", "/v1/status")
    assert answer.status == 200
    assert "Content-Security-Policy" not in answer.headers
    assert fetch("GET", "/consoles").status == 404


def test_the_files_need_no_token_and_the_api_still_does(fetch: Fetch) -> None:
    assert fetch("GET", "/console/", {"x-api-key": "not-a-token"}).status == 200
    assert fetch("GET", "/v1/projects").status == 401


def test_console_requests_are_counted_under_their_route_names(fetch: Fetch, api: Api) -> None:
    fetch("GET", "/console/projects")
    fetch("GET", assets()[0])
    fetch("GET", "/console/assets/missing.js")
    fetch("GET", "/console")
    routes = {
        (labels["route"], labels["status_class"])
        for name, lbls in api.scrape()
        if name == "ams_http_request_duration_seconds_count"
        for labels in [dict(lbls)]
    }
    assert {
        ("console", "2xx"),
        ("console_asset", "2xx"),
        ("console_asset", "4xx"),
        ("console_redirect", "3xx"),
    } <= routes


# ------------------------------------------------------------------------- not built ----
def test_an_unbuilt_console_says_how_to_build_it(tmp_path: Path) -> None:
    """A source checkout that skipped the build (in-process: the app's error handlers and the
    console over an empty directory)."""
    app = Flask(__name__)
    register_error_handlers(app)
    console.register(app, console.Bundle.load(tmp_path))
    client = app.test_client()
    for path in ("/console/", "/console/projects/p1"):
        answer = client.get(path)
        assert answer.status_code == 404
        error = answer.get_json()["error"]
        assert error["status"] == "NOT_FOUND"
        assert "make console" in error["message"]
        assert answer.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    assert client.get("/console/assets/index.js").status_code == 404
