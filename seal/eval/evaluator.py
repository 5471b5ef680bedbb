"""Score any OpenAI-compatible endpoint on BFCL multi-turn tasks through the environment service.

Each task is one validate-mode episode (seal.eval.endpoint_episode), played by the one
episode loop training plays, under validation's context budget, so a score here means what
a validation score in training means. Results are validation records that `seal-report`
reads like a trainer's. The loop, the budget, the files it writes, resuming and BFCL V4
agentic order: docs/evaluation.md.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from tqdm import tqdm

from seal import commands
from seal.bfcl.agentic.tasks import prerequisite_plan
from seal.eval.chat_endpoint import ChatEndpoint, EndpointError, EndpointSettings
from seal.eval.endpoint_episode import (
    ContextBudgetError,
    Prompting,
    play_endpoint_episode,
    tokenizer_label,
)
from seal.eval.replay import record_from_evaluation
from seal.rollout.env_client import TOKEN_ENV, EnvClient, EnvServiceError
from seal.rollout.loop import StopReason
from seal.rollout.turn_tokens import TextTokens
from seal.runs.records import (
    RecordFormatError,
    ValidationRecord,
    read_step_file,
    step_file_name,
    write_step,
)
from seal.service_contract import EpisodeLimits

VALIDATION_DIRNAME = "validation"


def partial_file(out_dir: Path, step: int) -> Path:
    # "partial_" first keeps it out of the records' step_*.jsonl glob.
    return out_dir / f"partial_{step_file_name(step)}"


def errors_file(out_dir: Path, step: int) -> Path:
    return out_dir / f"errors_{step_file_name(step)}"


def prerequisites_file(out_dir: Path, step: int) -> Path:
    """The BFCL V4 memory conversations played for the step (one line each, appended)."""
    return out_dir / f"prerequisites_{step_file_name(step)}"


@dataclass(frozen=True)
class TaskFailure:
    task_id: str
    error: str


@dataclass
class EvalOutcome:
    records: dict[str, ValidationRecord]
    """Every result of the step, earlier runs' included, by task id."""
    failures: list[TaskFailure]
    """Tasks that failed in this run; they have no record."""
    skipped: int
    """Tasks not run because a record of them already existed."""
    step_file: Path | None
    """The step's record file, or None when failures kept it from being written."""


def run_settings(
    settings: EndpointSettings, limits: EpisodeLimits, tokenizer_name: str, prompting: Prompting
) -> dict:
    """What makes two records comparable; kept in each record's `extra`."""
    return {
        "model": settings.model,
        "max_generations": limits.max_generations,
        "max_tokens": limits.max_new_tokens,
        "max_context_tokens": limits.max_context_tokens,
        "max_observation_tokens": limits.max_observation_tokens,
        "context_stop": limits.context_stop,
        "tokenizer": tokenizer_name,
        "temperature": settings.temperature,
        "prompting": prompting.name,
    }


def read_partial(path: Path) -> list[ValidationRecord]:
    """Records of a partial file; a last line cut short by a crash is ignored."""
    records = []
    lines = path.read_bytes().split(b"\n")[:-1]  # what follows the last newline is unfinished
    for line_number, line in enumerate(lines, start=1):
        try:
            records.append(ValidationRecord.model_validate_json(line))
        except ValueError as error:
            raise RecordFormatError(f"{path}:{line_number}: {error}") from None
    return records


def load_done(out_dir: Path, step: int, expected: dict) -> dict[str, ValidationRecord]:
    """Records of `step` already in OUT_DIR; an error if any was made with other settings."""
    done: dict[str, ValidationRecord] = {}
    step_path = out_dir / VALIDATION_DIRNAME / step_file_name(step)
    if step_path.exists():
        done.update((r.task_id, r) for r in read_step_file(step_path))
    if partial_file(out_dir, step).exists():
        done.update((r.task_id, r) for r in read_partial(partial_file(out_dir, step)))
    for record in done.values():
        found = {key: record.extra.get(key) for key in expected}
        if record.step != step or found != expected:
            raise ValueError(
                f"{out_dir} already holds step {step} results of {record.task_id} made with "
                f"{found}, not {expected}: use another --out-dir or --step"
            )
    return done


EVALUATION_EXTRA = (
    "truncated", "tool_calls", "invalid_calls", "tool_errors", "num_turns", "turns_reached",
    "stop_reason", "length_cut", "clipped_observations", "context_tokens", "seconds",
    "answer",
)  # fmt: skip
"""Counters of an episode worth keeping beside the score."""


def episode_stats(records: Iterable[ValidationRecord]) -> dict:
    """How the budget and the endpoint cut the step's episodes: tasks per stop reason,
    replies cut at max_tokens (and in how many tasks), clipped observations; and the
    median wall time of a task (at the run's concurrency)."""
    records = list(records)
    stops = Counter(r.extra["stop_reason"] for r in records)
    return {
        "stop_reasons": {reason: stops[reason] for reason in get_args(StopReason)},
        "length_cut_replies": sum(r.extra["length_cut"] for r in records),
        "length_cut_tasks": sum(r.extra["length_cut"] > 0 for r in records),
        "clipped_observations": sum(r.extra["clipped_observations"] for r in records),
        "median_seconds": statistics.median(r.extra["seconds"] for r in records),
    }


def write_errors(out_dir: Path, step: int, failures: list[TaskFailure]) -> None:
    """This run's failures, one JSON object per line; no file when none failed."""
    path = errors_file(out_dir, step)
    if not failures:
        path.unlink(missing_ok=True)  # a stale list from an earlier run would mislead
        return
    lines = (
        json.dumps({"task_id": f.task_id, "step": step, "error": f.error}) + "\n"
        for f in sorted(failures, key=lambda f: f.task_id)
    )
    path.write_text("".join(lines), encoding="utf-8")


async def check_endpoint(chat: ChatEndpoint, limits: EpisodeLimits, completions: bool) -> None:
    """The preflight (chat_endpoint.ChatEndpoint.preflight) on the API the run uses (the
    completions API or chat), and the server's stated context against the budget."""
    entry = await chat.preflight(completions)
    context = (entry or {}).get("max_model_len")
    if isinstance(context, int) and context < limits.max_context_tokens:
        raise ContextBudgetError(
            f"{chat.settings.base_url} serves {chat.settings.model!r} with a context of "
            f"{context} tokens (max_model_len), less than the budget's {limits.max_context_tokens}: "
            f"set --max-context-tokens {context}, or serve the model with a longer context"
        )


async def run_tasks(
    settings: EndpointSettings,
    task_ids: list[str],
    on_evaluation: Callable[[dict], None],
    *,
    env_url: str,
    tokenizer,
    limits: EpisodeLimits,
    concurrency: int,
    show_progress: bool,
    prompting: Prompting,
    after: dict[str, str] | None = None,
) -> list[TaskFailure]:
    """Check the service and the endpoint, then run every task's episode, `concurrency`
    at a time, a task named in `after` only once the task it names has succeeded (else
    it fails without running); hand each evaluation to `on_evaluation` as it arrives
    and return the tasks that failed. A `ContextBudgetError` stops every episode and is
    raised."""
    failures: list[TaskFailure] = []
    gate = asyncio.Semaphore(concurrency)
    after = after or {}
    # Per task: None once it succeeded, else why it did not.
    outcome = {task_id: asyncio.get_running_loop().create_future() for task_id in task_ids}
    tokens = TextTokens(tokenizer)
    async with (
        EnvClient(env_url, max_connections=concurrency) as env,
        ChatEndpoint(settings, max_connections=concurrency) as chat,
    ):
        if not await env.healthy():
            raise EnvServiceError(
                f"no healthy environment service at {env_url}: start one "
                f"(`{commands.python()} -m env_service`, its token in ${TOKEN_ENV}) and pass "
                "its --env-url, or let seal-eval start its own with --start-env"
            )
        await check_endpoint(chat, limits, prompting.completions)
        with tqdm(
            total=len(task_ids), desc=settings.model, unit="task", disable=not show_progress
        ) as bar:

            async def one(task_id: str) -> None:
                error = "cancelled"
                try:
                    before = after.get(task_id)
                    failed = await outcome[before] if before in outcome else None
                    if failed is not None:
                        raise EnvServiceError(f"task {task_id}: not run: {before} failed")
                    async with gate:
                        evaluation = await play_endpoint_episode(
                            env, chat, tokens, task_id, limits, prompting
                        )
                        on_evaluation(evaluation)
                    error = None
                except (EndpointError, EnvServiceError) as e:
                    error = str(e)
                    failures.append(TaskFailure(task_id, error))
                    bar.set_postfix(failed=len(failures))
                finally:
                    outcome[task_id].set_result(error)
                    if error != "cancelled":
                        bar.update()

            episodes = [asyncio.ensure_future(one(task_id)) for task_id in task_ids]
            try:
                await asyncio.gather(*episodes)
            finally:
                # After a ContextBudgetError (or an interrupt) the others stop too; each
                # closes its episode on the way out.
                for episode in episodes:
                    episode.cancel()
                await asyncio.gather(*episodes, return_exceptions=True)
    return failures


async def evaluate_endpoint(
    settings: EndpointSettings,
    task_ids: list[str],
    out_dir: Path,
    *,
    env_url: str,
    tokenizer,
    limits: EpisodeLimits | None = None,
    step: int = 0,
    concurrency: int = 16,
    allow_failures: bool = False,
    show_progress: bool = True,
    prompting: Prompting | None = None,
) -> EvalOutcome:
    """Evaluate the tasks not yet done in `out_dir` under `limits` (the paper's by
    default), counting tokens with `tokenizer` (the model's) in the tool format's
    rendering; see the module doc for the files."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    limits, prompting = limits or EpisodeLimits(), prompting or Prompting()
    extra = run_settings(settings, limits, tokenizer_label(tokenizer), prompting)
    records = load_done(out_dir, step, extra)
    todo = [task_id for task_id in task_ids if task_id not in records]
    # BFCL V4 memory questions: their scenarios' conversations first, every time one of
    # the scenario's questions is to run (they fill the memory the questions ask about).
    prerequisites, after = prerequisite_plan(todo)
    failures: list[TaskFailure] = []
    if todo:

        def keep(evaluation: dict) -> None:
            if not evaluation.get("scored", True):  # a memory conversation: kept, not scored
                line = {"step": step, **{k: v for k, v in evaluation.items() if k != "input"}}
                with prerequisites_file(out_dir, step).open("a", encoding="utf-8") as log:
                    log.write(json.dumps(line, ensure_ascii=False) + "\n")
                return
            record = record_from_evaluation(evaluation, step)
            extras = {key: evaluation[key] for key in EVALUATION_EXTRA if key in evaluation}
            record = record.model_copy(update={"extra": {**extras, **extra}})
            records[record.task_id] = record
            # One line per task, flushed: a crash loses at most the tasks in flight.
            with partial_file(out_dir, step).open("a", encoding="utf-8") as partial:
                partial.write(record.model_dump_json() + "\n")

        failures = await run_tasks(
            settings,
            prerequisites + todo,
            keep,
            env_url=env_url,
            tokenizer=tokenizer,
            limits=limits,
            concurrency=concurrency,
            show_progress=show_progress,
            prompting=prompting,
            after=after,
        )

    write_errors(out_dir, step, failures)
    step_file = None
    if not failures or allow_failures:
        order = {task_id: k for k, task_id in enumerate(task_ids)}
        ordered = sorted(
            records.values(), key=lambda r: (order.get(r.task_id, len(order)), r.task_id)
        )
        step_file = write_step(out_dir / VALIDATION_DIRNAME, step, ordered, overwrite=True)
        partial_file(out_dir, step).unlink(missing_ok=True)
    return EvalOutcome(records, failures, len(task_ids) - len(todo), step_file)
