"""The two requests every episode makes again and again, answered without FastAPI's routing.

`POST /v1/episodes` and `POST /v1/episodes/{id}/steps` are nearly all of the service's
traffic. Through FastAPI's router, dependency solving and response wrappers, a step cost
the event loop several times what the step's own work does (a profile under
scripts/bench_env.py: docs/benchmarks.md). This ASGI middleware sits inside
http_guard.Guard (token and body limit already checked, the body read) and runs the same
handlers the FastAPI routes run (api_native.create / step) on a body parsed the same way
(json_body) and validated by the same models; the reply and every error are byte for
byte what the routes answer. Anything else, and any body that fails validation, goes on to FastAPI untouched,
so its 422 detail, the OpenAPI schema and `/docs` stay FastAPI's own.

Kept because a training step's rollout needs it: scripts/bench_rollout.py's driver (64
concurrent episodes played by the episode driver, as a trainer's rollout plays them)
gets more episodes/s with it on a machine whose cores are shared, the service's CPU per
episode being the difference (docs/benchmarks.md); when the cores are free the client
bounds that rollout and the two paths tie. Written by hand because no library routes
below a framework's own stack; kept to these two routes, which
tests/test_env_hot_routes.py checks against FastAPI's answers.
"""

from __future__ import annotations

import json
import re

from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from env_service import api_native, errors
from env_service.engine import EnvEngine
from env_service.http_guard import read_body, replay_body
from env_service.json_body import parse_body
from seal.rollout.protocol import CreateEpisode, StepRequest

CREATE_PATH = "/v1/episodes"
STEP_PATH = re.compile(r"/v1/episodes/(?P<episode_id>[^/]+)/steps")
"""The same match as the route's `/v1/episodes/{episode_id}/steps` (no `/` in the id)."""


class HotRoutes:
    def __init__(self, app: ASGIApp, engine: EnvEngine):
        self.app = app
        self.engine = engine
        self.served = 0
        """Requests answered here (the rest went on to FastAPI)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = _hot_route(scope)
        if route is None:
            return await self.app(scope, receive, send)
        kind, episode_id = route
        body, after = await read_body(receive)  # within Guard's limit: Guard read it
        if after is not None:  # the client went away while sending
            return await self.app(scope, replay_body(body, after, receive), send)
        model = CreateEpisode if kind == "create" else StepRequest
        try:
            request = model.model_validate(parse_body(body))
        except (json.JSONDecodeError, ValidationError):
            # FastAPI's own 422, with its detail: the same body, handed on unread.
            return await self.app(scope, replay_body(body, None, receive), send)
        response = await self._answer(scope, episode_id, request)
        self.served += 1
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, episode_id: str | None, request) -> Response:
        # The native API's error replies, as the app's exception handlers give them.
        try:
            if episode_id is None:
                return api_native.json_reply(await api_native.create(self.engine, request), 201)
            return api_native.json_reply(await api_native.step(self.engine, episode_id, request))
        except errors.EngineError as exc:
            return errors.error_reply(exc, wire=False)
        except Exception as exc:  # noqa: BLE001 - a bug: logged, answered 500 like the app's
            return errors.bug_reply(exc, scope["method"], scope["path"], wire=False)


def _hot_route(scope: Scope) -> tuple[str, str | None] | None:
    """("create", None), ("step", episode_id), or None for every other request."""
    if scope["type"] != "http" or scope["method"] != "POST" or not _is_json(scope):
        return None
    path = scope["path"]
    if path == CREATE_PATH:
        return "create", None
    match = STEP_PATH.fullmatch(path)
    return ("step", match["episode_id"]) if match else None


def _is_json(scope: Scope) -> bool:
    # Other content types go to FastAPI, which decides what they mean.
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.split(b";")[0].strip().lower() == b"application/json"
    return False
