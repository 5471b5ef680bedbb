"""The launcher's jobs: which function runs each `job` (and its `--preflight`), imported only
once chosen and once the run is locked: the trainers' modules import torch and
transformers (verl: also Ray), the replay job none of them.
"""

from __future__ import annotations

import gc
import importlib
import sys

JOBS = {
    "replay": "seal.eval.replay:run_replay_job",
    "local": "seal.trainer.local:run_local_training",
    "verl": "seal.trainer.verl.launch:run_verl_training",
}
"""The function each `job` runs (module:function)."""
PREFLIGHT = {
    "verl": "seal.trainer.verl.launch:run_verl_preflight",
    "local": "seal.trainer.local_preflight:run_local_preflight",
}
"""What `--preflight` runs instead of a training job."""


def job_function(name: str, preflight: bool = False):
    """The job's entry point, imported now (the trainers' modules import torch,
    transformers and verl: only once the run is locked)."""
    check_job(name, preflight)
    module, function = (PREFLIGHT[name] if preflight else JOBS[name]).split(":")
    try:
        return getattr(import_uncollected(module), function)
    except ModuleNotFoundError as error:
        if name == "verl" and error.name and error.name.split(".")[0] in ("verl", "ray"):
            raise RuntimeError(
                "the verl job needs verl: run `bash install.sh --gpu` on a GPU machine, "
                "or `-- job=local` for the single-process trainer"
            ) from error
        raise


def import_uncollected(module: str):
    """`module`, imported with the cyclic garbage collector paused, its objects then frozen
    out of later collections (gc.freeze). A trainer's import (torch, transformers and verl:
    objects that live until exit) otherwise runs full collections that scan them again and
    again, and one more at exit: seconds of a preflight (docs/benchmarks.md, "The
    preflight"); an import makes almost no garbage. Collected once before, so that earlier
    garbage (a test's, in a long process) is not frozen with them."""
    if module in sys.modules:
        return sys.modules[module]
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return importlib.import_module(module)
    finally:
        if was_enabled:
            gc.enable()
        gc.freeze()


def check_job(name: str, preflight: bool = False) -> None:
    if name not in JOBS:
        raise ValueError(f"unknown job {name!r}; choose from {sorted(JOBS)}")
    if preflight and name not in PREFLIGHT:
        raise ValueError(f"--preflight checks training runs; this config's job is {name!r}")
