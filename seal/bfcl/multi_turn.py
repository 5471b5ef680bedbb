"""BFCL's multi-turn tasks: the task record every BFCL task is (`BfclTask`; the agentic
tasks of seal/bfcl/agentic/tasks.py extend it), the error for an id that names no task,
and the loader of the four multi-turn categories.

A task is everything an episode needs: each turn's user question, the backends' initial
configuration and classes, the tool docs visible from the start, the tools held out until
a later turn (miss_func) and each turn's ground-truth calls. Data comes from the pinned
bfcl-eval package, loaded once per process and cached; ids are BFCL's own
(`multi_turn_<category>_<k>`). Tasks by id, of any kind: seal/bfcl/tasks.py.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field


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


@functools.cache
def category_tasks(category: str) -> dict[str, BfclTask]:
    """Every task of one of the four multi-turn categories, by id, in BFCL's order."""
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


def initial_config_copy(task: BfclTask, class_name: str) -> dict:
    """A private deep copy of one backend's initial configuration (backends mutate it)."""
    return copy.deepcopy(task.initial_config.get(class_name, {}))
