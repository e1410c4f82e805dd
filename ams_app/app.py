"""The WSGI app: Flask with the API's routes and error handlers, over a service on its backends."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

    from ams_app.service.core import AmsService
    from ams_app.settings import Settings


def create_app(settings: Settings, service: AmsService | None = None) -> Flask:
    """Build the WSGI app: config, then the service (backends), blueprints (the API, the web
    console at /console), error handlers."""
    from flask import Flask

    from ams_app import console
    from ams_app.api import routes
    from ams_app.api.fastpath import PublishFastPath
    from ams_app.api.pipeline import NameConverter
    from ams_app.authn.manage import mount_on_ams
    from ams_app.backends import open_backends
    from ams_app.errors_http import register_error_handlers
    from ams_app.service.core import AmsService

    app = Flask(__name__, static_folder=None)  # no /static route: the console serves its own files
    app.config["MAX_CONTENT_LENGTH"] = settings.max_request_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.url_map.converters["name"] = NameConverter
    if service is None:
        store, log = open_backends(settings)
        service = AmsService(settings, store, log)
    app.extensions["ams"] = service
    app.register_blueprint(routes.bp)
    app.register_blueprint(routes.prometheus_bp)
    mount_on_ams(app, service)  # AuthN's management routes under /authn/v1 (ams_app/authn/manage.py)
    console.register(app)  # public static files, outside the API's pipeline (docs/console.md)
    register_error_handlers(app)
    _measure_requests(app, service)
    # publishes skip Flask, and leave it whatever they cannot answer alike (ams_app/api/fastpath.py)
    app.wsgi_app = PublishFastPath(app.wsgi_app, service, settings.max_request_bytes, app.logger)  # type: ignore[method-assign]
    return app


def _measure_requests(app: Flask, service: AmsService) -> None:
    """Every answer of the app, error answers included, counted and timed by route name (the
    names of the route table; ``unmatched`` when no route matched), method and status class."""
    import time

    from flask import Response, g, request

    from ams_app.telemetry import UNMATCHED

    telemetry = service.telemetry

    @app.before_request
    def started() -> None:
        g.ams_started = time.perf_counter()
        telemetry.in_flight.inc()

    @app.after_request
    def answered(response: Response) -> Response:
        began = g.get("ams_started")
        if began is not None:
            endpoint = request.endpoint
            route = endpoint.partition(".")[2] if endpoint else UNMATCHED
            telemetry.observe_request(route, request.method, response.status_code, time.perf_counter() - began)
        return response

    @app.teardown_request
    def finished(_exc: BaseException | None) -> None:
        if g.pop("ams_started", None) is not None:
            telemetry.in_flight.dec()
