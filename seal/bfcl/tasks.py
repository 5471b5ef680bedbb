"""BFCL tasks by id: the only modules that read bfcl-eval's data files are
seal/bfcl/multi_turn.py (the four multi-turn categories) and seal/bfcl/agentic/tasks.py (the
BFCL V4 agentic tasks); this one tells them apart by id and serves both.
"""

from __future__ import annotations

from seal.bfcl.agentic.tasks import agentic_category, load_agentic_task
from seal.bfcl.multi_turn import BfclTask, UnknownTaskError, category_tasks

CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
"""BFCL's four multi-turn categories, in its order: the paper's train and eval tasks."""


def category_of(task_id: str) -> str:
    """`multi_turn_base_12` -> `multi_turn_base`, `memory_kv_3-student-3` -> `memory_kv`;
    raises on an id outside the four multi-turn and the BFCL V4 agentic categories."""
    category = task_id.rsplit("_", 1)[0]
    if category in CATEGORIES:
        return category
    return agentic_category(task_id)


def load_task(task_id: str) -> BfclTask:
    """The task with this id (an AgenticTask for BFCL V4 memory and web search); raises
    UnknownTaskError if there is none."""
    category = category_of(task_id)
    if category not in CATEGORIES:
        return load_agentic_task(task_id)
    tasks = category_tasks(category)
    if task_id not in tasks:
        raise UnknownTaskError(task_id)
    return tasks[task_id]


def task_ids(category: str | None = None) -> list[str]:
    """All task ids of one multi-turn category (or of all four), in BFCL's order."""
    categories = CATEGORIES if category is None else (category,)
    return [tid for c in categories for tid in category_tasks(c)]
