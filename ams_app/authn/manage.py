"""AuthN's management API: service types and bindings (docs/authn.md), one set of views served by
two apps.

``manage`` is a blueprint of the management views only. Each is a service admin's call
(``admin_only``), over the AuthnService in ``app.extensions["authn"]``; bodies and answers are
those of ams_app/authn/openapi.yaml.

- ``ams authn`` registers it under ``/v1``, beside the x509 call and its about routes (version,
  status, openapi.json) of ams_app/authn/app.py, on its own HTTPS listener.
- ``ams serve`` registers it under ``/authn/v1`` (:func:`mount_on_ams`), so that the web console,
  which may call only its own origin, manages the bindings. Its AuthnService is built over the
  AMS service's own metadata store (each backend's: SQLite under ``data_dir`` or MongoDB), the
  store ``ams authn`` reads: a binding made through either is what the other serves at once.
  Errors leave in the AMS envelope through ams_app/errors_http.py's handlers, as every other
  answer of ``ams serve``, and its request metrics label these routes with their endpoint names
  (``authn:bindings:list``, ...).
- The x509 call is not here: it needs the client certificate of the TLS handshake, which only
  ``ams authn``'s listener asks for. Under ``/authn/v1`` on ``ams serve`` it is a 404, as are the
  about routes (``ams serve`` has its own).

A body over ``MAX_BODY`` is a 413 on both (``ams serve`` otherwise takes far larger ones).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, current_app, request

from ams_app.api.pipeline import JSON_TYPE, MALFORMED, body, request_token
from ams_app.authn import requests
from ams_app.authn.service import AuthnService
from ams_app.errors import AmsError
from ams_app.models import Binding, ServiceType

if TYPE_CHECKING:
    from ams_app.service.core import AmsService

#: Largest request body: bindings and service types are small.
MAX_BODY = 64 * 1024
#: Where ``ams serve`` answers the management routes (the console's calls).
AMS_PREFIX = "/authn/v1"

manage = Blueprint("authn_manage", __name__, url_prefix="/v1")


@manage.before_request
def _small_bodies() -> None:
    request.max_content_length = MAX_BODY


def authn_service() -> AuthnService:
    svc: AuthnService = current_app.extensions["authn"]
    return svc


def answer(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload), status=status, content_type=JSON_TYPE)


def _body() -> Any:
    parsed = body()
    if parsed is MALFORMED:
        raise AmsError.invalid_request_body()
    return parsed


def admin_only(view: Callable[..., Response]) -> Callable[..., Response]:
    """The management routes: a service admin's AMS token (``x-api-key`` or ``?key=``)."""

    @functools.wraps(view)
    def guarded(*args: Any, **kwargs: Any) -> Response:
        verdict = authn_service().is_service_admin(request_token())
        if verdict is None:
            raise AmsError.unauthorized()
        if not verdict:
            raise AmsError.forbidden()
        return view(*args, **kwargs)

    return guarded


def service_type_view(st: ServiceType) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": st.name,
        "hosts": st.hosts,
        "auth_types": st.auth_types,
        "type": st.type,
        "uuid": st.uuid,
        "created_on": st.created_on,
    }
    if st.updated_on:
        out["updated_on"] = st.updated_on
    return out


def binding_view(b: Binding) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": b.name,
        "service_uuid": b.service_uuid,
        "host": b.host,
        "uuid": b.uuid,
        "auth_identifier": b.auth_identifier,
        "unique_key": b.unique_key,
        "auth_type": b.auth_type,
        "created_on": b.created_on,
    }
    if b.updated_on:
        out["updated_on"] = b.updated_on
    if b.last_auth:
        out["last_auth"] = b.last_auth
    return out


def _page_view(page: Any) -> dict[str, Any]:
    return {
        "bindings": [binding_view(b) for b in page.items],
        "nextPageToken": page.next_page_token,
        "totalSize": page.total_size,
    }


# ---------------------------------------------------------------------- service types -------
@manage.get("/service-types", endpoint="authn:service_types:list")
@admin_only
def list_service_types() -> Response:
    return answer({"service_types": [service_type_view(st) for st in authn_service().service_types()]})


@manage.post("/service-types", endpoint="authn:service_types:create")
@admin_only
def create_service_type() -> Response:
    created = authn_service().create_service_type(requests.new_service_type(_body()))
    return answer(service_type_view(created), 201)


@manage.get("/service-types/<service_type>", endpoint="authn:service_types:show")
@admin_only
def show_service_type(service_type: str) -> Response:
    return answer(service_type_view(authn_service().service_type(service_type)))


@manage.put("/service-types/<service_type>", endpoint="authn:service_types:update")
@admin_only
def update_service_type(service_type: str) -> Response:
    raw = _body()  # a body that is not JSON is 400 first
    svc = authn_service()
    found = svc.service_type(service_type)
    return answer(service_type_view(svc.update_service_type(found, requests.service_type_update(raw))))


@manage.delete("/service-types/<service_type>", endpoint="authn:service_types:delete")
@admin_only
def delete_service_type(service_type: str) -> Response:
    authn_service().delete_service_type(service_type)
    return Response(status=204)


@manage.get("/service-types/<service_type>/hosts/<host>/bindings", endpoint="authn:bindings:of_host")
@admin_only
def bindings_of_host(service_type: str, host: str) -> Response:
    """The bindings on one host; with ``authID``, the one binding of that DN (or 404)."""
    dn = request.args.get("authID")
    svc = authn_service()
    if dn is not None:
        return answer({"bindings": [binding_view(svc.binding_of_dn(service_type, host, dn))]})
    page = svc.bindings(request.args.get("pageSize"), request.args.get("pageToken"), service_type, host)
    return answer(_page_view(page))


# ---------------------------------------------------------------------- bindings ------------
@manage.get("/bindings", endpoint="authn:bindings:list")
@admin_only
def list_bindings() -> Response:
    page = authn_service().bindings(request.args.get("pageSize"), request.args.get("pageToken"))
    return answer(_page_view(page))


@manage.post("/bindings/<binding>", endpoint="authn:bindings:create")
@admin_only
def create_binding(binding: str) -> Response:
    return answer(binding_view(authn_service().create_binding(requests.new_binding(binding, _body()))), 201)


@manage.get("/bindings/<binding>", endpoint="authn:bindings:show")
@admin_only
def show_binding(binding: str) -> Response:
    return answer(binding_view(authn_service().binding(binding)))


@manage.put("/bindings/<binding>", endpoint="authn:bindings:update")
@admin_only
def update_binding(binding: str) -> Response:
    raw = _body()  # a body that is not JSON is 400 first
    svc = authn_service()
    found = svc.binding(binding)
    return answer(binding_view(svc.update_binding(found, requests.binding_changes(raw))))


@manage.delete("/bindings/<binding>", endpoint="authn:bindings:delete")
@admin_only
def delete_binding(binding: str) -> Response:
    authn_service().delete_binding(binding)
    return Response(status=204)


# ---------------------------------------------------------------------- on ams serve --------
def mount_on_ams(app: Flask, service: AmsService) -> None:
    """Serve the management routes under ``/authn/v1`` on the AMS API's app, over the service's
    own metadata store: behind its health guard (503 at once while the store is down) and, on
    Kafka, its metadata cache, which caches none of AuthN's calls and, outside an AMS route's
    request, reads users from the store too. No trust store: the x509 call is not served there."""
    app.extensions["authn"] = AuthnService(service.store, None, service.settings.service_token)
    app.register_blueprint(manage, url_prefix=AMS_PREFIX)
