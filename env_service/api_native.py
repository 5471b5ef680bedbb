"""The service's own API: episodes as resources under /v1, typed bodies, HTTP statuses.

    POST   /v1/episodes                    create (201)       -> EpisodeCreated
    POST   /v1/episodes/{id}/steps         one assistant turn -> StepResult
    GET    /v1/episodes/{id}/evaluation    verify + diagnose  -> Evaluation
    DELETE /v1/episodes/{id}               release (204)
    GET    /v1/episodes/{id}               status             -> EpisodeStatus
    GET    /v1/tasks/{task_id}             task summary       -> TaskInfo
    PUT    /v1/profile  / GET /v1/profile  failure profile for diagnostic guidelines
    GET    /v1/stats                       live episodes and totals

Errors are `{"detail": message}` with 404 (unknown task or episode), 409 (episode id in
use, step after the end), 413 (message too large), 422 (malformed body), 503 (busy).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from env_service.engine import EnvEngine, NotFoundError
from env_service.episode import EpisodeSettings
from seal.bfcl.tasks import UnknownTaskError, load_task


class CreateEpisode(BaseModel):
    task_id: str
    episode_id: str | None = Field(None, description="Client-chosen id; generated if absent.")
    settings: EpisodeSettings = Field(default_factory=EpisodeSettings)


class Message(BaseModel):
    role: str
    content: str


class EpisodeCreated(BaseModel):
    episode_id: str
    task_id: str
    category: str
    num_turns: int
    messages: list[Message]


class StepRequest(BaseModel):
    content: str = Field(description="The raw assistant text, tool-call blocks included.")


class StepResult(BaseModel):
    messages: list[Message]
    terminated: bool
    truncated: bool
    reward: float
    turn: int


class Evaluation(BaseModel):
    accuracy: int
    reward: float
    progress: float
    failure_tags: list[str]
    tag_notes: list[str]
    num_turns: int
    turns_reached: int
    terminated: bool
    truncated: bool
    steps: int
    tool_calls: int
    invalid_calls: int
    invalid_by_kind: dict[str, int]
    tool_errors: int
    task_id: str
    category: str


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


class FailureProfile(BaseModel):
    """The trainer's failure profile (seal.tocf.profile); extra keys are kept."""

    model_config = {"extra": "allow"}
    tags: list[dict] = Field(default_factory=list)


def engine_of(request: Request) -> EnvEngine:
    return request.app.state.engine


router = APIRouter(prefix="/v1", tags=["episodes"])


@router.post("/episodes", status_code=201, response_model=EpisodeCreated)
async def create_episode(body: CreateEpisode, request: Request):
    episode_id, ep = engine_of(request).create(body.task_id, body.settings, body.episode_id)
    return EpisodeCreated(
        episode_id=episode_id,
        task_id=ep.task.task_id,
        category=ep.task.category,
        num_turns=ep.task.num_turns,
        messages=ep.initial_messages,
    )


@router.post("/episodes/{episode_id}/steps", response_model=StepResult)
async def step_episode(episode_id: str, body: StepRequest, request: Request):
    engine = engine_of(request)
    outcome = engine.step(episode_id, body.content)
    return StepResult(
        messages=outcome.messages,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        reward=outcome.reward,
        turn=engine.get(episode_id).turn,
    )


@router.get("/episodes/{episode_id}/evaluation", response_model=Evaluation)
async def evaluate_episode(episode_id: str, request: Request):
    return engine_of(request).get(episode_id).report()


@router.get("/episodes/{episode_id}", response_model=EpisodeStatus)
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


@router.delete("/episodes/{episode_id}", status_code=204)
async def release_episode(episode_id: str, request: Request):
    engine_of(request).release(episode_id)
    return Response(status_code=204)


@router.get("/tasks/{task_id}", response_model=TaskInfo, tags=["tasks"])
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


@router.put("/profile", tags=["profile"])
async def put_profile(body: FailureProfile, request: Request):
    engine_of(request).set_profile(body.model_dump())
    return {"ok": True}


@router.get("/profile", tags=["profile"])
async def get_profile(request: Request):
    return {"profile": engine_of(request).profile()}


@router.get("/stats", tags=["service"])
async def stats(request: Request):
    return engine_of(request).stats()
