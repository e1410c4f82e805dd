"""ams_app: the ARGO Messaging Service API v1 on Flask + gevent. Nothing happens at import."""

from __future__ import annotations

import io
from importlib import metadata
from typing import TYPE_CHECKING, Any

try:
    # the installed distribution's version: a rolling upgrade shows on /v1/version (docs/ansible.md)
    __version__ = metadata.version("ams-app")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

if TYPE_CHECKING:
    from flask import Flask

    from ams_app.service.core import AmsService
    from ams_app.settings import Settings


def create_app(settings: Settings, service: AmsService | None = None) -> Flask:
    """Build the WSGI app: config, then the service (backends), blueprints, error handlers."""
    from flask import Flask

    from ams_app.api import routes
    from ams_app.api.pipeline import NameConverter
    from ams_app.backends import open_backends
    from ams_app.errors_http import register_error_handlers
    from ams_app.service.core import AmsService

    app = Flask(__name__, static_folder=None)  # no static files: no /static route
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.converters["name"] = NameConverter
    if service is None:
        store, log = open_backends(settings)
        service = AmsService(settings, store, log)
    app.extensions["ams"] = service
    app.register_blueprint(routes.bp)
    app.register_blueprint(routes.prometheus_bp)
    register_error_handlers(app)
    app.wsgi_app = _chunked_body_limit(app.wsgi_app, settings.max_request_bytes)  # type: ignore[method-assign]
    app.before_request(_refuse_too_large)
    return app


_TOO_LARGE = "ams.body_too_large"


def _chunked_body_limit(wsgi_app: Any, limit: int) -> Any:
    """Read a chunked request body here, up to ``limit`` + 1 bytes, and hand it on with its length.
    werkzeug stops reading such a body at the limit without saying so, and the cut JSON was
    answered 400 as malformed; a body over the limit is now 413, as with a Content-Length."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower() and not environ.get("CONTENT_LENGTH"):
            data = environ["wsgi.input"].read(limit + 1)
            if len(data) > limit:
                environ[_TOO_LARGE] = True
                data = b""
            environ["wsgi.input"] = io.BytesIO(data)
            environ["CONTENT_LENGTH"] = str(len(data))  # werkzeug ignores it beside "chunked": drop that
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            environ.pop("wsgi.input_terminated", None)
        return wsgi_app(environ, start_response)

    return app


def _refuse_too_large() -> None:
    from flask import request
    from werkzeug.exceptions import RequestEntityTooLarge

    if request.environ.get(_TOO_LARGE):
        raise RequestEntityTooLarge()
