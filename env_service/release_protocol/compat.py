"""What clients of the original SEAL release name and read, in this service's terms.

The release protocol (api.py) serves the release's trainer unchanged; this module holds the
translation, so the engine and the native API stay free of it: `resolve_task_id` (the
release's row numbers), its splits, `evaluation` (the fields the release's grader reads)
and the shapes of the other answers. Its `/create` params: params.py.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from env_service.errors import EngineError, NotFoundError
from seal.bfcl import tags as T
from seal.bfcl.diagnosis import progress_counts
from seal.bfcl.tasks import CATEGORIES, task_ids

COMPLETED = "[CONVERSATION_COMPLETED]"
"""Content of the release's last /step message: the episode has run out of user turns."""

# --- task ids and splits -----------------------------------------------------------------

# The release's data file (bfcl_dataprocess.py) holds the four categories in sorted name
# order, each in bfcl-eval's file order; a numeric task id is a row number of that file.
RELEASE_ROW_ORDER = tuple(sorted(CATEGORIES))


def resolve_task_id(task_id: str) -> str:
    """A BFCL task id; numeric ids are the release's row numbers (0-799)."""
    if not (task_id.isascii() and task_id.isdigit()):
        return task_id
    rows = [tid for category in RELEASE_ROW_ORDER for tid in task_ids(category)]
    row = int(task_id)
    if row >= len(rows):
        raise NotFoundError(
            f"task row {row} does not exist: numeric ids are rows 0-{len(rows) - 1} of the "
            f"release's data file ({', '.join(RELEASE_ROW_ORDER)}, in that order)"
        )
    return rows[row]


SPLIT_FILE = Path(__file__).resolve().parents[2] / "data" / "seal_split.json"
"""The paper's split (the same ids as the release's parquet files)."""
SPLIT_NAMES = {"train": "train", "eval": "eval", "val": "eval", "test": "eval"}
"""Split names clients ask for -> key in SPLIT_FILE. The release's trainer asks for
`train`, and for `val` when it has no validation file; its split file says `test`."""


class ServiceDataError(EngineError):
    status = 500


def split_task_ids(split: str) -> list[str]:
    if split not in SPLIT_NAMES:
        raise NotFoundError(f"unknown split {split!r}; known: {sorted(SPLIT_NAMES)}")
    return list(_read_split(str(SPLIT_FILE))[SPLIT_NAMES[split]])


@functools.lru_cache(maxsize=2)
def _read_split(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ServiceDataError(f"cannot read the split file {path}: {e}") from None


# --- answers -------------------------------------------------------------------------------


def step_state(messages: list[dict], terminated: bool) -> list[dict]:
    """The `state` of a /step answer: the release's message shape (it always carries
    `tool_calls`), and its one completion message once the last turn is over."""
    if terminated and not messages:
        messages = [{"role": "user", "content": COMPLETED}]
    return [{"role": m["role"], "content": m["content"], "tool_calls": []} for m in messages]


def tools_info(tool_names: list[str]) -> str:
    """The release's /get_info answer: a text list of the tools."""
    return "Available tools:\n" + "\n".join(f"- {name}" for name in tool_names)


def evaluation(native: dict, ground_truth: list[list[str]]) -> dict:
    """The native evaluation plus what the release's grader and env manager read, with its
    meaning:

    - completed: the episode ran through its last turn (not cut by max_steps, not ended by
      the service's time budget or at a malformed call, not stopped early by the client);
    - per ground-truth turn, a turn with calls is scorable and passed when tagged `pass`;
      a turn without calls is an irrelevance turn, passed when the model called nothing;
    - bfcl_progress = passed / scorable, which is the native evaluation's `progress`
      (seal.bfcl.diagnosis.progress_counts); bfcl_progress_with_irrelevance = (passed +
      passed irrelevance) / (scorable + irrelevance); both 0 when their denominator is.
    """
    tags = native["failure_tags"]
    per_turn_valid = [
        tag == T.PASS if gt else None for tag, gt in zip(tags, ground_truth, strict=True)
    ]
    irrelevance = [
        None if gt else float(tag == T.CORRECT_ABSTENTION)
        for tag, gt in zip(tags, ground_truth, strict=True)
    ]
    passed, scorable = progress_counts(tags, ground_truth)
    passed_irrelevance = sum(s == 1.0 for s in irrelevance if s is not None)
    irrelevance_turns = sum(s is not None for s in irrelevance)
    both = scorable + irrelevance_turns
    return {
        **native,
        "accuracy": float(native["accuracy"]),
        "completed": native["terminated"]
        and not (native["truncated"] or native["aborted"] or native["ended_on_malformed_call"]),
        "bfcl_progress": passed / scorable if scorable else 0.0,
        "bfcl_progress_with_irrelevance": (passed + passed_irrelevance) / both if both else 0.0,
        "bfcl_progress_info": {
            "per_turn_valid": per_turn_valid,
            "irrelevance_per_turn": irrelevance,
            "failure_tags": list(tags),
            "passed_turns": passed,
            "scorable_turns": scorable,
            "passed_irrelevance_turns": passed_irrelevance,
            "irrelevance_turns": irrelevance_turns,
            "terminated_early": native["turns_reached"] < native["num_turns"],
            "error": None,
        },
    }
