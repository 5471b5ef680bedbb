"""Memory snapshots of the BFCL V4 memory tasks: the files that carry a scenario's memory
from one conversation to the next, and the order they must be made in.

bfcl-eval's memory backends (`MemoryAPI_kv`, `_vector`, `_rec_sum`) load and save their
memory themselves, under a result folder they are given in their initial configuration:
`<root>/agentic/memory/<backend>/memory_snapshot/`, with `<scenario>_final.json` (the
memory the latest finished conversation left, which every episode of the scenario loads)
and `prereq_checkpoints/<task id>.json` (what each prerequisite conversation left). The
first conversation of a scenario starts empty; each later one, and every question, from
`<scenario>_final.json`; only prerequisite conversations save (bfcl-eval's inference loop
saves them when their conversation ends, and so does the service, env_service/engine.py).

The root is the one directory the environment service was given at start
(`--memory-snapshot-dir`, one per evaluation run): no request names a path. It is
process-wide because the service's worker processes, which hold the backends, are forked
from the process that sets it (`configure`, called by the service before they start).

bfcl-eval lets an episode whose snapshot is missing start with an empty memory after a
printed warning. Here that is refused (`refusal`): a conversation starts only right after
its predecessor finished, a question only after the scenario's last conversation did, and
a finished conversation discards the checkpoints of those after it, so a checkpoint on
disk always belongs to the chain the final snapshot came from.
"""

from __future__ import annotations

import importlib
import os
import tempfile
from pathlib import Path
from types import ModuleType

from seal.bfcl.agentic import AgenticTask

_ROOT: Path | None = None
_ENCODER: Path | None = None
BFCL_ENCODER = "all-MiniLM-L6-v2"
"""The sentence-transformers model bfcl-eval's vector backend loads, by this name, when its
module is imported (from the Hugging Face hub or its cache)."""


class MemoryNotConfiguredError(RuntimeError):
    """A memory task in a process whose service was started without a snapshot folder."""


def configure(root: Path | None, encoder: Path | None = None) -> None:
    """Keep memory snapshots under `root`, and load the vector backend's encoder from the
    folder `encoder` (None: as bfcl-eval does), in this process and those it forks later."""
    global _ROOT, _ENCODER
    _ROOT = None if root is None else Path(root).resolve()
    _ENCODER = None if encoder is None else Path(encoder).resolve()


def import_vector_backend(module_name: str) -> ModuleType:
    """Import bfcl-eval's vector memory backend, whose import loads its encoder.

    With a local encoder folder configured, the import runs in a private temporary folder
    holding a link named like bfcl-eval's model to it: sentence-transformers takes a name
    that is a folder as a local model before it asks the hub (nothing is downloaded; the
    link is gone once the model is loaded). Runs in a worker process, whose only thread
    this is, so changing the working folder for the import disturbs nothing."""
    if _ENCODER is None:
        return importlib.import_module(module_name)
    if not (_ENCODER / "modules.json").is_file():
        raise FileNotFoundError(
            f"--embedding-model {_ENCODER}: not a sentence-transformers model folder "
            "(no modules.json)"
        )
    with tempfile.TemporaryDirectory(prefix="seal-encoder-") as here:
        os.symlink(_ENCODER, Path(here) / BFCL_ENCODER)
        before = os.getcwd()
        os.chdir(here)
        try:
            return importlib.import_module(module_name)
        finally:
            os.chdir(before)


def configured_root() -> Path | None:
    return _ROOT


def snapshots() -> MemorySnapshots:
    if _ROOT is None:
        raise MemoryNotConfiguredError(
            "BFCL V4 memory tasks need a folder for their memory snapshots: start the "
            "environment service with --memory-snapshot-dir DIR (one per evaluation run)"
        )
    return MemorySnapshots(_ROOT)


class MemorySnapshots:
    def __init__(self, root: Path):
        self.root = root

    def folder(self, task: AgenticTask) -> Path:
        from bfcl_eval.utils import get_directory_structure_by_id

        return self.root / get_directory_structure_by_id(task.task_id) / "memory_snapshot"

    def checkpoint(self, task: AgenticTask, prereq_id: str) -> Path:
        return self.folder(task) / "prereq_checkpoints" / f"{prereq_id}.json"

    def final(self, task: AgenticTask) -> Path:
        return self.folder(task) / f"{task.scenario}_final.json"

    def backend_config(self, task: AgenticTask) -> dict:
        """The initial configuration bfcl-eval gives a memory backend
        (utils.populate_initial_settings_for_memory_test_cases)."""
        return {
            "model_result_dir": self.root,
            "scenario": task.scenario,
            "test_id": task.task_id,
            "test_category": task.category,
        }

    def finished(self, task: AgenticTask) -> list[int]:
        """Positions in `task`'s chain of the conversations whose checkpoint exists."""
        return [k for k, pid in enumerate(task.chain) if self.checkpoint(task, pid).exists()]

    def refusal(self, task: AgenticTask) -> str | None:
        """Why an episode of `task` may not start now (see the module docstring), or None."""
        position, chain = task.position, task.chain
        if position == 0:
            return None
        previous = chain[position - 1]
        done = self.finished(task)
        if position - 1 not in done or not self.final(task).exists():
            return (
                f"{task.task_id} needs the memory that {previous} leaves, and that "
                f"conversation has not finished in this service's snapshot folder: play "
                f"the scenario's prerequisite conversations in order first ({chain[0]} .. "
                f"{chain[-1]})"
            )
        later = [chain[k] for k in done if k >= position]
        if later:
            return (
                f"{task.task_id} needs the memory right after {previous}, but the "
                f"scenario's memory is already past it ({later[-1]} finished later): play "
                f"the chain again from {chain[0]}"
            )
        return None

    def discard_after(self, task: AgenticTask) -> None:
        """Delete the checkpoints of the conversations after `task` (a prereq that just
        saved): they were made from an older memory."""
        for prereq_id in task.chain[task.position + 1 :]:
            self.checkpoint(task, prereq_id).unlink(missing_ok=True)
