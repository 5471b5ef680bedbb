"""Epoch summaries of the capability state, one JSON file per epoch, for plots.

Written at the end of an epoch, before `start_epoch` opens the next window: categories,
tags (with their share of turns), category x tag, turn position x tag, the tasks that
failed most and the live tag weights, all from the epoch's window.
"""

from __future__ import annotations

from pathlib import Path

from seal.atomic_file import write_json_atomic
from seal.tocf.state import CapabilityState


def _summaries(table: dict) -> dict:
    return {key: tally.summary() for key, tally in sorted(table.items())}


def epoch_summary(state: CapabilityState, top_tasks: int = 10) -> dict:
    window = state.window
    tags = _summaries(window.by_tag)
    for tag, entry in tags.items():
        entry["share"] = window.by_tag[tag].count / window.num_turns
    failing = [(task, t) for task, t in window.by_task.items() if t.passes < t.count]
    # Least often solved first; among equals the most attempted, whose figure is surest.
    failing.sort(key=lambda item: (item[1].pass_rate, -item[1].count, item[0]))
    return {
        "epoch": state.epoch,
        "step": state.step,
        "num_trajectories": window.num_trajectories,
        "num_turns": window.num_turns,
        "categories": _summaries(window.by_category),
        "tags": tags,
        "category_tag": {c: _summaries(t) for c, t in sorted(window.by_category_tag.items())},
        "turn_positions": {p: _summaries(t) for p, t in sorted(window.by_position_tag.items())},
        "top_failing_tasks": [{"task_id": task, **t.summary()} for task, t in failing[:top_tasks]],
        "weights": dict(sorted(state.weights.items())),
    }


def write_epoch_summary(state: CapabilityState, out_dir: str | Path, top_tasks: int = 10) -> Path:
    """Write `epoch_<NNN>.json` under `out_dir` and return its path."""
    path = Path(out_dir) / f"epoch_{state.epoch:03d}.json"
    return write_json_atomic(path, epoch_summary(state, top_tasks))
