"""BFCL tasks by id: the only modules that read bfcl-eval's data files are this one and
seal/bfcl/agentic.py (the BFCL V4 agentic tasks, which `load_task` also serves).

A task is everything an episode needs: the user question of each turn, the backends'
initial configuration, the involved backend classes, the tool docs visible from the
start, the tools held out until a later turn (miss_func) and the ground-truth calls
per turn. Data comes from the pinned bfcl-eval package (2026.3.23), loaded once per
process and cached; ids are BFCL's own (`multi_turn_<category>_<k>`).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field

from seal.tocf.tags import CATEGORIES


@dataclass(frozen=True)
class BfclTask:
    """One BFCL multi-turn task. Treat as read-only: it is shared between episodes."""

    task_id: str
    category: str
    questions: list[list[dict]]
    """Per turn, the user messages of that turn ([] on a miss_func holdout turn)."""
    initial_config: dict
    involved_classes: list[str]
    tools: list[dict]
    """BFCL tool docs available from turn 0 (held-out ones removed), bare: without the
    language hint bfcl-eval's loader adds by default (each format adds it where its
    reference pipeline does: seal.bfcl.prompt.language_hinted)."""
    held_out: dict[int, list[dict]] = field(default_factory=dict)
    """Turn index -> tool docs revealed at the start of that turn."""
    ground_truth: list[list[str]] = field(default_factory=list)
    """Per turn, the ground-truth calls as BFCL call strings, e.g. "cd(folder='doc')"."""

    @property
    def num_turns(self) -> int:
        return len(self.questions)

    @property
    def long_context(self) -> bool:
        return self.category == "multi_turn_long_context"

    def backend_config(self, class_name: str) -> dict:
        """The initial configuration of one backend, a private copy (backends mutate it)."""
        return initial_config_copy(self, class_name)

    def tools_until(self, turn: int) -> list[dict]:
        """Tool docs the model may use at `turn` (initial ones plus those revealed so far)."""
        revealed = [doc for t, docs in sorted(self.held_out.items()) if t <= turn for doc in docs]
        return self.tools + revealed


class UnknownTaskError(KeyError):
    """A task id that is not one of BFCL's multi-turn or agentic tasks."""

    def __str__(self) -> str:
        return f"unknown BFCL task id: {self.args[0]!r}"


def category_of(task_id: str) -> str:
    """`multi_turn_base_12` -> `multi_turn_base`, `memory_kv_3-student-3` -> `memory_kv`;
    raises on an id outside the four multi-turn and the BFCL V4 agentic categories."""
    category = task_id.rsplit("_", 1)[0]
    if category in CATEGORIES:
        return category
    from seal.bfcl.agentic import agentic_category

    return agentic_category(task_id)


@functools.cache
def _category_tasks(category: str) -> dict[str, BfclTask]:
    # Imported here so that merely importing this module stays cheap.
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    entries = load_dataset_entry(category, include_language_specific_hint=False)
    answers = {a["id"]: a["ground_truth"] for a in load_ground_truth_entry(category)}
    tasks = {}
    for entry in entries:
        held_out = {int(turn): docs for turn, docs in entry.get("missed_function", {}).items()}
        tasks[entry["id"]] = BfclTask(
            task_id=entry["id"],
            category=category,
            questions=entry["question"],
            initial_config=entry.get("initial_config", {}),
            involved_classes=list(entry["involved_classes"]),
            tools=entry["function"],
            held_out=held_out,
            ground_truth=answers[entry["id"]],
        )
    return tasks


def load_task(task_id: str) -> BfclTask:
    """The task with this id (an AgenticTask for BFCL V4 memory and web search); raises
    UnknownTaskError if there is none."""
    category = category_of(task_id)
    if category not in CATEGORIES:
        from seal.bfcl.agentic import load_agentic_task

        return load_agentic_task(task_id)
    tasks = _category_tasks(category)
    if task_id not in tasks:
        raise UnknownTaskError(task_id)
    return tasks[task_id]


def task_ids(category: str | None = None) -> list[str]:
    """All task ids of one multi-turn category (or of all four), in BFCL's order."""
    categories = CATEGORIES if category is None else (category,)
    return [tid for c in categories for tid in _category_tasks(c)]


def initial_config_copy(task: BfclTask, class_name: str) -> dict:
    """A private deep copy of one backend's initial configuration (backends mutate it)."""
    return copy.deepcopy(task.initial_config.get(class_name, {}))
