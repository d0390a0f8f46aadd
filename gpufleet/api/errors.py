"""Every error the API answers with is an :class:`ErrorBody` with the right status code.

Maps the service's exceptions (bad input, forbidden, not found, conflict, too many writes; a
write the Kubernetes API server refused the caller: forbidden too) and FastAPI's own
(validation, unknown route, wrong method) to JSON bodies that name what is wrong and, for bad
input, where; a message quotes at most a bounded part of what it was given.
"""

from __future__ import annotations

import math

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpufleet.api.schemas import ErrorBody
from gpufleet.io.errors import MAX_MESSAGE, MAX_PLACE, InputError, shorten
from gpufleet.kube_client.api_types import ForbiddenApiError
from gpufleet.service.auth import ForbiddenError
from gpufleet.service.limits import RateLimitedError
from gpufleet.service.plane_book import ConflictError, NotFoundError
from gpufleet.service.store import StoreError

_KINDS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """An error raised by a route: status code, message and the field at fault."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def error_response(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON answer; what it quotes is bounded (a message of at most
    :data:`~gpufleet.io.errors.MAX_MESSAGE` characters), whatever raised it."""
    body = ErrorBody(
        error=_KINDS.get(status, "error"),
        message=shorten(message, MAX_MESSAGE),
        field=None if field is None else shorten(field, MAX_PLACE),
    )
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, error.message, error.field)

    @app.exception_handler(InputError)
    async def input_error(_: Request, error: InputError) -> JSONResponse:
        return error_response(422, str(error), error.field)

    @app.exception_handler(ForbiddenError)
    async def forbidden(_: Request, error: ForbiddenError) -> JSONResponse:
        return error_response(403, str(error))

    @app.exception_handler(ForbiddenApiError)
    async def refused_by_cluster(_: Request, error: ForbiddenApiError) -> JSONResponse:
        # On Kubernetes a tenant's writes impersonate it: its RBAC or Pod Security refused.
        return error_response(403, f"the Kubernetes API server refused it: {error.message}")

    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, error: NotFoundError) -> JSONResponse:
        return error_response(404, str(error))

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, error: ConflictError) -> JSONResponse:
        return error_response(409, str(error))

    @app.exception_handler(RateLimitedError)
    async def rate_limited(_: Request, error: RateLimitedError) -> JSONResponse:
        retry = str(max(1, math.ceil(error.retry_after)))
        return error_response(429, str(error), headers={"Retry-After": retry})

    @app.exception_handler(StoreError)
    async def store_error(_: Request, error: StoreError) -> JSONResponse:
        return error_response(503, str(error))

    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error_response(422, str(first.get("msg", "invalid request")), where or None)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail))
