"""The AgentEvolver/SEAL wire protocol, so clients of the original release work unchanged.

    POST /create  /step  /evaluate  /release  /get_info  /get_env_profile     GET /healthz

(`GET /healthz` is the native API's route, env_service/api_native.py; its errors are in
this protocol's envelope while the protocol is served.)

Every POST body is `{env_type, task_id, instance_id, messages, params}` and every reply
`{success, data}` (plus `error` on failure). The release's answers, as its trainer
(`agentevolver/client/env_client.py`, `env_manager/env_worker.py`, `agent_flow/agent_flow.py`,
`task_manager/rewards/bfcl_dense_env_grader.py`) sends and reads them:

    /create     data: {state: [system, user], reward, is_terminated, info}; `task_id` is a
                BFCL id or a number, the release's row number (compat.resolve_task_id);
                info: instance_id, task_id (as sent), test_id (the BFCL id), tools_count,
                questions_count, observation_lite (schema cues on?), category, num_turns,
                ignored_params (keys not understood: a typo shows here)
    /step       data: {state: [one message], reward, is_terminated, info}; each message is
                {role, content, tool_calls: []}; after the last turn the one message is
                {role: user, content: "[CONVERSATION_COMPLETED]"}
    /evaluate   params.sparse: false (the default) -> the full report: ours (accuracy as a
                float, reward, progress, failure_tags, counters...) plus the release's
                completed, bfcl_progress, bfcl_progress_with_irrelevance, bfcl_progress_info
                {failure_tags, passed_turns, scorable_turns, passed_irrelevance_turns,
                irrelevance_turns, per_turn_valid, irrelevance_per_turn, terminated_early}
                (meaning: compat.evaluation); sparse: true -> accuracy as a float
    /release    {success: true, data: null}; an unknown or expired id: HTTP 200 with
                success false (the release's worker releases inside its error handler)
    /get_info   data: "Available tools:\\n- name\\n..." (the tools available at this turn)
    /get_env_profile  params.split: train (default) | val | test | eval -> list of task ids

`/create` params. The release's keys (its `env_service.bfcl` config block):

    rollout_mode          sample | validate (also validation, val, test)       default sample
    observation_lite      {enable, apply_to_validation, categories, add_required_hint,
                          add_type_hint, add_enum_hint, hide_optional, instruction}: schema
                          cues, train-only unless apply_to_validation
    diagnostic_evolution  {enable, apply_to_validation, categories, prevalence_threshold,
                          reward_threshold, min_tag_count, max_lines, category_tags,
                          guidelines}: guidelines from the service's failure profile (PUT
                          /v1/profile, or the operator's --capability-state file); when
                          that file is the original release's capability state, with the
                          release's selection and these thresholds (state.py).
                          `state_path` is refused (422 naming --capability-state): no
                          request names a file the service reads
    tool_feedback_evolution {enable, apply_to_validation, categories}: recovery feedback
    tool_prompt_mode, tool_call_parser, tool_result_mode, reject_tool_call_with_content:
                          the text the episode speaks (env_service/wire_text.py), as a
                          whole: bfcl_qwen_fc, xml_json, bfcl_tool_response, false (the
                          release's defaults: the paper's Qwen2.5 prompt) or all three
                          toolace_official_prompt with true (its ToolACE runs' mode:
                          call lists, results as `ipython` messages); others refused
    terminate_on_parse_error  a malformed call ends the episode (EpisodeSettings
                          .end_on_malformed_call): the step answers is_terminated with
                          "[CONVERSATION_COMPLETED]" and info.ended_on_malformed_call;
                          the evaluation is not `completed`               default false
    is_open_query, strict_tool_parser, enforce_available_tools, ...: accepted at the
                          value this service implements, refused otherwise

and this service's flat keys:

    observation_lite      (a bool) schema cues; schema_cues is the same   default false
    type_hints            type hints in the cues                          default false
    recovery_feedback     recovery hints on invalid calls / tool errors   default false
    diagnostic_guidelines guidelines from the failure profile             default false
    max_guidelines        at most this many guidelines                    default 3
    evolve_in_validation  keep the flat-key layers on in validate mode    default false
    max_steps             assistant messages before the service ends the
                          episode (EpisodeLimits.max_generations)         default 20
    partial_credit_cap    0 = binary reward (paper); see RewardSettings   default 0
    partial_credit_weight weight of progress under the cap                default 1
    prompt                paper (the release's text, byte for byte) | rich (this
                          project's richer prompt; not with the ToolACE mode) default paper

A release key this service cannot honour is refused (422) with the reason, never dropped:
observation_lite add_required_hint=false, add_enum_hint=false, hide_optional=true or an
instruction (the cues always mark required parameters, surface allowed values and add a
fixed note); diagnostic_evolution.guidelines (custom texts);
tool_feedback_evolution.max_tool_names; data_path and answer_path; any other value of
the fixed keys above. Unknown keys are not an error (clients send their own) but are
echoed in `info.ignored_params`.

Where this service differs from the release on purpose (the release is wrong there):
- Errors answer 4xx with {success: false, data: null, error} where the release answers
  400/500 with a traceback in `detail` (its clients raise on any non-2xx alike): 404 for
  an unknown task or episode, 409 for a reused instance id (the release silently replaces
  the live episode) or a step after the end, 422 for bad params (see above).
- `/get_info` lists the tool names; the release's list reads `- unknown` for every tool
  (it looks for a `function` key BFCL's docs do not have) and never shows tools
  revealed later (miss_func).
- `/get_env_profile` serves the paper's split (data/seal_split.json, the same ids as the
  release's parquet files); the release serves data/bfcl_400_split.json, which shares only
  206 of 400 train ids with them, and has no `val` split, which its trainer asks for.
- diagnostic_evolution.state_path is refused: the release read whatever file a request
  named (its operator gives the file with --capability-state here).
- diagnostic_evolution with a state file: a tag's mean reward is computed from the file
  (the release reads a `reward_mean` its file never holds, so no tag ever counts as
  solved), and zero thresholds or max_lines mean zero (the release replaces them with its
  defaults).
- strict_tool_parser under `prompt: rich`: each malformed `<tool_call>` block is answered
  with its error and the valid blocks of the same message still run; the release (and
  `prompt: paper`) rejects every call of a message with one malformed block.
- The texts are the release's (`prompt: paper`, docs/paper_prompt.md) except the
  recovery hints, which have this service's wording; `prompt: rich` gives this service's
  richer texts throughout (evolution.py). Which layer is on when follows the release.
- `/get_env_profile` is also served at `//get_env_profile`, the path the release's trainer
  client actually requests (it prefixes "/" to "/get_env_profile"; the release's own
  service answers that path 404).
- `/healthz` answers JSON with the live-episode counts (the release: the text "OK").
- `/evaluate` refuses a `sparse` that is not true or false (the release takes any value's
  truthiness).
- A step that runs over the service's time budget ends the episode (`is_terminated`, and
  `info.aborted: "step_time_budget"`); its evaluation carries `aborted` and is a failure
  (`completed` false). The release has no such budget: one costly message stalled it.
- Every error, also a refused token (401), an oversized body (413) or a service bug
  (500), is this envelope; the release answered some of them as plain text.
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, Field

from env_service import errors
from env_service.api_native import release_if_client_left
from env_service.engine import EnvEngine, check_id
from env_service.errors import EngineError, InvalidRequestError, NotFoundError
from env_service.json_body import SafeJsonRoute
from env_service.release import compat
from env_service.statuses import wire_errors
from seal.bfcl.agentic import is_agentic
from seal.bfcl.multi_turn import UnknownTaskError
from seal.bfcl.tasks import load_task

ENV_TYPE = "bfcl"


class WireRequest(BaseModel):
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


router = APIRouter(tags=["wire protocol (AgentEvolver/SEAL)"], route_class=SafeJsonRoute)


def _engine(request: Request) -> EnvEngine:
    return request.app.state.engine


def _check_env_type(body: WireRequest) -> None:
    if body.env_type != ENV_TYPE:
        raise EngineError(f"env_type {body.env_type!r} is not served here (only {ENV_TYPE!r})")


@router.post("/create", responses=wire_errors(400, 404, 409, 413, 422, 503))
async def create(body: WireRequest, request: Request):
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
            f"{task.task_id}: the wire protocol serves the BFCL V3 multi-turn tasks; "
            "BFCL V4 agentic tasks are on the native API (/v1)"
        )
    create_params = compat.translate_params(body.params, task.category, engine.release_state)
    instance_id, ep = await engine.acreate(
        task.task_id, create_params.settings, body.instance_id, create_params.profile
    )
    try:
        ep.speak(create_params.wire)
        reply = _created(instance_id, ep, asked, task, create_params)
    except Exception:
        engine.discard(instance_id, ep)  # no client learnt of it: nothing is left live
        raise
    await release_if_client_left(engine, request, instance_id, ep)
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


@router.post("/step", responses=wire_errors(404, 409, 413, 422, 507))
async def step(body: WireRequest, request: Request):
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
            "state": compat.step_state(episode.wire_messages(outcome.messages), outcome.terminated),
            "reward": outcome.reward,
            "is_terminated": outcome.terminated,
            "info": info,
        }
    )


@router.post("/evaluate", responses=wire_errors(404, 413, 422, 507))
async def evaluate(body: WireRequest, request: Request):
    instance_id = _require(body.instance_id, "instance_id")
    episode = _engine(request).get(instance_id)
    sparse = body.params.get("sparse", False)
    if not isinstance(sparse, bool):
        raise InvalidRequestError(f"params.sparse must be true or false, not {sparse!r}")
    report = await _engine(request).areport(instance_id)
    if sparse:
        return ok(float(report["accuracy"]))
    if episode.agentic is not None:
        # A BFCL V4 episode (made on the native API): its own report; the release's
        # progress fields are per multi-turn ground-truth turn, which it has none of.
        return ok(report)
    return ok(compat.evaluation(report, episode.task.ground_truth))


@router.post("/release", responses=wire_errors(413, 422))
async def release(body: WireRequest, request: Request):
    instance_id = _require(body.instance_id, "instance_id")
    try:
        _engine(request).release(instance_id)
    except NotFoundError as e:
        # The release answers 200 here; its worker also releases after a failed episode,
        # and an HTTP error there would mask the failure it is handling.
        return errors.reply(str(e), 200, wire=True)
    return ok(None)


@router.post("/get_info", responses=wire_errors(404, 413, 422))
async def get_info(body: WireRequest, request: Request):
    episode = _engine(request).get(_require(body.instance_id, "instance_id"))
    tools = episode.task.tools_until(episode.turn)
    return ok(compat.tools_info([d["name"] for d in tools]))


# The release's trainer client joins its base URL, "/" and "/get_env_profile": it asks for
# "//get_env_profile", which no router matches as "/get_env_profile".
@router.post("//get_env_profile", include_in_schema=False)
@router.post("/get_env_profile", responses=wire_errors(400, 404, 413, 422, 500))
async def get_env_profile(body: WireRequest):
    _check_env_type(body)
    split = body.params.get("split", "train")
    if not isinstance(split, str):
        raise InvalidRequestError(f"params.split must be a string, not {split!r}")
    return ok(compat.split_task_ids(split))


PATHS = {route.path for route in router.routes} | {"/healthz"}
"""The paths answered in this protocol's envelope, errors included: its routes, and the
native API's `GET /healthz` (env_service/api_native.py), which this protocol has too."""
