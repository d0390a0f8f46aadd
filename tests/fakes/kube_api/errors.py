"""API errors: :class:`ApiError` and the ``Status`` bodies the real API server answers with.

The official client turns any non-2xx answer into ``kubernetes.client.ApiException`` whose
``status`` is the HTTP code and whose ``body`` is this JSON.
"""

from __future__ import annotations

from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``metav1.Status`` failure object."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        body["details"] = details
    return body


class ApiError(Exception):
    """Raised anywhere in the fake; the HTTP handler answers it with a ``Status`` body."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def body(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def _details(resource: str, name: str, group: str) -> dict[str, Any]:
    return {"name": name, "group": group, "kind": resource}


def qualified(resource: str, group: str) -> str:
    """``pods`` or ``leases.coordination.k8s.io``, as the real messages spell resources."""
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404,
        f'{qualified(resource, group)} "{name}" not found',
        "NotFound",
        _details(resource, name, group),
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        f'{qualified(resource, group)} "{name}" already exists',
        "AlreadyExists",
        _details(resource, name, group),
    )


def conflict(resource: str, name: str, group: str = "", why: str = "") -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
        "Conflict",
        _details(resource, name, group),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def unknown_path() -> ApiError:
    return ApiError(404, "the server could not find the requested resource", "NotFound")


def gone(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
