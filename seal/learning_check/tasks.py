"""The learning check's tasks (the K easiest by ground-truth length) and its success
measures: sampled and greedy success, the evaluation's episodes as validation records."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np

from seal.bfcl.ground_truth import ground_truth_texts
from seal.bfcl.tasks import load_task
from seal.rollout.driver import EpisodeSample
from seal.runs.data_order import task_ids_of
from seal.runs.records import write_step
from seal.trainer.local import LocalTrainer, validation_record


def gt_texts(task_id: str) -> list[str]:
    """The ground-truth policy's assistant texts in the Qwen2.5 format, in order (one
    per generation; the learning check trains the tiny Qwen2)."""
    return ground_truth_texts(load_task(task_id))


def pick_tasks(k: int, tokenizer, train_file: str) -> list[str]:
    """The k training tasks with the fewest generated ground-truth tokens (ties: fewer
    generations, then id). long_context tasks repeat base tasks with longer
    observations, so they are skipped to keep k distinct problems."""

    def cost(task_id: str) -> tuple[int, int, str]:
        texts = gt_texts(task_id)
        tokens = sum(len(tokenizer.encode(t, add_special_tokens=False)) + 1 for t in texts)
        return tokens, len(texts), task_id

    ids = [t for t in task_ids_of(train_file) if "long_context" not in t]
    return sorted(ids, key=cost)[:k]


def episode_sizes(task_ids: list[str], tokenizer) -> tuple[int, int]:
    """(longest ground-truth generation in tokens incl. eos, most ground-truth generations)."""
    texts = [gt_texts(t) for t in task_ids]
    longest = max(
        len(tokenizer.encode(x, add_special_tokens=False)) + 1 for ts in texts for x in ts
    )
    return longest, max(len(ts) for ts in texts)


def sampled_success(
    trainer: LocalTrainer, task_ids: list[str], n: int, mode: str
) -> tuple[dict, list[EpisodeSample]]:
    """Success rate and mean reward of n episodes per task at temperature 1 in `mode`
    (`sample`: the training layers; `validate`: the plain benchmark), and the episodes."""
    samples = trainer.rollout(task_ids, n, mode=mode, temperature=1.0)
    per_task = {
        t: float(np.mean([s.accuracy for s in samples if s.task_id == t])) for t in task_ids
    }
    check = {
        "success": float(np.mean([s.accuracy for s in samples])),
        "reward": float(np.mean([s.reward for s in samples])),
        "per_task": per_task,
    }
    return check, samples


def write_eval_records(run_dir: Path, step: int, samples: list[EpisodeSample], mode: str) -> None:
    """The evaluation's episodes as validation records (RUN/validation/step_N.jsonl), the
    samples of a task numbered, so `seal-report --compare` scores each task by its mean."""
    numbers: dict[str, int] = defaultdict(int)
    records = []
    for sample in samples:
        record = validation_record(sample, step)
        extra = {"sample": numbers[sample.task_id], "mode": mode, "temperature": 1.0}
        numbers[sample.task_id] += 1
        records.append(record.model_copy(update={"extra": extra}))
    write_step(run_dir / "validation", step, records)


def greedy_success(trainer: LocalTrainer, task_ids: list[str]) -> dict[str, int]:
    """Greedy success per task on the plain benchmark (validate mode), for reference."""
    samples = trainer.rollout(task_ids, 1, mode="validate", temperature=0.0)
    return {s.task_id: int(s.accuracy) for s in samples}
