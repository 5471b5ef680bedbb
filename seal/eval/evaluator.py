"""Score any OpenAI-compatible endpoint on BFCL multi-turn tasks through the environment service.

Each task is one validate-mode episode, the unevolved benchmark, under the paper's limits,
through the client's episode lifecycle (``seal.rollout.env_client``): send the
conversation as it stands to the endpoint (``seal.eval.chat_endpoint``), step the service
with the reply's text and the calls the tool format parses from it, append the reply and
the service's observation in the format's messages, and repeat until the service ends
the episode (its last answer carries the evaluation; at `max_generations` replies it ends
the episode itself). The conversation goes to the chat API as messages (the Qwen2.5
format, whose messages any chat template renders) or, rendered whole by the tool format,
to the completions API (any format; bfcl-eval's own prompt with `leaderboard`). Results are validation records (``seal.eval.records``), so
``scripts/stats_validation_bfcl.py`` and ``seal-report`` read them like a trainer's.

A task whose endpoint or service requests fail for good is reported as failed, with the
error, and never scored 0: it is left out of the records and listed in the errors file.

Files, in OUT_DIR (a run directory: ``seal-report OUT_DIR`` applies):

    partial_step_<step>.jsonl     one record per finished task, appended as tasks finish
    validation/step_<step>.jsonl  all records of the step, written once no task failed
                                  (or with allow_failures); the partial file is then removed
    errors_step_<step>.jsonl      {"task_id", "step", "error"} per task that failed this time

Resuming: records already in either record file for the step are kept and their tasks
skipped, so running the same command again only retries what failed or never ran. Records
made with another model or other limits are refused rather than mixed into one step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from seal.eval.chat_endpoint import ChatEndpoint, EndpointError, EndpointSettings
from seal.eval.records import (
    RecordFormatError,
    ValidationRecord,
    read_step_file,
    step_file_name,
    write_step,
)
from seal.eval.replay import record_from_report
from seal.formats.base import ToolFormat
from seal.formats.registry import HERMES, get_format
from seal.rollout.env_client import EnvClient, EnvServiceError
from seal.rollout.protocol import EpisodeLimits, EpisodeSettings

VALIDATION_DIRNAME = "validation"


def partial_file(out_dir: Path, step: int) -> Path:
    # "partial_" first keeps it out of the records' step_*.jsonl glob.
    return out_dir / f"partial_{step_file_name(step)}"


def errors_file(out_dir: Path, step: int) -> Path:
    return out_dir / f"errors_{step_file_name(step)}"


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


@dataclass(frozen=True)
class Prompting:
    """How the endpoint is asked: a tool format, and whether the conversation is sent as
    chat messages or as the format's rendered prompt to the completions API."""

    tool_format: ToolFormat = field(default_factory=lambda: get_format(HERMES))
    completions: bool = False

    @property
    def name(self) -> str:
        return f"{self.tool_format.name} ({'completions' if self.completions else 'chat'})"


async def run_episode(
    env: EnvClient,
    chat: ChatEndpoint,
    task_id: str,
    limits: EpisodeLimits,
    prompting: Prompting | None = None,
) -> dict:
    """One validate-mode episode; the evaluation plus 'input' and 'output' messages (in
    the tool format's messages)."""
    prompting = prompting or Prompting()
    fmt, transcript = prompting.tool_format, []
    # The service ends the episode at limits.max_generations (marked truncated), so
    # the loop's own bound is only a guard.
    async with env.episode(task_id, EpisodeSettings(mode="validate", limits=limits)) as episode:
        conversation = fmt.start(episode.created)
        first = list(conversation.messages)
        for _ in range(limits.max_generations):
            if prompting.completions:
                text = await chat.complete_text(fmt.render(conversation), task_id)
            else:
                text = await chat.complete(conversation.messages, task_id)
            reply = await episode.step(text, fmt.parse(text))
            turn = [fmt.assistant_message(text), *fmt.observation(reply.messages)]
            conversation.messages += turn
            transcript += turn
            if reply.terminated:
                break
        evaluation = await episode.finish()
    return {**evaluation, "input": first, "output": transcript}


def run_settings(settings: EndpointSettings, max_generations: int, prompting: Prompting) -> dict:
    """What makes two records comparable; kept in each record's `extra`."""
    return {
        "model": settings.model,
        "max_generations": max_generations,
        "max_tokens": settings.max_tokens,
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


def report_extra(report: dict) -> dict:
    """Counters of the evaluation report worth keeping beside the score."""
    keys = ("truncated", "tool_calls", "invalid_calls", "tool_errors", "num_turns", "turns_reached")
    return {key: report[key] for key in keys if key in report}


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


async def run_tasks(
    settings: EndpointSettings,
    task_ids: list[str],
    on_report: Callable[[dict], None],
    *,
    env_url: str,
    concurrency: int,
    max_generations: int,
    show_progress: bool,
    prompting: Prompting,
) -> list[TaskFailure]:
    """Run every task's episode, `concurrency` at a time; hand each evaluation report to
    `on_report` as it arrives and return the tasks that failed."""
    failures: list[TaskFailure] = []
    gate = asyncio.Semaphore(concurrency)
    limits = EpisodeLimits(max_generations=max_generations, max_new_tokens=settings.max_tokens)
    async with (
        EnvClient(env_url, max_connections=concurrency) as env,
        ChatEndpoint(settings, max_connections=concurrency) as chat,
    ):
        if not await env.healthy():
            raise EnvServiceError(f"no healthy environment service at {env_url}")
        with tqdm(
            total=len(task_ids), desc=settings.model, unit="task", disable=not show_progress
        ) as bar:

            async def one(task_id: str) -> None:
                async with gate:
                    try:
                        on_report(await run_episode(env, chat, task_id, limits, prompting))
                    except (EndpointError, EnvServiceError) as error:
                        failures.append(TaskFailure(task_id, str(error)))
                        bar.set_postfix(failed=len(failures))
                    bar.update()

            await asyncio.gather(*(one(task_id) for task_id in task_ids))
    return failures


async def evaluate_endpoint(
    settings: EndpointSettings,
    task_ids: list[str],
    out_dir: Path,
    *,
    env_url: str,
    step: int = 0,
    concurrency: int = 16,
    max_generations: int = 20,
    allow_failures: bool = False,
    show_progress: bool = True,
    prompting: Prompting | None = None,
) -> EvalOutcome:
    """Evaluate the tasks not yet done in `out_dir`; see the module doc for the files."""
    prompting = prompting or Prompting()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = run_settings(settings, max_generations, prompting)
    records = load_done(out_dir, step, extra)
    todo = [task_id for task_id in task_ids if task_id not in records]
    failures: list[TaskFailure] = []
    if todo:
        with partial_file(out_dir, step).open("a", encoding="utf-8") as partial:

            def keep(report: dict) -> None:
                record = record_from_report(report, step)
                record = record.model_copy(update={"extra": {**report_extra(report), **extra}})
                records[record.task_id] = record
                # One line per task, flushed: a crash loses at most the tasks in flight.
                partial.write(record.model_dump_json() + "\n")
                partial.flush()

            failures = await run_tasks(
                settings,
                todo,
                keep,
                env_url=env_url,
                concurrency=concurrency,
                max_generations=max_generations,
                show_progress=show_progress,
                prompting=prompting,
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
