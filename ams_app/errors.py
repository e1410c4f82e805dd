"""One error type and one JSON envelope for every failure the API reports."""

from __future__ import annotations

from typing import Any


class AmsError(Exception):
    """An API error: rendered as ``{"error": {"code", "message", "status"}}``."""

    def __init__(self, code: int, message: str, status: str, more: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.more = more  # fields of the error object after these three (ams_app/openapi.yaml says which)

    def envelope(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "status": self.status, **(self.more or {})}}

    # Constructors named after the original's error kinds (their codes and messages are in ams_app/openapi.yaml).
    @classmethod
    def invalid_request_body(cls) -> AmsError:
        return cls(400, "Invalid Request Body", "BAD_REQUEST")

    @classmethod
    def invalid_name(cls, key: str) -> AmsError:
        return cls(400, f"Invalid {key} name", "INVALID_ARGUMENT")

    @classmethod
    def invalid_data(cls, message: str) -> AmsError:
        return cls(400, message, "INVALID_ARGUMENT")

    @classmethod
    def invalid_argument(cls, resource: str) -> AmsError:
        return cls(400, f"Invalid {resource} Arguments", "INVALID_ARGUMENT")

    @classmethod
    def ack_ids_refused(cls, failed: dict[str, str], total: int) -> AmsError:
        """An acknowledgement on an exactly-once subscription of which some ids were not taken:
        the others were. ``ackIdErrors`` says why, by ack id (docs/delivery.md)."""
        message = f"{len(failed)} of {total} ack ids were not accepted; the others were"
        return cls(400, message, "INVALID_ARGUMENT", {"ackIdErrors": failed})

    @classmethod
    def unauthorized(cls) -> AmsError:
        return cls(401, "Unauthorized", "UNAUTHORIZED")

    @classmethod
    def forbidden(cls, detail: str | None = None) -> AmsError:
        message = "Access to this resource is forbidden"
        if detail:
            message += f". {detail}"
        return cls(403, message, "FORBIDDEN")

    @classmethod
    def not_found(cls, resource: str) -> AmsError:
        return cls(404, f"{resource} doesn't exist", "NOT_FOUND")

    @classmethod
    def timeout(cls, message: str = "ack timeout") -> AmsError:
        return cls(408, message, "TIMEOUT")

    @classmethod
    def conflict(cls, resource: str) -> AmsError:
        return cls(409, f"{resource} already exists", "ALREADY_EXISTS")

    @classmethod
    def generic_conflict(cls, message: str) -> AmsError:
        return cls(409, message, "CONFLICT")

    @classmethod
    def too_large(cls, message: str = "Message size is too large") -> AmsError:
        return cls(413, message, "INVALID_ARGUMENT")

    @classmethod
    def internal(cls, message: str = "Internal error while querying datastore") -> AmsError:
        return cls(500, message, "INTERNAL_SERVER_ERROR")

    @classmethod
    def unavailable(cls, message: str) -> AmsError:
        return cls(503, message, "UNAVAILABLE")

    @classmethod
    def push_verification(cls, detail: str) -> AmsError:
        return cls(401, f"Endpoint verification failed.{detail}", "UNAUTHORIZED")

    @classmethod
    def internal_push(cls) -> AmsError:
        return cls(500, "Push functionality is currently unavailable", "INTERNAL_SERVER_ERROR")
