"""The FastAPI application: both protocols over one engine, errors mapped to statuses.

Requests pass env_service/http_guard.py first (the token, the body limit), then FastAPI's
one router. The engine's worker processes start with the app and stop with it. A
background task drops idle episodes every few seconds so a crashed client leaks nothing
even when no new episode is created. Every error is JSON in its protocol's shape, a bug
included (500, logged): env_service/errors.py. The OpenAPI schema is at /openapi.json and
the interactive docs at /docs (both behind the token when there is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc

from fastapi import FastAPI

from env_service import api_native, errors
from env_service.engine import EnvEngine
from env_service.http_guard import Guard
from env_service.release_protocol import api as release_api
from env_service.service_config import ServiceConfig
from seal.bfcl.backends import preload_backends
from seal.bfcl.tasks import task_ids

EXPIRY_SWEEP_S = 5.0


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
    cfg = engine.config
    app.include_router(api_native.router)
    app.include_router(api_native.health_router)
    # Off, the release's paths are unknown paths (404 in the native shape), and the
    # OpenAPI schema has none of them.
    release_paths = release_api.PATHS if cfg.release_protocol else set()
    if cfg.release_protocol:
        app.include_router(release_api.router)

    def on_release_protocol(path: str) -> bool:
        return path in release_paths

    errors.install(app, on_release_protocol)
    app.add_middleware(
        Guard,
        token=cfg.token,
        max_body_bytes=cfg.max_body_bytes,
        max_profile_bytes=cfg.max_profile_bytes,
        on_release_protocol=on_release_protocol,
    )
    return app
