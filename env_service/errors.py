"""Errors a client caused, and how every error is answered on each protocol.

The one place that decides an error reply's status and shape: the original release's
envelope `{"success": false, "data": null, "error": message}` on its release protocol, the
native API's `{"detail": message}` elsewhere, for client errors (`EngineError`), malformed
bodies, HTTP errors and bugs (500, logged) alike. `install(app, on_release_protocol)` installs the
handlers; http_guard.Guard answers before FastAPI runs, with `reply`. Each kind:
docs/service.md, "The door and the error replies".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson
from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

log = logging.getLogger("env_service")


class EngineError(Exception):
    """An error a client caused; `status` is the HTTP status both protocols answer with."""

    status = 400
    headers: dict[str, str] | None = None


class InvalidRequestError(EngineError):
    status = 422


class ForbiddenError(EngineError):
    status = 403


class NotFoundError(EngineError):
    status = 404


class ConflictError(EngineError):
    status = 409


class TooLargeError(EngineError):
    status = 413


class StorageError(EngineError):
    """The service could not write a file it keeps (a memory snapshot: a full disk, a
    folder made read-only): 507 Insufficient Storage, naming the file and the cause."""

    status = 507


class BusyError(EngineError):
    status = 503
    # Episodes end at the rate of steps (milliseconds each): a second is a fair wait.
    headers = {"Retry-After": "1"}


class ServiceStartError(ValueError):
    """The service cannot start with its configuration (the message says what to fix)."""


def payload(message: str, release_protocol: bool) -> dict:
    """An error's body: the release protocol's envelope, or the native API's detail."""
    if release_protocol:
        return {"success": False, "data": None, "error": message}
    return {"detail": message}


def reply(
    message: str, status: int, release_protocol: bool, headers: dict | None = None
) -> Response:
    """An error's answer in its protocol's shape."""
    # orjson writes every string byte for byte as FastAPI's JSONResponse does.
    body = orjson.dumps(payload(message, release_protocol))
    return Response(body, status, headers=headers, media_type="application/json")


def error_reply(exc: EngineError, release_protocol: bool) -> Response:
    """The answer to a request a client got wrong."""
    return reply(str(exc), exc.status, release_protocol, exc.headers)


def bug_reply(exc: Exception, method: str, path: str, release_protocol: bool) -> Response:
    """The answer to a bug in the service (500), logged with its traceback."""
    log.exception("env_service: %s %s failed", method, path, exc_info=exc)
    return reply(f"internal error: {type(exc).__name__}: {exc}", 500, release_protocol)


def install(app: FastAPI, on_release_protocol: Callable[[str], bool]) -> None:
    """Answer every error on `app` in its protocol's shape; `on_release_protocol(path)` says
    whether a request path is on the release protocol."""

    def on_release_path(request: Request) -> bool:
        return on_release_protocol(request.scope["path"])

    @app.exception_handler(EngineError)
    async def client_error(request: Request, exc: EngineError):
        return error_reply(exc, on_release_path(request))

    @app.exception_handler(RequestValidationError)
    async def malformed_body(request: Request, exc: RequestValidationError):
        # The release protocol answers every request with {success, data, error}, also a body
        # that is not JSON or not an object; the native API keeps FastAPI's 422 detail.
        if on_release_path(request):
            return reply(f"malformed request body: {exc.errors()}", 422, True)
        return await request_validation_exception_handler(request, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if on_release_path(request):
            return reply(str(exc.detail), exc.status_code, True)
        return await http_exception_handler(request, exc)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception):
        return bug_reply(exc, request.method, request.scope["path"], on_release_path(request))
