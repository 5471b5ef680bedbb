"""The AgentEvolver/SEAL release protocol, so clients of the original release work unchanged.

    POST /create  /step  /evaluate  /release  /get_info  /get_env_profile     GET /healthz

Bodies `{env_type, task_id, instance_id, messages, params}`, replies `{success, data}`
(plus `error`). Each route's answer, every `/create` param (the release's keys and this
service's flat ones), the keys refused because they cannot be honoured, and where the
service differs from the release on purpose: docs/service.md, "The release
protocol, route by route".
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from env_service import errors
from env_service.api_native import close_if_client_left
from env_service.engine import EnvEngine
from env_service.errors import EngineError, InvalidRequestError, NotFoundError
from env_service.ids import check_id
from env_service.json_body import SafeJsonRoute
from env_service.release_protocol import compat
from env_service.release_protocol.params import translate_params
from env_service.statuses import release_errors
from seal.bfcl.agentic.tasks import is_agentic
from seal.bfcl.multi_turn import UnknownTaskError
from seal.bfcl.tasks import load_task

ENV_TYPE = "bfcl"


class ReleaseRequest(BaseModel):
    env_type: str = ENV_TYPE
    task_id: str | None = None
    instance_id: str | None = None
    messages: Any = None
    params: dict = Field(default_factory=dict)


def ok(data: Any) -> Response:
    """A success in the envelope (errors: env_service/errors.py)."""
    # A ready Response skips FastAPI's recursive jsonable_encoder, which cost more than
    # the episode work itself on 20-30 KB prompts; the data here is plain JSON already.
    return Response(orjson.dumps({"success": True, "data": data}), media_type="application/json")


def _assistant_text(messages: Any) -> str:
    """The assistant content of a /step body: one message dict, or the last of a list."""
    if isinstance(messages, list) and messages:
        messages = messages[-1]
    if isinstance(messages, dict) and isinstance(messages.get("content"), str):
        return messages["content"]
    raise InvalidRequestError("'messages' must be {'role': 'assistant', 'content': <text>}")


def _require(value: str | None, name: str) -> str:
    if not value:
        raise InvalidRequestError(f"'{name}' is required")
    return value


router = APIRouter(tags=["release protocol (AgentEvolver/SEAL)"], route_class=SafeJsonRoute)


def _engine(request: Request) -> EnvEngine:
    return request.app.state.engine


def _check_env_type(body: ReleaseRequest) -> None:
    if body.env_type != ENV_TYPE:
        raise EngineError(f"env_type {body.env_type!r} is not served here (only {ENV_TYPE!r})")


@router.post("/create", responses=release_errors(400, 404, 409, 413, 422, 503))
async def create(body: ReleaseRequest, request: Request):
    engine = _engine(request)
    _check_env_type(body)
    asked = check_id(_require(body.task_id, "task_id"), "task_id")
    if body.instance_id:
        check_id(body.instance_id, "instance_id")
    try:
        task = load_task(compat.resolve_task_id(asked))
    except UnknownTaskError as e:
        raise NotFoundError(str(e)) from None
    if is_agentic(task.task_id):
        raise NotFoundError(
            f"{task.task_id}: the release protocol serves the BFCL V3 multi-turn tasks; "
            "BFCL V4 agentic tasks are on the native API (/v1)"
        )
    create_params = translate_params(body.params, task.category, engine.profiles.release_state)
    instance_id, ep = await engine.acreate(
        task.task_id, create_params.settings, body.instance_id, create_params.profile
    )
    try:
        ep.speak(create_params.release_text)
        reply = _created(instance_id, ep, asked, task, create_params)
    except Exception:
        engine.discard(instance_id, ep)  # no client learnt of it: nothing is left live
        raise
    await close_if_client_left(engine, request, instance_id, ep)
    return reply


def _created(instance_id, ep, asked, task, create_params) -> Response:
    info = {
        "instance_id": instance_id,
        "task_id": asked,
        "test_id": task.task_id,
        "tools_count": len(task.tools),
        "questions_count": task.num_turns,
        "observation_lite": ep.layers.schema_cues,
        "category": task.category,
        "num_turns": task.num_turns,
        "ignored_params": create_params.ignored,
        **create_params.notes,
    }
    return ok({"state": ep.initial_messages, "reward": 0.0, "is_terminated": False, "info": info})


@router.post("/step", responses=release_errors(404, 409, 413, 422, 507))
async def step(body: ReleaseRequest, request: Request):
    instance_id = _require(body.instance_id, "instance_id")
    episode = _engine(request).get(instance_id)
    outcome = await _engine(request).astep(instance_id, _assistant_text(body.messages))
    info = {"instance_id": instance_id, "turn": outcome.turn, "truncated": outcome.truncated}
    if outcome.aborted:
        info["aborted"] = outcome.aborted
    if episode.ended_on_malformed_call:
        info["ended_on_malformed_call"] = True
    return ok(
        {
            "state": compat.step_state(
                episode.release_messages(outcome.messages), outcome.terminated
            ),
            "reward": outcome.reward,
            "is_terminated": outcome.terminated,
            "info": info,
        }
    )


@router.post("/evaluate", responses=release_errors(404, 413, 422, 507))
async def evaluate(body: ReleaseRequest, request: Request):
    instance_id = _require(body.instance_id, "instance_id")
    episode = _engine(request).get(instance_id)
    sparse = body.params.get("sparse", False)
    if not isinstance(sparse, bool):
        raise InvalidRequestError(f"params.sparse must be true or false, not {sparse!r}")
    evaluation = await _engine(request).aevaluate(instance_id)
    if sparse:
        return ok(float(evaluation["accuracy"]))
    if is_agentic(episode.task.task_id):
        # A BFCL V4 episode (made on the native API): its own evaluation; the release's
        # progress fields are per multi-turn ground-truth turn, which it has none of.
        return ok(evaluation)
    return ok(compat.evaluation(evaluation, episode.task.ground_truth))


@router.post("/release", responses=release_errors(413, 422))
async def release(body: ReleaseRequest, request: Request):
    instance_id = _require(body.instance_id, "instance_id")
    try:
        _engine(request).close(instance_id)
    except NotFoundError as e:
        # The release answers 200 here; its worker also releases after a failed episode,
        # and an HTTP error there would mask the failure it is handling.
        return errors.reply(str(e), 200, release_protocol=True)
    return ok(None)


@router.post("/get_info", responses=release_errors(404, 413, 422))
async def get_info(body: ReleaseRequest, request: Request):
    episode = _engine(request).get(_require(body.instance_id, "instance_id"))
    tools = episode.task.tools_until(episode.turn)
    return ok(compat.tools_info([d["name"] for d in tools]))


# The release's trainer client joins its base URL, "/" and "/get_env_profile": it asks for
# "//get_env_profile", which no router matches as "/get_env_profile".
@router.post("//get_env_profile", include_in_schema=False)
@router.post("/get_env_profile", responses=release_errors(400, 404, 413, 422, 500))
async def get_env_profile(body: ReleaseRequest):
    _check_env_type(body)
    split = body.params.get("split", "train")
    if not isinstance(split, str):
        raise InvalidRequestError(f"params.split must be a string, not {split!r}")
    return ok(compat.split_task_ids(split))


PATHS = {route.path for route in router.routes} | {"/healthz"}
"""The paths answered in this protocol's envelope, errors included: its routes, and the
native API's `GET /healthz` (env_service/api_native.py), which this protocol has too."""
