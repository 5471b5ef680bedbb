"""BFCL V4 agentic tasks (memory and web search): ids, data, system prompts and scoring.

The paper's out-of-distribution check (its Table 2) scores a checkpoint on bfcl-eval's
agentic categories, which this module serves to the environment service as tasks like the
multi-turn ones, read from the pinned bfcl-eval (2026.3.23) with its own loader, and scores
as bfcl-eval does (`agentic_checker` on the last message without a tool call). The ids,
counts and facts relied on: docs/design.md, "BFCL V4 agentic tasks".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import SimpleNamespace

from seal.bfcl.multi_turn import BfclTask, UnknownTaskError

MEMORY_BACKENDS = ("kv", "vector", "rec_sum")
MEMORY_CATEGORIES = tuple(f"memory_{b}" for b in MEMORY_BACKENDS)
WEB_SEARCH_CATEGORIES = ("web_search_base", "web_search_no_snippet")
AGENTIC_CATEGORIES = WEB_SEARCH_CATEGORIES + MEMORY_CATEGORIES
"""The scored categories, in bfcl-eval's leaderboard order (web search, then memory)."""
PREREQ_CATEGORIES = tuple(f"{c}_prereq" for c in MEMORY_CATEGORIES)

WEB_SEARCH, MEMORY, MEMORY_PREREQ = "web_search", "memory", "memory_prereq"

# Outcome tags of a scored agentic question (one turn, so one tag), bfcl-eval's error
# types without their "agentic:" prefix.
PASS = "pass"
ANSWER_NOT_FOUND = "answer_not_found"
NO_FINAL_ANSWER = "no_last_message"


@dataclass(frozen=True)
class AgenticTask(BfclTask):
    """A BFCL V4 agentic task. `questions` hold the user messages only: bfcl-eval's
    answer-format system message is `system`, and a memory task's full system prompt
    also shows the memory (`system_prompt`)."""

    kind: str = WEB_SEARCH
    """`web_search`, `memory` (a scored question) or `memory_prereq`."""
    answers: tuple[str, ...] = ()
    """Accepted answers (any one, as `agentic_checker` matches them); () for a prereq."""
    system: str | None = None
    """The test case's own system message (bfcl-eval's answer-format instructions)."""
    scenario: str | None = None
    backend: str | None = None
    """Memory backend: kv, vector or rec_sum."""
    chain: tuple[str, ...] = field(default_factory=tuple)
    """The scenario's prerequisite conversations (ids, in the order they run)."""

    @property
    def is_memory(self) -> bool:
        return self.kind in (MEMORY, MEMORY_PREREQ)

    @property
    def is_prereq(self) -> bool:
        return self.kind == MEMORY_PREREQ

    @property
    def memory_class(self) -> str:
        return self.involved_classes[0]

    @property
    def position(self) -> int:
        """A prereq's place in its chain; a question's: after the whole chain."""
        return self.chain.index(self.task_id) if self.is_prereq else len(self.chain)

    def system_prompt(self, memory_content: str | None = None) -> str | None:
        """The first system message as bfcl-eval builds it: for a memory task, the
        scenario's instructions with `memory_content` (the backend's dump of its memory
        at the episode's start) before the answer format; else the answer format."""
        if not self.is_memory:
            return self.system
        from bfcl_eval.model_handler.utils import add_memory_instruction_system_prompt

        if memory_content is None:
            raise ValueError(f"{self.task_id}: a memory task's prompt needs its memory content")
        first = [{"role": "system", "content": self.system}] if self.system else []
        first.append({"role": "user", "content": ""})
        # bfcl-eval's own composition; it asks the instance only for this dump.
        instance = SimpleNamespace(_dump_core_memory_to_context=lambda: memory_content)
        prompts = add_memory_instruction_system_prompt(
            [first], self.category, self.scenario, instance
        )
        return prompts[0][0]["content"]


# What each backend's module imports beyond the CPU default (the `ood` extra).
_BACKEND_IMPORTS = {
    "MemoryAPI_kv": ("rank_bm25",),
    "MemoryAPI_vector": ("sentence_transformers", "faiss"),
    "MemoryAPI_rec_sum": (),
    "WebSearchAPI": ("serpapi", "html2text", "bs4"),
}


def missing_dependency(task: AgenticTask) -> str | None:
    """Why `task`'s backend cannot be imported here (its package is not installed), or None."""
    import importlib.util

    for class_name in task.involved_classes:
        absent = [m for m in _BACKEND_IMPORTS[class_name] if importlib.util.find_spec(m) is None]
        if absent:
            return (
                f"{task.task_id}: bfcl-eval's {class_name} needs {', '.join(absent)}, not "
                "installed where the environment service runs: pip install -e '.[ood]'"
            )
    return None


def is_agentic(task_id: str) -> bool:
    return task_id.startswith(("web_search_", "memory_"))


def agentic_category(task_id: str) -> str:
    """`memory_kv_prereq_3-student-3` -> `memory_kv_prereq`, `web_search_base_7` ->
    `web_search_base`; raises UnknownTaskError for any other id."""
    head = task_id.rsplit("_", 1)[0]
    if head in AGENTIC_CATEGORIES or head in PREREQ_CATEGORIES:
        return head
    raise UnknownTaskError(task_id)


@functools.cache
def category_tasks(category: str) -> dict[str, AgenticTask]:
    """Every task of one scored category and, for memory, its prerequisite conversations
    (they share the loader: bfcl-eval links them), by id."""
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    scored = category.removesuffix("_prereq")
    if scored not in AGENTIC_CATEGORIES:
        raise UnknownTaskError(category)
    prefix = "memory" if scored.startswith("memory") else "web_search"
    answers = {
        a["id"].replace(prefix, scored, 1): tuple(a["ground_truth"])
        for a in load_ground_truth_entry(scored)
    }
    # Bare docs, as for the multi-turn tasks (BfclTask.tools): the formats add the hint.
    entries = load_dataset_entry(scored, include_language_specific_hint=False)
    chains: dict[str, list[str]] = {}
    for entry in entries:
        if agentic_category(entry["id"]).endswith("_prereq"):
            chains.setdefault(entry["scenario"], []).append(entry["id"])
    tasks = {}
    for entry in entries:
        task_id, first = entry["id"], entry["question"][0]
        system = first[0]["content"] if first and first[0]["role"] == "system" else None
        questions = [[m for m in turn if m["role"] != "system"] for turn in entry["question"]]
        own = agentic_category(task_id)
        if prefix == "web_search":
            kind = WEB_SEARCH
            config = {"WebSearchAPI": {"show_snippet": scored != "web_search_no_snippet"}}
        else:
            kind = MEMORY_PREREQ if own.endswith("_prereq") else MEMORY
            config = {}  # made per episode: it names the snapshot folder (seal.bfcl.agentic.memory)
        tasks[task_id] = AgenticTask(
            task_id=task_id,
            category=own,
            questions=questions,
            initial_config=config,
            involved_classes=list(entry["involved_classes"]),
            tools=entry["function"],
            kind=kind,
            answers=answers.get(task_id, ()),
            system=system,
            scenario=entry.get("scenario"),
            backend=scored.removeprefix("memory_") if kind != WEB_SEARCH else None,
            chain=tuple(chains.get(entry.get("scenario"), ())),
        )
    missing = [t for t in tasks.values() if t.kind != MEMORY_PREREQ and not t.answers]
    if missing:
        raise ValueError(f"bfcl-eval has no ground truth for {missing[0].task_id}")
    return tasks


def load_agentic_task(task_id: str) -> AgenticTask:
    category = agentic_category(task_id)
    tasks = category_tasks(category.removesuffix("_prereq"))
    if task_id not in tasks:
        raise UnknownTaskError(task_id)
    return tasks[task_id]


def agentic_task_ids(category: str) -> list[str]:
    """The scored question ids of one category, in bfcl-eval's order (no prereqs)."""
    return [t for t, task in category_tasks(category).items() if task.kind != MEMORY_PREREQ]


def prerequisite_plan(task_ids: list[str]) -> tuple[list[str], dict[str, str]]:
    """What must run before `task_ids`, as bfcl-eval runs memory tasks: every
    prerequisite conversation of the scenarios their memory questions belong to (each
    scenario's chain once, in order), and, for each task that must wait, the one task it
    waits for (a conversation: the one before it; a question: its scenario's last)."""
    prereqs: list[str] = []
    after: dict[str, str] = {}
    for task_id in task_ids:
        if not is_agentic(task_id):
            continue
        task = load_agentic_task(task_id)
        if task.kind != MEMORY or not task.chain:
            continue
        if task.chain[0] not in after and task.chain[0] not in prereqs:
            prereqs += task.chain
            after.update(zip(task.chain[1:], task.chain[:-1], strict=True))
        after[task_id] = task.chain[-1]
    return prereqs, after


@dataclass(frozen=True)
class Verdict:
    accuracy: int
    tag: str
    note: str


def check_answer(task: AgenticTask, answer: str | None) -> Verdict:
    """bfcl-eval's verdict on a question's final answer (None: the episode ended without
    a message that makes no tool call)."""
    from bfcl_eval.eval_checker.agentic_eval.agentic_checker import agentic_checker

    if answer is None:
        return Verdict(0, NO_FINAL_ANSWER, "no message without a tool call ended the episode")
    result = agentic_checker(answer, list(task.answers))
    if result["valid"]:
        return Verdict(1, PASS, "")
    return Verdict(0, ANSWER_NOT_FOUND, result["error_message"])
