"""What a training run may find in its run directory, checked before anything is written.

A fresh run needs a directory without an earlier run's state; a resumed one needs its
state, readable, a complete `metrics.jsonl` and the same data order. `open_run` calls
`check_run_dir` before anything is written, so a refused start leaves the earlier run as
it was, and every refusal says what was found and how to proceed. A run killed before its
first checkpoint is set aside (`unfinished_attempts/`) and restarted. The rules:
docs/runs.md.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from seal import commands
from seal.atomic_file import StateFileError
from seal.runs import checkpoint as ckpt
from seal.runs.data_order import check_data_order
from seal.runs.metrics_log import METRICS_FILENAME, MetricsFormatError, read_metrics
from seal.tocf.state import STATE_FILENAME, CapabilityState

if TYPE_CHECKING:  # the run config's `trainer` section; read, never built, here
    from seal.trainer_config import TrainerConfig

UNFINISHED_DIR = "unfinished_attempts"
"""Where a resume moves the files of a run that never reached its first checkpoint."""
_KEPT_IN_PLACE = {".lock", UNFINISHED_DIR}
# Complete checkpoint directories: the local trainer's and verl's.
_CHECKPOINT_DIR = {"local": re.compile(r"step_\d+"), "verl": re.compile(r"global_step_\d+")}


def earlier_state(run_dir: Path) -> list[str]:
    """The files of an earlier training run in `run_dir`."""
    found = []
    if (run_dir / STATE_FILENAME).exists():
        found.append(STATE_FILENAME)
    metrics = run_dir / METRICS_FILENAME
    if metrics.exists() and metrics.stat().st_size:
        found.append(METRICS_FILENAME)
    validation = run_dir / "validation"
    if validation.is_dir() and any(validation.iterdir()):
        found.append("validation/")
    checkpoints = run_dir / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.iterdir()):
        found.append("checkpoints/")
    return found


def unfinished_attempt(run_dir: Path, backend: str) -> list[str] | None:
    """What an earlier run that never reached its first checkpoint left in `run_dir`
    (`earlier_state`), or None when there is no earlier run or it has a checkpoint (a
    complete checkpoint directory, or the local trainer's `latest` pointer)."""
    found = earlier_state(Path(run_dir))
    checkpoints = Path(run_dir) / "checkpoints"
    if not found or (checkpoints / ckpt.LATEST).exists():
        return None
    if checkpoints.is_dir() and any(
        _CHECKPOINT_DIR[backend].fullmatch(p.name) for p in checkpoints.iterdir() if p.is_dir()
    ):
        return None
    return found


def set_aside_unfinished_attempt(run_dir: Path, cfg: TrainerConfig, backend: str) -> str | None:
    """For a resume of a run that never reached its first checkpoint: move its files into
    `unfinished_attempts/<UTC time>/`, so the run restarts from step 0 in a clean
    directory; returns what was done, to print. None when there is nothing to move."""
    run_dir = Path(run_dir)
    found = unfinished_attempt(run_dir, backend) if cfg.checkpoint.resume else None
    if found is None:
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    destination = run_dir / UNFINISHED_DIR / stamp
    destination.mkdir(parents=True)
    for path in sorted(run_dir.iterdir()):
        if path.name not in _KEPT_IN_PLACE:
            path.rename(destination / path.name)
    return (
        f"{run_dir} held a run that never reached its first checkpoint ({', '.join(found)}): "
        f"restarting it from step 0; its files are kept in {destination}"
    )


def check_run_dir(run_dir: Path, cfg: TrainerConfig, backend: str) -> list[str]:
    """Refuse a run that does not fit `run_dir`; returns the data-order changes that
    `allow_data_order_change` let through (to be printed). Reads, never writes.

    `backend` is `local` (its checkpoints are checked file by file) or `verl` (verl
    reads its own checkpoints; the capability state and the data order are checked).
    """
    run_dir = Path(run_dir)
    unfinished = unfinished_attempt(run_dir, backend)
    if not cfg.checkpoint.resume:
        if unfinished:
            raise FileExistsError(
                f"{run_dir} holds a run that never reached its first checkpoint "
                f"({', '.join(unfinished)}): restart it from step 0 with "
                f"`{commands.resume(run_dir)}` (its files are kept in {UNFINISHED_DIR}/), "
                "or give this run another name"
            )
        found = earlier_state(run_dir)
        if found:
            raise FileExistsError(
                f"{run_dir} holds an earlier run ({', '.join(found)}): resume it with "
                f"`{commands.resume(run_dir)}`, or give this run another name"
            )
        return []
    if unfinished is not None or (
        not earlier_state(run_dir) and (run_dir / UNFINISHED_DIR).is_dir()
    ):
        return []  # nothing to resume from: the run restarts from step 0 (or has, just now)
    if not earlier_state(run_dir):
        raise FileNotFoundError(
            f"trainer.checkpoint.resume is set but {run_dir} holds no run to resume "
            "(no checkpoint, capability state or metrics): check the run's name and "
            "output_dir, or start it without resume"
        )
    if backend == "local":
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is None:
            raise StateFileError(
                f"{run_dir / 'checkpoints' / ckpt.LATEST} is missing, but {run_dir / 'checkpoints'} "
                'holds checkpoints: restore the pointer ({"step": N, "path": "step_..."}) '
                "to the checkpoint to resume from"
            )
        state = ckpt.load_trainer_state(latest)
        pointed = ckpt.latest_step(run_dir)
        if pointed != state.step:
            raise StateFileError(
                f"{run_dir / 'checkpoints' / ckpt.LATEST} names step {pointed}, but the "
                f"checkpoint it points to ({latest}) holds step {state.step}: one of them is "
                "damaged; restore the pointer or the checkpoint"
            )
        CapabilityState.load(latest / STATE_FILENAME)
        check_metrics(run_dir, state.step)
    else:
        state = run_dir / STATE_FILENAME
        if not state.exists():
            raise FileNotFoundError(
                f"trainer.checkpoint.resume is set but there is no capability state at {state}"
            )
        CapabilityState.load(state)
        check_metrics(run_dir, None)
    return check_data_order(run_dir, cfg)


def check_metrics(run_dir: Path, resume_step: int | None) -> None:
    """`metrics.jsonl` can be continued from `resume_step`: every line readable (a last
    line a crash cut short excepted) and a row for each of steps 1..resume_step."""
    path = run_dir / METRICS_FILENAME
    if not path.exists():
        if resume_step:
            raise StateFileError(
                f"{path} is missing: the run's rows of steps 1-{resume_step} are gone; restore "
                "the file, or write an empty one to resume without them"
            )
        return
    try:
        rows = read_metrics(path)
    except MetricsFormatError as error:
        raise StateFileError(f"{error}; repair or restore the file to resume") from None
    if not resume_step or path.stat().st_size == 0:
        return  # an empty file is an explicit fresh log (see the message above)
    logged = {row["step"] for row in rows}
    missing = sorted(set(range(1, resume_step + 1)) - logged)
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        raise StateFileError(
            f"{path} has no rows for steps {shown} of the {resume_step} the checkpoint holds "
            "(cut short or edited): restore the file, or write an empty one to resume "
            "without the earlier rows"
        )
