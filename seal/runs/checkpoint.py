"""Checkpoints of the local trainer: save, find the latest, resume exactly, keep the best.

`checkpoints/step_000010/` is a Hugging Face model directory as it is (the policy with
its tokenizer and chat template) beside the optimizer state, `trainer_state.json`, the RNG
states and what the SEAL hooks keep; restoring the step restores the data order. `latest`
is written last, atomically, so a crash while saving leaves the previous checkpoint the
latest (`CheckpointWriteError` on a failed write); an unreadable file is a
`StateFileError`, and torch files are never unpickled in full. torch is imported only by
the functions that save and load state. What a checkpoint holds and why: docs/runs.md,
"Checkpoints are model directories".
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from seal import commands
from seal.atomic_file import StateFileError, read_json, write_json_atomic

LATEST = "latest"
_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
"""What torch's refusal of a file names: the function or class the file asks for."""


@dataclass
class TrainerState:
    step: int = 0
    """Steps completed."""
    epoch: int = 0


def umask_mode() -> int:
    """The mode a plain `open()` gives a new file here: 0o666 less the process's umask
    (read from /proc where it can be, since setting the umask to read it is process-wide)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return 0o666 & ~int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def make_readable(folder: Path) -> None:
    """Give the files of the model directory `folder` the mode a plain `open()` would: the
    safetensors writer (and write_json_atomic's temporary file) make theirs 0600, so another
    user, or a vLLM container, could read the config and tokenizer but not the weights."""
    mode = umask_mode()
    for file in folder.iterdir():
        if file.is_file() and file.stat().st_mode & 0o777 != mode:
            os.chmod(file, mode)


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step:06d}"


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a failing one); the message names
    it and the complete checkpoint a resume would start from."""


def save_checkpoint(
    run_dir: Path,
    state: TrainerState,
    policy,
    optimizer,
    save_seal: Callable[[Path], None],
    tokenizer=None,
) -> Path:
    """Write the checkpoint of `state.step` (`save_seal(folder)` writes the SEAL hooks'
    files into it: SealHooks.save; the trainer's `tokenizer`, with its chat template, goes
    beside the weights): into `step_N.tmp`, flushed to disk, renamed to
    `step_N`, then `latest` is pointed at it. Killed anywhere (kill -9, power), `latest`
    still names the previous complete checkpoint; failing (ENOSPC), the partial copy is
    removed to give its space back and CheckpointWriteError says what to do."""
    import torch

    path = checkpoint_dir(run_dir, state.step)
    tmp = path.with_name(path.name + ".tmp")
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        policy.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save({"torch": torch.get_rng_state(), "python": random.getstate()}, tmp / "rng.pt")
        save_seal(tmp)
        write_json_atomic(tmp / "trainer_state.json", asdict(state))
        make_readable(tmp)
        _sync_tree(tmp)  # on disk before `latest` can name it
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        write_json_atomic(run_dir / "checkpoints" / LATEST, {"step": state.step, "path": path.name})
    except (OSError, RuntimeError) as error:  # torch reports a failed write as RuntimeError
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            previous = latest_checkpoint(run_dir)
        except StateFileError:
            previous = None
        kept = f"the latest complete one is still {previous}" if previous else "there is none yet"
        raise CheckpointWriteError(
            f"cannot write the checkpoint of step {state.step} to {path} "
            f"({type(error).__name__}: {error}); {kept}. Free space (or fix the disk) and "
            f"resume with `{commands.resume(run_dir)}`"
        ) from error
    return path


def _sync_tree(directory: Path) -> None:
    for file in directory.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / LATEST
    if not pointer.exists():
        return None
    data = read_json(pointer, "pointer to the latest checkpoint")
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("path"), str)
        or not isinstance(data.get("step"), int)
    ):
        raise StateFileError(
            f"{pointer}: expected {{'step': N, 'path': 'step_...'}}, got {data!r:.200}"
        )
    path = run_dir / "checkpoints" / data["path"]
    if not path.is_dir():
        raise StateFileError(f"{pointer} names the checkpoint {path}, which does not exist")
    return path


def load_trainer_state(path: Path) -> TrainerState:
    """The trainer state of the checkpoint at `path`; every field must be there (a file
    edited down to `{}` would otherwise resume a trained checkpoint at step 0)."""
    file = path / "trainer_state.json"
    data = read_json(file, "trainer state")
    expected = {f.name for f in fields(TrainerState)}
    if not isinstance(data, dict) or set(data) != expected:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise StateFileError(
            f"{file}: not a trainer state (expected {sorted(expected)}, got {found})"
        )
    if not isinstance(data["step"], int) or isinstance(data["step"], bool) or data["step"] < 0:
        raise StateFileError(f"{file}: not a trainer state (step {data['step']!r})")
    return TrainerState(**data)


def latest_step(run_dir: Path) -> int | None:
    """The step `latest` names (None without a pointer); `latest_checkpoint` checks it."""
    pointer = run_dir / "checkpoints" / LATEST
    return read_json(pointer, LATEST)["step"] if latest_checkpoint(run_dir) else None


def load_torch_file(file: Path, what: str):
    """`torch.load` of a checkpoint file as tensors and plain data only (`weights_only`:
    a full unpickling would run whatever code the file names, and a run directory is not
    trusted code); any failure names the file."""
    import torch

    try:
        return torch.load(file, weights_only=True)
    except Exception as error:  # noqa: BLE001 - torch raises many types for a bad file
        if "Weights only load failed" in str(error):
            # torch's refusal lists every remedy, including weights_only=False: not ours.
            named = _GLOBAL.search(str(error))
            raise StateFileError(
                f"{file}: refused to load the {what}: besides tensors and plain data it "
                f"asks for {named.group(1) if named else 'an object'}, which loading would "
                "run as code. This project's checkpoints ask for none: the file was "
                "damaged or crafted; resume from another checkpoint"
            ) from None
        raise StateFileError(
            f"{file}: cannot load the {what}: {type(error).__name__}: {error}"
        ) from error


def seed_rng(seed: int) -> None:
    """A fresh run's random state (what a checkpoint's `rng.pt` saves): sampling starts
    from `seed` rather than from whatever state model loading left."""
    import torch

    torch.manual_seed(seed)
    random.seed(seed)


def restore_rng(path: Path) -> None:
    import torch

    file = path / "rng.pt"
    rng = load_torch_file(file, "random number generator states")
    try:
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
    except (TypeError, KeyError, ValueError, RuntimeError) as error:
        raise StateFileError(
            f"{file}: not the random number generator states of a checkpoint "
            f"({type(error).__name__}: {error})"
        ) from error


def prune_checkpoints(run_dir: Path, step: int, best_step: int | None) -> None:
    """Delete every checkpoint but the best (`best_step`, None: none yet) and the latest."""
    keep = {checkpoint_dir(run_dir, step).name}
    if best_step is not None:
        keep.add(checkpoint_dir(run_dir, best_step).name)
    for path in (run_dir / "checkpoints").glob("step_*"):
        if path.name not in keep:
            shutil.rmtree(path)
