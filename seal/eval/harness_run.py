"""One `seal-eval-bfcl` run (seal/eval/harness_cli.py): the tasks, the served endpoint (a URL
or a model directory under `transformers serve`), the tasks through bfcl-eval's harness
(seal/eval/bfcl_harness.py) in one or several processes, the records and the table.

Finished tasks are appended to OUT_DIR/bfcl_harness_partial.jsonl as they end, so a run
that stops is finished by the same command; the step file replaces it at the end. What
bfcl's loop prints goes to OUT_DIR/bfcl_harness.log.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import multiprocessing
from collections import Counter
from pathlib import Path

import openai
from tqdm import tqdm

from seal.eval import bfcl_harness as H
from seal.eval.model_server import serve_model
from seal.eval.replay import split_task_ids
from seal.eval.score_endpoint import first_per_category
from seal.report.summary import render_markdown, summarize_step
from seal.runs.records import ValidationRecord, step_file_name, write_step

PARTIAL = "bfcl_harness_partial.jsonl"


def task_list(args: argparse.Namespace) -> list[str]:
    ids = split_task_ids(args.split, args.split_file)
    return first_per_category(ids, args.limit) if args.limit else ids


def preflight(endpoint: H.Endpoint) -> None:
    """One 1-token request: the URL, the key and the model name answer before any task."""
    try:
        H.CompletionsClient(endpoint).create(
            model=endpoint.model, prompt="Hello", max_tokens=1, temperature=0.0
        )
    except openai.OpenAIError as error:
        raise RuntimeError(
            f"{endpoint.base_url} refused a 1-token completions request for model "
            f"{endpoint.model!r} (check --base-url, --model and the key): {error}"
        ) from error


# --- the tasks, in this process or in workers -----------------------------------------------

_worker: dict = {}


def _start_worker(
    bfcl_model: str, endpoint: H.Endpoint, temperature: float, ids: list[str], log: Path
):
    _worker["handler"] = H.served_handler(bfcl_model, endpoint, temperature)
    _worker["entries"] = H.load_entries(ids)
    _worker["log"] = log


def _play(task_id: str) -> H.TaskOutcome:
    entry, ground_truth = _worker["entries"][task_id]
    # bfcl's loop prints every step; to the log, not the screen.
    with _worker["log"].open("a") as log, contextlib.redirect_stdout(log):
        try:
            return H.run_task(_worker["handler"], entry, ground_truth)
        except openai.OpenAIError as error:
            raise RuntimeError(f"{task_id}: the server failed: {error}") from error


def play_all(args, endpoint: H.Endpoint, task_ids: list[str], log: Path, done) -> None:
    """Play `task_ids`, calling `done(outcome)` as each ends; bfcl's prints go to `log`."""
    setup = (args.bfcl_model, endpoint, args.temperature, task_ids, log)
    progress = tqdm(total=len(task_ids), disable=args.quiet, desc="bfcl-eval harness")
    if args.workers == 1:
        _start_worker(*setup)
        for task_id in task_ids:
            done(_play(task_id))
            progress.update(1)
        return
    context = multiprocessing.get_context("spawn")  # bfcl's executor state is per process
    with concurrent.futures.ProcessPoolExecutor(
        args.workers, mp_context=context, initializer=_start_worker, initargs=setup
    ) as pool:
        for future in concurrent.futures.as_completed(pool.submit(_play, t) for t in task_ids):
            done(future.result())
            progress.update(1)


# --- the run -------------------------------------------------------------------------------


def summary_lines(records: list[ValidationRecord], args: argparse.Namespace) -> list[str]:
    errors = Counter(r.extra["bfcl_error_type"] for r in records if not r.score)
    refused = sum(len(r.extra["refused_calls"]) for r in records)
    refused_tasks = sum(bool(r.extra["refused_calls"]) for r in records)
    http_400 = sum(r.extra["inference_error"] is not None for r in records)
    causes = ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items())) or "none"
    return [
        render_markdown([summarize_step(args.step, records)]).rstrip(),
        f"harness: {H.HARNESS}'s multi-turn loop and checker, handler {args.bfcl_model}, "
        f"temperature {args.temperature}"
        + (f", replies capped at {args.max_tokens} tokens" if args.max_tokens else ""),  # fmt: skip
        f"failed tasks by bfcl's error type: {causes}; requests the server refused (HTTP "
        f"400, scored failed as bfcl does): {http_400}; decoded calls refused as unsafe: "
        f"{refused} in {refused_tasks} tasks",
    ]


def run(args: argparse.Namespace, out_dir: Path, api_key: str | None) -> int:
    task_ids = task_list(args)
    val_dir = out_dir / "validation"
    if (val_dir / step_file_name(args.step)).exists():
        raise FileExistsError(
            f"{val_dir / step_file_name(args.step)} exists: another --step or --out-dir"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / PARTIAL
    kept = (
        [ValidationRecord.model_validate_json(line) for line in partial.open()]
        if partial.exists()
        else []
    )
    kept = [r for r in kept if r.step == args.step and r.task_id in task_ids]
    todo = [t for t in task_ids if t not in {r.task_id for r in kept}]
    extra = {"model": args.model, "harness": H.HARNESS, "bfcl_model": args.bfcl_model,
             "temperature": args.temperature}  # fmt: skip
    records = list(kept)

    def done(outcome: H.TaskOutcome) -> None:
        record = H.harness_record(outcome, args.step, extra)
        records.append(record)
        with partial.open("a") as out:
            out.write(record.model_dump_json() + "\n")

    def score(base_url: str) -> None:
        endpoint = H.Endpoint(
            base_url=base_url, model=args.model, tokenizer_dir=args.tokenizer_dir,
            api_key=api_key, timeout_s=args.request_timeout_s, attempts=args.attempts,
            max_tokens=args.max_tokens,
        )  # fmt: skip
        preflight(endpoint)
        play_all(args, endpoint, todo, out_dir / "bfcl_harness.log", done)

    if todo and args.model_dir:
        with serve_model(args.model_dir, out_dir / "model_server.log", args.server_device) as s:
            score(s.base_url)
    elif todo:
        score(args.base_url)
    order = {task_id: k for k, task_id in enumerate(task_ids)}
    records.sort(key=lambda r: order[r.task_id])
    step_file = write_step(val_dir, args.step, records)
    partial.unlink(missing_ok=True)
    print(f"\n{len(task_ids)} tasks, {len(kept)} already done in {out_dir}")
    print("\n".join(summary_lines(records, args)))
    print(f"records: {step_file}")
    return 0
