"""The backends of a BFCL V4 agentic task: seal/bfcl/backends.py's `Backends`, with the
memory and web-search classes loaded as this room needs them (the vector memory's encoder
from a local folder, the web search through the chosen transport) and a memory backend
started from its scenario's saved memory (memory.py), which it can show and save."""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

from seal.bfcl.agentic import web_search
from seal.bfcl.agentic.memory import import_vector_backend, snapshots
from seal.bfcl.agentic.tasks import AgenticTask
from seal.bfcl.backends import Backends, backend_class

VECTOR_MEMORY, WEB_SEARCH_API = "MemoryAPI_vector", "WebSearchAPI"


@functools.cache
def agentic_backend_class(class_name: str) -> type:
    """bfcl-eval's backend class of this name, imported once per process."""
    if class_name == VECTOR_MEMORY:
        # What bfcl-eval's own generation sets before this backend loads its encoder
        # (sentence-transformers and faiss each bring an OpenMP runtime; more than one
        # thread crashed there). Only this process: a worker, or a tool that embeds.
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        return getattr(import_vector_backend(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
    if class_name == WEB_SEARCH_API:
        module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
        web_search.bind_transport(module)
        return getattr(module, class_name)
    return backend_class(class_name)


def preload_web_search() -> None:
    """Import the web-search backend now (html2text, BeautifulSoup and requests), not in
    its first call's time."""
    agentic_backend_class(WEB_SEARCH_API)


class AgenticBackends(Backends):
    task: AgenticTask

    def __init__(self, task: AgenticTask, memory_version: Path | None = None):
        """`memory_version`: a memory task's version of its starting memory
        (memory.py's `start`; None: it starts empty)."""
        self.memory_version = memory_version
        super().__init__(task)

    def _class(self, class_name: str) -> type:
        return agentic_backend_class(class_name)

    def _scenario(self, class_name: str) -> dict:
        if self.task.is_memory:
            return snapshots().backend_config(self.task, self.memory_version)
        return super()._scenario(class_name)

    def _memory(self):
        if not self.task.is_memory:
            raise ValueError(f"{self.task.task_id} has no memory backend")
        return self.instances[self.task.memory_class]

    def memory_context(self) -> str:
        """The memory backend's dump of its memory for the system prompt (what bfcl-eval
        shows the model at the start of a memory episode)."""
        return self._memory()._dump_core_memory_to_context()

    def save_memory(self) -> None:
        """Save a prerequisite conversation's memory (bfcl-eval's flush at the end of its
        conversation) and discard the checkpoints it makes stale (memory.py)."""
        if not self.task.is_prereq:
            raise ValueError(f"{self.task.task_id} is not a prerequisite conversation")
        snapshots().save(self.task, self._memory())
