"""The service's own API: episodes as resources under /v1, typed bodies, HTTP statuses.

    POST /v1/episodes  ·  POST /v1/episodes/{id}/steps  ·  GET .../evaluation
    DELETE /v1/episodes/{id}  ·  /v1/tasks, /v1/profile, /v1/stats, /v1/whoami, /healthz

No model's text format is involved: clients render and parse in their model's format
(seal.formats), so an episode played to its end costs k + 1 requests. The bodies are
seal.service_contract's. Each route, its answer and its errors: docs/service.md, "The
native API's routes".
"""

from __future__ import annotations

import math
import os

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from env_service import connections
from env_service.connections import CLIENT_GONE
from env_service.engine import EnvEngine
from env_service.errors import ForbiddenError, NotFoundError
from env_service.json_body import SafeJsonRoute
from env_service.statuses import errors
from seal.bfcl.calls import CallParseError, ToolCall, checked_call
from seal.bfcl.multi_turn import UnknownTaskError
from seal.bfcl.tasks import load_task
from seal.service_contract import (
    AssistantCall,
    CreateEpisode,
    EpisodeCreated,
    Evaluation,
    StepRequest,
    StepResult,
)


class EpisodeStatus(BaseModel):
    episode_id: str
    task_id: str
    mode: str
    turn: int
    num_turns: int
    terminated: bool
    steps: int


class TaskInfo(BaseModel):
    task_id: str
    category: str
    num_turns: int
    involved_classes: list[str]
    tools: list[str]
    held_out: dict[int, list[str]]


MAX_PROFILE_TAGS = 64
"""A profile lists at most this many tags (the trainer's lists at most profile_top_k of
the 5 failure tags); the body is size-limited too (max_profile_bytes)."""


class ProfileTag(BaseModel):
    """One entry of a failure profile (seal.tocf.state: the profile's format)."""

    model_config = ConfigDict(extra="forbid")
    tag: str = Field(max_length=64)
    share: float | None = Field(None, ge=0.0, le=1.0)
    count: int | None = Field(None, ge=0)
    mean_reward: float | None = None

    @field_validator("mean_reward")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class FailureProfile(BaseModel):
    """The trainer's failure profile (seal.tocf.state's format): checked entry by entry,
    so a malformed one is refused (422) instead of breaking every guided create."""

    model_config = ConfigDict(extra="forbid")
    step: int | None = None
    epoch: int | None = None
    num_turns: int | None = Field(None, ge=0)
    tags: list[ProfileTag] = Field(default_factory=list, max_length=MAX_PROFILE_TAGS)


class ProfileState(BaseModel):
    profile: dict | None
    """The profile guided episodes get now."""
    source: str | None
    """`pushed` (PUT /v1/profile), `file` (--capability-state) or None."""
    warning: str | None = None
    """Why the capability-state file is not being read (the last good profile is kept)."""


class Identity(BaseModel):
    service: str
    version: str
    pid: int
    settings: dict[str, object]
    """The service's settings (ServiceConfig, its token left out): a run records them and
    a resume compares them (seal/launch/resume.py)."""


def _parsed(call: AssistantCall) -> ToolCall | CallParseError:
    if call.error is not None:
        return CallParseError(raw="", reason=call.error)
    return checked_call(call.name, call.arguments)


def engine_of(request: Request) -> EnvEngine:
    return request.app.state.engine


def json_reply(model: BaseModel, status: int = 200) -> Response:
    # pydantic's own JSON encoder: FastAPI's generic response path re-encodes the model
    # through jsonable_encoder, which cost more than the episode work on 20-30 KB prompts.
    return Response(model.model_dump_json(), status, media_type="application/json")


router = APIRouter(prefix="/v1", tags=["episodes"], route_class=SafeJsonRoute)
health_router = APIRouter(tags=["service"])
"""`/healthz`, outside /v1: load balancers and the original release's clients ask it."""


def _created(episode_id: str, ep) -> EpisodeCreated:
    return EpisodeCreated(
        episode_id=episode_id,
        task_id=ep.task.task_id,
        category=ep.task.category,
        num_turns=ep.task.num_turns,
        system=ep.system,
        tools=ep.tools,
        messages=ep.first_messages,
        interface=ep.interface,
        system_from_task=ep.system_from_task,
    )


def _result(outcome) -> StepResult:
    return StepResult(
        seq=outcome.seq,
        messages=outcome.messages,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        reward=outcome.reward,
        turn=outcome.turn,
        evaluation=outcome.evaluation,
    )


async def create(
    engine: EnvEngine, body: CreateEpisode, request: Request | None = None
) -> EpisodeCreated:
    """A create request's work and reply (the route's, with its `request`; tests call it
    in process)."""
    episode_id, episode = await engine.acreate(body.task_id, body.settings, body.episode_id)
    try:
        created = _created(episode_id, episode)
    except Exception:
        engine.discard(episode_id, episode)
        raise
    await close_if_client_left(engine, request, episode_id, episode)
    return created


async def close_if_client_left(engine: EnvEngine, request: Request | None, episode_id, episode):
    """Close a new episode whose client closed its connection before the reply: no one
    learnt its id, so no one would step or close it (it would hold a live slot until
    its TTL). A client that retries creates it again."""
    if request is None:
        return
    gone = request.scope.get("extensions", {}).get(CLIENT_GONE)
    if (gone is not None and gone()) or await request.is_disconnected():
        engine.discard(episode_id, episode)


async def step(engine: EnvEngine, episode_id: str, body: StepRequest) -> StepResult:
    """A step request's work and reply (the route's; tests call it in process)."""
    calls = [_parsed(call) for call in body.tool_calls]
    outcome = await engine.astep(episode_id, body.content, body.seq, close_at_end=True, calls=calls)
    return _result(outcome)


@router.post(
    "/episodes",
    status_code=201,
    response_model=EpisodeCreated,
    responses=errors(404, 409, 413, 422, 503),
)
async def create_episode(body: CreateEpisode, request: Request):
    return json_reply(await create(engine_of(request), body, request), 201)


@router.post(
    "/episodes/{episode_id}/steps",
    response_model=StepResult,
    responses=errors(404, 409, 413, 422, 507),
)
async def step_episode(episode_id: str, body: StepRequest, request: Request):
    return json_reply(await step(engine_of(request), episode_id, body))


@router.get(
    "/episodes/{episode_id}/evaluation", response_model=Evaluation, responses=errors(404, 507)
)
async def evaluate_episode(episode_id: str, request: Request):
    return json_reply(Evaluation(**await engine_of(request).aevaluate(episode_id)))


@router.get("/episodes/{episode_id}", response_model=EpisodeStatus, responses=errors(404))
async def episode_status(episode_id: str, request: Request):
    ep = engine_of(request).get(episode_id)
    return EpisodeStatus(
        episode_id=episode_id,
        task_id=ep.task.task_id,
        mode=ep.settings.mode,
        turn=ep.turn,
        num_turns=ep.task.num_turns,
        terminated=ep.terminated,
        steps=ep.counters.steps,
    )


@router.delete(
    "/episodes/{episode_id}",
    status_code=204,
    responses={
        200: {"model": Evaluation, "description": "Released, with ?evaluate=true"},
        **errors(404, 422, 507),
    },
)
async def close_episode(episode_id: str, request: Request, evaluate: bool = False):
    engine = engine_of(request)
    evaluation = await engine.aevaluate(episode_id) if evaluate else None
    engine.close(episode_id)
    if evaluation is None:
        return Response(status_code=204)
    return json_reply(Evaluation(**evaluation))


@router.get("/tasks/{task_id}", response_model=TaskInfo, tags=["tasks"], responses=errors(404))
async def task_info(task_id: str, request: Request):
    try:
        task = load_task(task_id)
    except UnknownTaskError as e:
        raise NotFoundError(str(e)) from None
    return TaskInfo(
        task_id=task.task_id,
        category=task.category,
        num_turns=task.num_turns,
        involved_classes=task.involved_classes,
        tools=[d["name"] for d in task.tools],
        held_out={t: [d["name"] for d in docs] for t, docs in task.held_out.items()},
    )


@router.put("/profile", tags=["profile"], responses=errors(413, 422))
async def put_profile(body: FailureProfile, request: Request):
    engine_of(request).profiles.push(body.model_dump(exclude_none=True))
    return {"ok": True}


@router.get("/profile", tags=["profile"], response_model=ProfileState, responses=errors())
async def get_profile(request: Request):
    engine = engine_of(request)
    profile = engine.profiles.profile()
    return ProfileState(
        profile=profile, source=engine.profiles.source(), warning=engine.profiles.warning
    )


@router.get("/stats", tags=["service"], responses=errors())
async def stats(request: Request):
    return {**engine_of(request).stats(), **connections.stats()}


@router.get(
    "/whoami",
    tags=["service"],
    response_model=Identity,
    responses=errors(403),
    summary="Prove this is the caller's service: 200 only with its token",
)
async def whoami(request: Request):
    """A cheap authenticated request: a launcher that finds a service on its port asks
    this with its run's token before using it (the token check happens before any route;
    a service started without a token answers 403, as it cannot prove whose it is). The
    answer carries the service's settings, which the run records."""
    config = engine_of(request).config
    if config.token is None:
        raise ForbiddenError(
            "this service was started without a token: it cannot prove whose it is"
        )
    settings = config.model_dump(mode="json", exclude={"token"})
    return Identity(
        service="seal-bfcl-env", version=request.app.version, pid=os.getpid(), settings=settings
    )


@health_router.head("/healthz", include_in_schema=False)  # load balancers and curl -I ask HEAD
@health_router.get("/healthz", summary="Liveness and counts; the one route open without the token")
async def healthz(request: Request):
    return {"status": "healthy", **engine_of(request).stats()}
