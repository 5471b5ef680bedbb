"""bfcl-eval's own multi-turn harness against a served model: the second evaluation path.

What `bfcl generate` then `bfcl evaluate` do for a local model (the original release's
scripts/test/run_bfcl_multiturn_eval.sh), through bfcl-eval's functions: its handler for
the model renders prompts and decodes replies, `inference_multi_turn_prompting` plays the
task, its executor runs the calls and `multi_turn_checker` gives the verdict on the replies
decoded by its eval runner's rules (`check_entry`). What differs from a `bfcl` run (each
task as in a fresh BFCL process, unsafe calls refused, the step counter) and why:
docs/evaluation.md, "bfcl-eval's own harness".
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import openai
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import is_empty_execute_response
from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry
from transformers import AutoConfig, AutoTokenizer

from seal.bfcl.official_executor import backend_methods, fresh_backends, unsafe_call
from seal.bfcl.tasks import category_of
from seal.formats.bfcl_handlers import handler_class, registry_entry
from seal.runs.records import ValidationRecord

HARNESS = "bfcl-eval 2026.3.23"
RELEASE_TEMPERATURE = 0.001
"""The release's harness script's temperature (bfcl generate's default)."""
INFERENCE = "seal_harness"
"""The executor's namespace of the model's calls during inference (bfcl: the model name)."""
CHECK = "seal_harness_check"
"""The checker's namespace (bfcl: the registry name; the checker adds `_eval`)."""


@dataclass(frozen=True)
class Endpoint:
    base_url: str
    """The API root, up to /v1 (requests go to BASE_URL/completions)."""
    model: str
    """The name the server serves the model under."""
    tokenizer_dir: Path
    """A directory with the model's config.json and tokenizer: the handler takes the
    context length from the one and counts prompt tokens with the other, as bfcl does
    from `--local-model-path`."""
    api_key: str | None = None
    timeout_s: float = 600.0
    attempts: int = 3
    max_tokens: int | None = None
    """A cap on each request's max_tokens below the handler's min(4096, context - prompt
    - 2), for smoke tests; None: bfcl's own rule."""


class CompletionsClient:
    """The handler's client (`client.completions.create`): the endpoint's, with the cap
    and the timeout of `Endpoint` in place of bfcl's 72,000 s."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.client = openai.OpenAI(
            base_url=endpoint.base_url,
            api_key=endpoint.api_key or "EMPTY",
            max_retries=endpoint.attempts - 1,
        )
        self.completions = self

    def create(self, **request):
        if self.endpoint.max_tokens is not None:
            request["max_tokens"] = min(request["max_tokens"], self.endpoint.max_tokens)
        request["timeout"] = self.endpoint.timeout_s
        return self.client.completions.create(**request)


def served_handler(bfcl_model: str, endpoint: Endpoint, temperature: float):
    """bfcl-eval's handler for `bfcl_model` (a key of its local-inference map), built as
    `bfcl generate` builds it, sending to `endpoint`, its decoded calls checked by
    `unsafe_call`. What its `spin_up_local_server(skip_server_setup=True)` sets is set here
    from `endpoint.tokenizer_dir`, without its wait for the server (unbounded there)."""
    entry = registry_entry(bfcl_model)
    handler = _guarded(handler_class(entry))(
        model_name=entry.model_name,
        temperature=temperature,
        registry_name=entry.registry_name,
        is_fc_model=entry.is_fc_model,
    )
    handler.client = CompletionsClient(endpoint)
    handler.model_path_or_id = endpoint.model
    handler.tokenizer = AutoTokenizer.from_pretrained(endpoint.tokenizer_dir)
    config = AutoConfig.from_pretrained(endpoint.tokenizer_dir)
    handler.max_context_length = getattr(config, "max_position_embeddings", None) or (
        handler.tokenizer.model_max_length
    )
    handler.model_name_underline_replaced = INFERENCE
    return handler


class UnsafeCallError(ValueError):
    """A decoded call bfcl-eval's executor would run as Python (`unsafe_call`)."""


def _guarded(cls: type) -> type:
    """`cls` with its decoded calls checked by `unsafe_call`: an unsafe call raises, which
    bfcl's loop takes as a reply it cannot decode (it ends the turn), and is kept in
    `refused`. Per task, `methods` is set to the task's backend methods."""

    def decode_execute(self, result, has_tool_call_tag):
        calls = cls.decode_execute(self, result, has_tool_call_tag)
        for call in calls:
            if (reason := unsafe_call(call, self.methods)) is not None:
                self.refused.append(call)
                raise UnsafeCallError(f"refused {call!r}: {reason}")
        return calls

    # bfcl's handlers enforce the `overrides` package's @override marker on an overriding
    # method; its decorator cannot find the base of a class made at run time, so the
    # marker is set as the decorator sets it.
    decode_execute.__override__ = True
    members = {"decode_execute": decode_execute, "methods": frozenset(), "refused": []}
    return type(cls.__name__, (cls,), members)


def load_entries(task_ids: list[str]) -> dict[str, tuple[dict, list]]:
    """{task id: (bfcl's test entry, its ground truth)}, loaded as `bfcl generate` and
    `bfcl evaluate` load them (docs with their language hint for generation)."""
    out = {}
    for category in sorted({category_of(t) for t in task_ids}):
        answers = {a["id"]: a["ground_truth"] for a in load_ground_truth_entry(category)}
        for entry in load_dataset_entry(category):
            if entry["id"] in task_ids:
                out[entry["id"]] = (entry, answers[entry["id"]])
    missing = [t for t in task_ids if t not in out]
    if missing:
        raise ValueError(f"bfcl-eval has no multi-turn task {', '.join(missing[:5])}")
    return out


@dataclass
class TaskOutcome:
    task_id: str
    valid: bool
    error_type: str | None
    """bfcl's checker's error type of a failed task (e.g. multi_turn:force_terminated)."""
    responses: list
    """bfcl's result: per turn, per step, the raw reply."""
    first_prompt: str
    generations: int
    refused_calls: list[str] = field(default_factory=list)
    inference_error: str | None = None
    """The server refused a request (HTTP 400, e.g. a prompt past its context): bfcl
    records the error as the task's result, which fails it."""


def run_task(handler, entry: dict, ground_truth: list) -> TaskOutcome:
    """Play and check one task as `bfcl generate` and `bfcl evaluate` do, in a fresh
    executor state; a server error other than a refused request (HTTP 400) is raised."""
    classes = entry["involved_classes"]
    handler.methods, handler.refused = backend_methods(classes), []
    inference_error = None
    with fresh_backends([INFERENCE, CHECK], classes):
        try:
            result, metadata = handler.inference(
                copy.deepcopy(entry), include_input_log=True, exclude_state_log=True
            )
        except openai.BadRequestError as error:
            # bfcl's generate writes this string as the task's result (then evaluated).
            result, metadata = f"Error during inference: {error}", {}
            inference_error = str(error)
        refused = list(handler.refused)
        valid, error_type = check_entry(handler, result, ground_truth, copy.deepcopy(entry))
    prompts = [
        step["content"]["formatted_prompt"]
        for turn in metadata.get("inference_log", [])
        if isinstance(turn, dict)
        for key, steps in turn.items()
        if key.startswith("step_")
        for step in steps
        if step.get("role") == "inference_input"
    ]
    return TaskOutcome(
        task_id=entry["id"],
        valid=valid,
        error_type=error_type,
        responses=result if isinstance(result, list) else [],
        first_prompt=prompts[0] if prompts else "",
        generations=len(prompts),
        refused_calls=refused,
        inference_error=inference_error,
    )


def check_entry(handler, result, ground_truth: list, entry: dict) -> tuple[bool, str | None]:
    """(valid, bfcl's error type) of one task's inference result, by bfcl-eval's eval
    runner's rules for a multi-turn entry: a result that is no list (an inference error)
    and one with fewer turns than the ground truth (forced to quit) fail; each reply is
    decoded with the handler, a reply that does not decode or decodes to no call is left
    out; then `multi_turn_checker`."""
    if not isinstance(result, list):
        return False, "multi_turn:inference_error"
    if len(result) != len(ground_truth):
        return False, "multi_turn:force_terminated"
    decoded = []
    for turn in result:
        steps = []
        for reply in turn:
            try:
                calls = handler.decode_execute(reply, has_tool_call_tag=False)
            except Exception:  # bfcl's runner skips what does not decode, whatever raised
                continue
            if not is_empty_execute_response(calls):
                steps.append(calls)
        decoded.append(steps)
    verdict = multi_turn_checker(decoded, ground_truth, entry, category_of(entry["id"]), CHECK)
    return bool(verdict["valid"]), None if verdict["valid"] else verdict.get("error_type")


def harness_record(outcome: TaskOutcome, step: int, extra: dict) -> ValidationRecord:
    """The outcome as a validation record (seal/runs/records.py), as seal-eval's are: no
    failure tags (bfcl's checker gives none); its error type, refused calls and inference
    error in `extra`."""
    return ValidationRecord(
        task_id=outcome.task_id,
        data_source=category_of(outcome.task_id),
        score=int(outcome.valid),
        reward=float(outcome.valid),
        step=step,
        input=outcome.first_prompt,
        output=json.dumps(outcome.responses),
        failure_tags=[],
        turns=outcome.generations,
        extra={
            **extra,
            "bfcl_error_type": outcome.error_type,
            "refused_calls": outcome.refused_calls,
            "inference_error": outcome.inference_error,
        },
    )
