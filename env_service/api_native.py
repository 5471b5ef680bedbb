"""The service's own API: episodes as resources under /v1, typed bodies, HTTP statuses.

    POST   /v1/episodes                    create (201)       -> EpisodeCreated: the system
                                           prompt's sections, the tool docs, the first
                                           question, as data
    POST   /v1/episodes/{id}/steps         one assistant turn (its text and the calls the
                                           client parsed from it) -> StepResult (tool
                                           results or the next question); the step that
                                           ends the episode carries its Evaluation and
                                           releases it
    GET    /v1/episodes/{id}/evaluation    verify + diagnose  -> Evaluation
    DELETE /v1/episodes/{id}               release (204); ?evaluate=true: 200 + Evaluation
    GET    /v1/episodes/{id}               status             -> EpisodeStatus
    GET    /v1/tasks/{task_id}             task summary       -> TaskInfo
    PUT    /v1/profile  / GET /v1/profile  failure profile for diagnostic guidelines
    GET    /v1/stats                       live episodes and totals

No model's text format is involved: clients render and parse in their model's format
(seal.formats). An episode played to its end therefore costs k + 1 requests (create and k steps); one
the client stops early (its context is full) one more, the evaluating DELETE. The bodies
are defined once, in seal.rollout.protocol, for the service and its clients.

Errors are `{"detail": message}` with 404 (unknown task or episode), 409 (episode id in
use, step after the end or out of sequence), 413 (message too large), 422 (malformed
body), 503 (busy).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from env_service.engine import EnvEngine, NotFoundError
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.tasks import UnknownTaskError, load_task
from seal.rollout.protocol import (
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


class FailureProfile(BaseModel):
    """The trainer's failure profile (seal.tocf.profile); extra keys are kept."""

    model_config = {"extra": "allow"}
    tags: list[dict] = Field(default_factory=list)


def _parsed(call: AssistantCall) -> ToolCall | CallParseError:
    if call.error is not None:
        return CallParseError(raw="", reason=call.error)
    return ToolCall(name=call.name, kwargs=call.arguments)


def engine_of(request: Request) -> EnvEngine:
    return request.app.state.engine


def json_reply(model: BaseModel, status: int = 200) -> Response:
    # pydantic's own JSON encoder: FastAPI's generic response path re-encodes the model
    # through jsonable_encoder, which cost more than the episode work on 20-30 KB prompts.
    return Response(model.model_dump_json(), status, media_type="application/json")


router = APIRouter(prefix="/v1", tags=["episodes"])


def create(engine: EnvEngine, body: CreateEpisode) -> EpisodeCreated:
    """A create request's work and reply (also used in-process by tests)."""
    episode_id, ep = engine.create(body.task_id, body.settings, body.episode_id)
    return EpisodeCreated(
        episode_id=episode_id,
        task_id=ep.task.task_id,
        category=ep.task.category,
        num_turns=ep.task.num_turns,
        system=ep.system,
        tools=ep.tools,
        messages=ep.first_messages,
    )


def step(engine: EnvEngine, episode_id: str, body: StepRequest) -> StepResult:
    """A step request's work and reply (also used in-process by tests)."""
    calls = [_parsed(call) for call in body.tool_calls]
    outcome = engine.step(episode_id, body.content, body.seq, release_at_end=True, calls=calls)
    return StepResult(
        seq=outcome.seq,
        messages=outcome.messages,
        terminated=outcome.terminated,
        truncated=outcome.truncated,
        reward=outcome.reward,
        turn=outcome.turn,
        evaluation=outcome.evaluation,
    )


@router.post("/episodes", status_code=201, response_model=EpisodeCreated)
async def create_episode(body: CreateEpisode, request: Request):
    return json_reply(create(engine_of(request), body), 201)


@router.post("/episodes/{episode_id}/steps", response_model=StepResult)
async def step_episode(episode_id: str, body: StepRequest, request: Request):
    return json_reply(step(engine_of(request), episode_id, body))


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


@router.delete(
    "/episodes/{episode_id}",
    status_code=204,
    responses={200: {"model": Evaluation, "description": "Released, with ?evaluate=true"}},
)
async def release_episode(episode_id: str, request: Request, evaluate: bool = False):
    engine = engine_of(request)
    report = engine.get(episode_id).report() if evaluate else None
    engine.release(episode_id)
    if report is None:
        return Response(status_code=204)
    return json_reply(Evaluation(**report))


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
