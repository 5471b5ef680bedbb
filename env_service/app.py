"""The FastAPI application: both protocols over one engine, errors mapped to statuses.

A background task drops idle episodes every few seconds so a crashed client leaks
nothing even when no new episode is created. The OpenAPI schema is at /openapi.json
and the interactive docs at /docs.
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from env_service import api_native, api_wire
from env_service.engine import EngineError, EnvEngine, ServiceConfig

EXPIRY_SWEEP_S = 5.0


def create_app(config: ServiceConfig | None = None) -> FastAPI:
    engine = EnvEngine(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async def sweep():
            while True:
                await asyncio.sleep(min(EXPIRY_SWEEP_S, engine.config.episode_ttl_s))
                engine.expire_idle()

        task = asyncio.create_task(sweep())
        yield
        task.cancel()

    app = FastAPI(
        title="SEAL BFCL environment service",
        description="Executes, verifies and diagnoses BFCL multi-turn episodes; evolves "
        "training-time observations.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.engine = engine

    @app.exception_handler(EngineError)
    async def engine_error(request: Request, exc: EngineError):
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    app.include_router(api_native.router)
    app.include_router(api_wire.router)
    return app
