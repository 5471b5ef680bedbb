"""The AgentEvolver/SEAL wire protocol, so clients of the original release work unchanged.

Every POST body is `{env_type, task_id, instance_id, messages, params}` and every reply
`{success, data}` (plus `error` on failure, with the same HTTP status the native API
uses). `/create` takes the rollout mode and observation settings in `params`:

    rollout_mode          "sample" (training) | "validate" (evaluation)   default sample
    observation_lite      schema cues (the paper's headline layer)        default false
    schema_cues           same as observation_lite
    type_hints            type hints in the cues                          default false
    recovery_feedback     recovery hints on invalid calls / tool errors   default false
    diagnostic_guidelines guidelines from the failure profile             default false
    max_guidelines        at most this many guidelines                    default 3
    evolve_in_validation  keep the layers on in validate mode             default false
    max_steps             assistant messages before the service ends the
                          episode (EpisodeLimits.max_generations)         default 20
    partial_credit_cap    0 = binary reward (paper); see RewardSettings   default 0
    partial_credit_weight weight of progress under the cap                default 1

Unknown keys are not an error (older clients send their own) but are echoed back in
`data.info.ignored_params` so a typo is visible.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from env_service.engine import EngineError, EnvEngine, InvalidRequestError
from seal.rollout.protocol import EpisodeSettings

ENV_TYPE = "bfcl"


class WireRequest(BaseModel):
    env_type: str = ENV_TYPE
    task_id: str | None = None
    instance_id: str | None = None
    messages: Any = None
    params: dict = Field(default_factory=dict)


def _json(payload: dict, status: int = 200) -> Response:
    # A ready Response skips FastAPI's recursive jsonable_encoder, which cost more than
    # the episode work itself on 20-30 KB prompts; the data here is plain JSON already.
    return Response(orjson.dumps(payload), status, media_type="application/json")


def ok(data: Any) -> Response:
    return _json({"success": True, "data": data})


def wire_error(exc: EngineError) -> Response:
    return _json({"success": False, "data": None, "error": str(exc)}, exc.status)


_EVOLUTION_KEYS = {
    "observation_lite": "schema_cues",
    "schema_cues": "schema_cues",
    "type_hints": "type_hints",
    "recovery_feedback": "recovery_feedback",
    "diagnostic_guidelines": "guidelines",
    "max_guidelines": "max_guidelines",
}
_REWARD_KEYS = {"partial_credit_cap", "partial_credit_weight"}
_TOP_KEYS = {"rollout_mode", "evolve_in_validation", "max_steps"}


_SETTINGS = TypeAdapter(EpisodeSettings)


def settings_from_params(params: dict) -> tuple[EpisodeSettings, list[str]]:
    """Episode settings from wire params, and the keys that were not understood."""
    evo, reward, ignored = {}, {}, []
    for key, value in params.items():
        if key in _EVOLUTION_KEYS:
            evo[_EVOLUTION_KEYS[key]] = value
        elif key in _REWARD_KEYS:
            reward[key] = value
        elif key not in _TOP_KEYS:
            ignored.append(key)
    top = {k: params[k] for k in _TOP_KEYS & params.keys()}
    if "rollout_mode" in top:
        top["mode"] = top.pop("rollout_mode")
    if "max_steps" in top:
        top["limits"] = {"max_generations": top.pop("max_steps")}
    try:
        settings = _SETTINGS.validate_python({**top, "evolution": evo, "reward": reward})
    except ValidationError as e:
        raise InvalidRequestError(f"invalid params: {e.errors(include_url=False)}") from None
    return settings, sorted(ignored)


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


router = APIRouter(tags=["wire protocol (AgentEvolver/SEAL)"])


def _engine(request: Request) -> EnvEngine:
    return request.app.state.engine


def _check_env_type(body: WireRequest) -> None:
    if body.env_type != ENV_TYPE:
        raise EngineError(f"env_type {body.env_type!r} is not served here (only {ENV_TYPE!r})")


@router.post("/create")
async def create(body: WireRequest, request: Request):
    try:
        _check_env_type(body)
        settings, ignored = settings_from_params(body.params)
        instance_id, ep = _engine(request).create(
            _require(body.task_id, "task_id"), settings, body.instance_id
        )
    except EngineError as e:
        return wire_error(e)
    info = {
        "instance_id": instance_id,
        "task_id": ep.task.task_id,
        "category": ep.task.category,
        "num_turns": ep.task.num_turns,
        "ignored_params": ignored,
    }
    return ok({"state": ep.initial_messages, "reward": 0.0, "is_terminated": False, "info": info})


@router.post("/step")
async def step(body: WireRequest, request: Request):
    try:
        instance_id = _require(body.instance_id, "instance_id")
        outcome = _engine(request).step(instance_id, _assistant_text(body.messages))
    except EngineError as e:
        return wire_error(e)
    info = {"instance_id": instance_id, "turn": outcome.turn, "truncated": outcome.truncated}
    return ok(
        {
            "state": outcome.messages,
            "reward": outcome.reward,
            "is_terminated": outcome.terminated,
            "info": info,
        }
    )


@router.post("/evaluate")
async def evaluate(body: WireRequest, request: Request):
    try:
        episode = _engine(request).get(_require(body.instance_id, "instance_id"))
    except EngineError as e:
        return wire_error(e)
    sparse = body.params.get("sparse", True)
    if not isinstance(sparse, bool):
        return wire_error(
            InvalidRequestError(f"params.sparse must be true or false, not {sparse!r}")
        )
    report = episode.report()
    if sparse:
        return ok(float(report["accuracy"]))
    return ok(report)


@router.post("/release")
async def release(body: WireRequest, request: Request):
    try:
        _engine(request).release(_require(body.instance_id, "instance_id"))
    except EngineError as e:
        return wire_error(e)
    return ok(True)


@router.post("/get_info")
async def get_info(body: WireRequest, request: Request):
    try:
        episode = _engine(request).get(_require(body.instance_id, "instance_id"))
    except EngineError as e:
        return wire_error(e)
    return ok(
        {
            "task_id": episode.task.task_id,
            "category": episode.task.category,
            "mode": episode.settings.mode,
            "turn": episode.turn,
            "num_turns": episode.task.num_turns,
            "is_terminated": episode.terminated,
            "tools": episode.available_tools(),
        }
    )


@router.get("/healthz")
async def healthz(request: Request):
    return {"status": "healthy", **_engine(request).stats()}
