"""The API v1, one module per resource; each route declares who may call it (``add_route`` with
its roles, or ``open_route``), in ams_app/api/pipeline.py's ``v1`` blueprint:

- status.py: health, version, the OpenAPI document; metrics.py: the service's and its resources'
- users.py, projects.py (with members), topics.py, subscriptions.py (pull, ack, offsets, push
  configuration, seek), snapshots.py, schemas.py, registrations.py

Each resource's rules live in the service module of the same name (ams_app/service/)."""

from __future__ import annotations

from ams_app.api import (
    metrics,
    projects,
    registrations,
    schemas,
    snapshots,
    status,
    subscriptions,
    topics,
    users,
)
from ams_app.api.metrics import prometheus_bp
from ams_app.api.pipeline import v1 as bp

RESOURCES = (status, metrics, users, projects, topics, subscriptions, snapshots, schemas, registrations)

__all__ = ["RESOURCES", "bp", "prometheus_bp"]
