"""Memory snapshots of the BFCL V4 memory tasks: the files that carry a scenario's memory
from one conversation to the next, and the order they must be made in.

bfcl-eval's memory backends save and load themselves under a folder given to them; here
that folder is the one the service was started with (`configure`, before the workers
fork), a conversation starts only after its predecessor saved (bfcl-eval starts it empty),
files are written whole or not at all, and each episode loads a version of its own so a
rebuild sees what it started from. The layout and each rule: docs/design.md, "BFCL V4
agentic tasks".
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import stat
import tempfile
from pathlib import Path
from types import ModuleType

from seal.atomic_file import write_text_atomic
from seal.bfcl.agentic.tasks import AgenticTask

_ROOT: Path | None = None
_ENCODER: Path | None = None
BFCL_ENCODER = "all-MiniLM-L6-v2"
"""The sentence-transformers model bfcl-eval's vector backend loads, by this name, when its
module is imported (from the Hugging Face hub or its cache)."""


MAX_SNAPSHOT_BYTES = 4 * 2**20
"""The largest snapshot file a memory episode starts from. bfcl-eval's backends cap what a
conversation may store (KV and vector: 7 core entries of 300 characters and 50 archival
ones of 2,000; recursive summary: 10,000 characters), a few hundred KB as JSON even with
every character escaped. A larger file was not written by them, and reading one holds the
service's process for a time that grows with it (docs/design.md, "BFCL V4 agentic tasks")."""


class MemoryNotConfiguredError(RuntimeError):
    """A memory task in a process whose service was started without a snapshot folder."""


class SnapshotDamagedError(ValueError):
    """A snapshot file an episode would start from cannot be used (the message names it)."""


def read_snapshot(path: Path) -> str:
    """The text of the snapshot file `path`, read once; SnapshotDamagedError (naming it)
    for a file that is missing, not a regular file (a FIFO would block the open, a
    device never end), larger than MAX_SNAPSHOT_BYTES or not UTF-8. Opened without
    blocking, and its type checked on the open file, before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SnapshotDamagedError(f"{path}: no such file") from None
    except OSError as e:
        raise SnapshotDamagedError(f"{path}: cannot be opened ({e.strerror})") from None
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO, device or socket"
            raise SnapshotDamagedError(f"{path} is {kind}, not a snapshot file")
        try:
            data = file.read(MAX_SNAPSHOT_BYTES + 1)
        except OSError as e:
            raise SnapshotDamagedError(f"{path}: cannot be read ({e.strerror})") from None
    if len(data) > MAX_SNAPSHOT_BYTES:
        raise SnapshotDamagedError(
            f"{path}: larger than {MAX_SNAPSHOT_BYTES} bytes, more than bfcl-eval's memory "
            "backends can save"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SnapshotDamagedError(f"{path}: damaged, not UTF-8 ({e.reason})") from None


def check_snapshot(backend: str, path: Path, text: str) -> None:
    """SnapshotDamagedError (naming `path`) unless `text` is a snapshot the `backend`
    loads: JSON with the fields bfcl-eval's loader reads, of the types its writer writes."""
    try:
        content = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested past the limit
        raise SnapshotDamagedError(
            f"{path}: damaged, not JSON bfcl-eval can read ({type(e).__name__}: "
            f"{str(e)[:200]}; {len(text)} characters)"
        ) from None
    if (why := _unloadable(backend, content)) is not None:
        raise SnapshotDamagedError(
            f"{path}: damaged, {why} (not a snapshot bfcl-eval's {backend} backend saves)"
        )


def _unloadable(backend: str, content: object) -> str | None:
    """What in `content` bfcl-eval's `backend` could not load, as its writer never
    writes it (memory_kv/vector/rec_sum.py: `_load_scenario`), or None."""
    if not isinstance(content, dict):
        return f"a JSON {type(content).__name__}, not an object"
    if backend == "rec_sum":
        return None if isinstance(content.get("memory"), str) else "no text in 'memory'"
    for name in ("core_memory", "archival_memory"):
        part = content.get(name)
        if backend == "vector":  # VectorStore.export: next_id, store {id: text}
            if not isinstance(part, dict) or type(part.get("next_id")) is not int:
                return f"{name!r} has no integer 'next_id'"
            part = part.get("store")
            if isinstance(part, dict) and not all(k.isdecimal() for k in part):
                return f"{name!r} stores an entry whose id is not a number"
        if not isinstance(part, dict) or not all(isinstance(v, str) for v in part.values()):
            return f"{name!r} is not an object of texts"
    return None


def configure(root: Path | None, encoder: Path | None = None) -> None:
    """Keep memory snapshots under `root`, and load the vector backend's encoder from the
    folder `encoder` (None: as bfcl-eval does), in this process and those it forks later.
    Creates `root`; raises OSError (naming it) when it cannot be a writable folder."""
    global _ROOT, _ENCODER
    _ROOT = None if root is None else Path(root).resolve()
    _ENCODER = None if encoder is None else Path(encoder).resolve()
    if _ROOT is not None:
        try:
            _ROOT.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(f"{_ROOT} exists and is not a folder") from None
        if not os.access(_ROOT, os.W_OK | os.X_OK):
            raise PermissionError(f"{_ROOT}: this process may not write in it")


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

    def backend_config(self, task: AgenticTask, version: Path | None = None) -> dict:
        """The initial configuration bfcl-eval gives a memory backend
        (utils.populate_initial_settings_for_memory_test_cases), its result folder the
        episode's `version` of the snapshot (`start`) when it has one."""
        return {
            "model_result_dir": version or self.root,
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

    def start(self, task: AgenticTask) -> Path | None:
        """The version of the memory an episode of `task` starts from (None: it starts
        empty), checked and kept under `versions/`; SnapshotDamagedError names a file that
        cannot be used. Call it once `refusal` has passed, off the event loop (it reads
        files of up to MAX_SNAPSHOT_BYTES, and writes one)."""
        if task.position == 0:
            return None
        final, checkpoint = self.final(task), self.checkpoint(task, task.chain[task.position - 1])
        again = f"play the scenario's conversations again from {task.chain[0]}"
        try:
            text = read_snapshot(final)
            check_snapshot(task.backend, final, text)
            same = read_snapshot(checkpoint) == text
        except SnapshotDamagedError as e:
            raise SnapshotDamagedError(f"{e}; {again}") from None
        if not same:  # a save cut short between its two files: which is right is unknown
            raise SnapshotDamagedError(
                f"{final} is not the memory {checkpoint} says {task.chain[task.position - 1]} "
                f"left; {again}"
            )
        version = self.root / "versions" / hashlib.sha256(text.encode()).hexdigest()[:16]
        kept = version / final.relative_to(self.root)
        try:
            whole = read_snapshot(kept) == text
        except SnapshotDamagedError:
            whole = False
        if not whole:  # new, or the service's own copy damaged since: made from `text`
            try:
                write_text_atomic(kept, text)
            except OSError as e:
                raise SnapshotDamagedError(
                    f"{kept}: the service's copy of {final} cannot be written ({e}); remove it"
                ) from None
        return version

    def save(self, task: AgenticTask, backend) -> None:
        """Save a finished conversation's memory as bfcl-eval does
        (`_flush_memory_to_local_file`: its checkpoint and the scenario's final snapshot,
        the same content), each file whole or not at all, then discard the checkpoints it
        makes stale. bfcl-eval writes in place; here its writer writes into a private
        folder, and the files are then moved into place (checkpoint first: a save cut
        short between the two is found by `start`)."""
        folder = self.folder(task)
        folder.mkdir(parents=True, exist_ok=True)
        own = backend.snapshot_folder, backend.latest_snapshot_file
        with tempfile.TemporaryDirectory(dir=folder, prefix=".saving-") as private:
            backend.snapshot_folder = Path(private)
            backend.latest_snapshot_file = Path(private) / "final.json"
            try:
                backend._flush_memory_to_local_file()
            finally:
                backend.snapshot_folder, backend.latest_snapshot_file = own
            checkpoint = (Path(private) / f"{task.task_id}.json").read_text(encoding="utf-8")
            final = (Path(private) / "final.json").read_text(encoding="utf-8")
        write_text_atomic(self.checkpoint(task, task.task_id), checkpoint)
        write_text_atomic(self.final(task), final)
        self.discard_after(task)

    def discard_after(self, task: AgenticTask) -> None:
        """Delete the checkpoints of the conversations after `task` (a prereq that just
        saved): they were made from an older memory."""
        for prereq_id in task.chain[task.position + 1 :]:
            self.checkpoint(task, prereq_id).unlink(missing_ok=True)
