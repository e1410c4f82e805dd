"""The web console at ``/console`` (docs/console.md): the single-page application of console/, built
into the package (``ams_app/console_dist``: index.html and hashed assets/), served as static files.

Its files are public: no token. The pages call the API at /v1 with the user's token in
``x-api-key``, which the API checks as it checks any client's. Every answer under /console (errors
too) carries the security headers of ``SECURITY_HEADERS``: the page runs only its own scripts and
styles, talks only to its own origin, and cannot be framed.

The files are read once, when the app is made: a rebuild (make console) shows after a restart."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable

from flask import Blueprint, Flask, Response, request

from ams_app.errors import AmsError

PREFIX = "/console"
#: Where the build (console/vite.config.ts) writes, inside the package.
DIST = "console_dist"
ASSETS = "assets"
INDEX = "index.html"

#: The Content-Security-Policy of every answer under /console: nothing inline, nothing from
#: elsewhere; ``connect-src 'self'``: the API calls go to the origin that served the page.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
#: Hashed names (the build's): a name always means the same bytes.
IMMUTABLE = "public, max-age=31536000, immutable"
#: index.html names the current assets: checked again on every load (its ETag makes that cheap).
NO_CACHE = "no-cache"
#: By extension, the types of what a Vite build writes; anything else is an opaque download.
CONTENT_TYPES: Mapping[str, str] = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".webmanifest": "application/manifest+json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
    ".ttf": "font/ttf",
    ".otf": "font/otf",
    ".txt": "text/plain; charset=utf-8",
}
OCTET_STREAM = "application/octet-stream"
NOT_BUILT = (
    "The console is not built: run make console in the source checkout (it needs Node.js and npm), "
    "then restart the server (docs/console.md)"
)


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str

    @classmethod
    def of(cls, name: str, body: bytes) -> StaticFile:
        suffix = name[name.rfind(".") :].lower() if "." in name else ""
        return cls(body, CONTENT_TYPES.get(suffix, OCTET_STREAM), hashlib.sha256(body).hexdigest()[:32])


@dataclass(frozen=True)
class Bundle:
    """The built console: index.html (None when not built), the files of assets/ and any other
    files beside index.html (what Vite copies from console/public: a favicon, a manifest), by name."""

    index: StaticFile | None
    assets: Mapping[str, StaticFile] = field(default_factory=dict)
    others: Mapping[str, StaticFile] = field(default_factory=dict)

    @classmethod
    def load(cls, root: Traversable | None = None) -> Bundle:
        """The files under ``root`` (the package's console_dist by default), read once."""
        root = root if root is not None else resources.files("ams_app").joinpath(DIST)
        top, assets = _files(root), _files(root.joinpath(ASSETS))
        return cls(top.pop(INDEX, None), assets, top)


def _files(folder: Traversable) -> dict[str, StaticFile]:
    """The files directly in ``folder`` (none when it is missing), read."""
    if not folder.is_dir():
        return {}
    return {item.name: StaticFile.of(item.name, item.read_bytes()) for item in folder.iterdir() if item.is_file()}


def _answer(file: StaticFile, cache_control: str) -> Response:
    response = Response(file.body, status=200, content_type=file.content_type)
    response.headers["Cache-Control"] = cache_control
    response.set_etag(file.etag)
    # a 304 to a matching If-None-Match (in place); HEAD keeps the length and drops the body
    response.make_conditional(request)
    return response


def _not_found() -> AmsError:
    return AmsError(404, "Not Found", "NOT_FOUND")


def _under_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def register(app: Flask, bundle: Bundle | None = None) -> Bundle:
    """Serve ``bundle`` (the package's build by default) under /console in ``app``. The route names
    (the request metrics' labels): ``console`` (the page, at any path of the application),
    ``console_asset``, ``console_redirect``."""
    files = bundle if bundle is not None else Bundle.load()
    bp = Blueprint("console", __name__)

    @bp.get(PREFIX, endpoint="console_redirect", strict_slashes=True)
    def to_slash() -> Response:
        query = request.query_string.decode("latin-1")
        return Response(status=308, headers={"Location": PREFIX + "/" + (f"?{query}" if query else "")})

    @bp.get(PREFIX + "/", endpoint="console", defaults={"path": ""})
    @bp.get(PREFIX + "/<path:path>", endpoint="console")
    def page(path: str) -> Response:
        # the application's own paths (/console/projects/p1/topics/t1) are routed in the browser
        if path == ASSETS or path.startswith(ASSETS + "/"):
            raise _not_found()  # an asset's path that is no asset's name (nested, or empty)
        if files.index is None:
            raise AmsError(404, NOT_BUILT, "NOT_FOUND")
        other = files.others.get(path)  # unhashed: checked again like index.html
        return _answer(other or files.index, NO_CACHE)

    @bp.get(PREFIX + "/" + ASSETS + "/<path:name>", endpoint="console_asset")
    def asset(name: str) -> Response:
        # only the names of the build's files: ../, %2e%2e%2f and the like name none of them
        found = files.assets.get(name)
        if found is None:
            raise _not_found()
        return _answer(found, IMMUTABLE)

    @bp.after_app_request
    def secure(response: Response) -> Response:
        # every answer under /console: its routes', and the app's (405, 404, 500) to such paths
        if _under_console(request.path):
            for name, value in SECURITY_HEADERS.items():
                response.headers[name] = value
        return response

    app.register_blueprint(bp)
    app.extensions["ams_console"] = files
    return files
