"""The FastAPI application: both protocols over one engine, errors mapped to statuses.

Requests pass env_service/http_guard.py first (the token, the body limit), then the hot
routes (env_service/hot_routes.py: creates and steps, served without FastAPI's routing),
then FastAPI. The engine's
worker processes start with the app and stop with it. A background task drops idle
episodes every few seconds so a crashed client leaks nothing even when no new episode is
created. Every error is JSON in its protocol's shape, a bug included (500, logged): the
wire protocol's `{success, data, error}` envelope on its paths, `{"detail": ...}`
elsewhere. The OpenAPI schema is at /openapi.json and the interactive docs at /docs
(both behind the token when there is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

from fastapi import FastAPI, Request
from fastapi.exception_handlers import (
    http_exception_handler,
    request_validation_exception_handler,
)
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from env_service import api_native, api_wire
from env_service.config import ServiceConfig
from env_service.engine import EngineError, EnvEngine, InvalidRequestError
from env_service.hot_routes import HotRoutes
from env_service.http_guard import Guard
from seal.bfcl.backends import preload_backends
from seal.bfcl.tasks import task_ids

EXPIRY_SWEEP_S = 5.0
log = logging.getLogger("env_service")


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    """The service; raises ServiceStartError (a ValueError naming what to fix) when it
    cannot start with `config` (e.g. an unreadable --capability-state file)."""
    engine = EnvEngine(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        # Load all 800 tasks and the backends now (about 2 s): a broken bfcl-eval install fails at start,
        # and the first episodes do not pay for it.
        task_ids()
        preload_backends()
        # The loaded tasks are millions of long-lived objects; left to the cyclic GC, a
        # full collection over them paused the event loop for a fifth of a second. Frozen
        # objects are never scanned (docs/benchmarks.md), and stay shared with the
        # worker processes forked next (their pages are never written).
        gc.collect()
        gc.freeze()
        await engine.start_pool()

        async def sweep():
            while True:
                await asyncio.sleep(min(EXPIRY_SWEEP_S, engine.config.episode_ttl_s))
                engine.expire_idle()

        task = asyncio.create_task(sweep())
        try:
            yield
        finally:
            task.cancel()
            await engine.stop_pool()

    app = FastAPI(
        title="SEAL BFCL environment service",
        description="Executes, verifies and diagnoses BFCL multi-turn episodes; evolves "
        "training-time observations. With a token, every route but GET /healthz needs "
        "`Authorization: Bearer <token>`.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.engine = engine
    wire_paths = {route.path for route in api_wire.router.routes}

    def on_wire(request: Request) -> bool:
        return request.url.path in wire_paths

    @app.exception_handler(EngineError)
    async def engine_error(request: Request, exc: EngineError):
        if on_wire(request):
            return api_wire.wire_error(exc)
        return api_native.error_reply(exc)

    @app.exception_handler(RequestValidationError)
    async def malformed_body(request: Request, exc: RequestValidationError):
        # The wire protocol answers every request with {success, data, error}, also a body
        # that is not JSON or not an object; the native API keeps FastAPI's 422 detail.
        if on_wire(request):
            error = InvalidRequestError(f"malformed request body: {exc.errors()}")
            return api_wire.wire_error(error)
        return await request_validation_exception_handler(request, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if on_wire(request):
            error = EngineError(str(exc.detail))
            error.status = exc.status_code
            return api_wire.wire_error(error)
        return await http_exception_handler(request, exc)

    @app.exception_handler(Exception)
    async def bug(request: Request, exc: Exception):
        log.exception("env_service: %s %s failed", request.method, request.url.path)
        if on_wire(request):
            message = f"internal error: {type(exc).__name__}: {exc}"
            return JSONResponse({"success": False, "data": None, "error": message}, 500)
        return api_native.bug_reply(exc)

    app.include_router(api_native.router)
    app.include_router(api_wire.router)
    # Added first, so it runs inside Guard (the last added is outermost).
    app.add_middleware(HotRoutes, engine=engine)
    cfg = engine.config
    app.add_middleware(
        Guard,
        token=cfg.token,
        max_body_bytes=cfg.max_body_bytes,
        max_profile_bytes=cfg.max_profile_bytes,
        wire_paths=wire_paths,
    )
    return app
