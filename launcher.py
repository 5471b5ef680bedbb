"""SEAL-repro launcher: compose a run's config, start the environment service, run the job.

    python launcher.py [--conf exp/cpu_default.yaml] [--with-bfcl] [-- key=value ...]
    python launcher.py --explain          # every config key, its default and meaning
    python launcher.py --conf exp/SEAL.yaml --preflight   # a training run's checks only

The config is `exp/NAME.yaml` merged onto the documented defaults in
seal/launch/config.py, then the `key=value` overrides. In order, before the job runs:
1. the run is opened once (seal/runs/run.py): its directory is locked (a second run of the
   same name is refused, naming the holder's pid) and a training job's directory checked
   (a fresh run refuses an earlier run's state, a resumed one needs its state and the same
   data order);
2. the run's environment service is started on a free port (or `service.port`) with a
   fresh bearer token, or an already running one is adopted if it answers with the
   run's token (seal/launch/service.py);
3. only then are the resolved config (token redacted), the code version and the data
   order written, so a refused start leaves an earlier run's files as they were.
The job gets the opened run (`Run`, path-like); the local trainer uses it as it is.
The service the launcher starts is stopped on every exit: return, error, Ctrl-C,
SIGTERM, and kill -9 of the launcher (the service watches a pipe from it). The job gets
the token through $SEAL_ENV_TOKEN, as do the processes it starts (verl's Ray workers get
it through Ray's runtime environment: seal/trainer/verl/ray_init.py). `--preflight` runs a
training job's checks (seal/trainer/verl/preflight.py, seal/trainer/local_preflight.py)
instead of the job, writing no run files but the verl config; exit status 1 on a blocker.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

from omegaconf import OmegaConf

from seal.launch.config import RunConfig
from seal.launch.config_docs import render
from seal.launch.service import service_for_run
from seal.rollout.env_client import TOKEN_ENV
from seal.runs.run import Run, open_run
from seal.trainer.verl.cpu import PLATFORM_ENV as CPU_PLATFORM_ENV

REPO_ROOT = Path(__file__).resolve().parent
# Imported when chosen: the trainers pull in torch and transformers (verl: also Ray),
# the replay job none of them.
JOBS = {
    "replay": "seal.eval.replay:run_replay_job",
    "local": "seal.trainer.local:run_local_training",
    "verl": "seal.trainer.verl.launch:run_verl_training",
}
PREFLIGHT = {
    "verl": "seal.trainer.verl.launch:run_verl_preflight",
    "local": "seal.trainer.local_preflight:run_local_preflight",
}
"""What `--preflight` runs instead of a training job."""
# Jobs that train: their run directory is checked before the start (seal/runs/checks.py).
TRAINING_JOBS = ("local", "verl")
REDACTED = "***"


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every `finally` (the service's stop,
    the lock's release) runs, as for Ctrl-C."""


def job_function(name: str, preflight: bool = False):
    if preflight and name not in PREFLIGHT:
        raise ValueError(f"--preflight checks training runs; this config's job is {name!r}")
    module, function = (PREFLIGHT[name] if preflight else JOBS[name]).split(":")
    try:
        return getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as error:
        if name == "verl" and error.name and error.name.split(".")[0] in ("verl", "ray"):
            raise RuntimeError(
                "the verl job needs verl: run `bash install.sh --gpu` on a GPU machine, "
                "or `-- job=local` for the single-process trainer"
            ) from error
        raise


def code_version() -> str:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)\n"
    return f"{commit}{' (with uncommitted changes)' if dirty else ''}\n"


def compose(conf: Path, overrides: list[str]):
    if not conf.exists():
        raise FileNotFoundError(f"config file {conf} does not exist")
    cfg = OmegaConf.merge(
        OmegaConf.structured(RunConfig), OmegaConf.load(conf), OmegaConf.from_dotlist(overrides)
    )
    if cfg.job not in JOBS:
        raise ValueError(f"unknown job {cfg.job!r}; choose from {sorted(JOBS)}")
    return cfg


def save_run_files(cfg, run: Run) -> None:
    saved = copy.deepcopy(cfg)
    if saved.service.token:
        saved.service.token = REDACTED  # the token never goes to disk in clear
    OmegaConf.save(saved, run.dir / "config.yaml", resolve=True)
    (run.dir / "code_version.txt").write_text(code_version())
    if cfg.job in TRAINING_JOBS:
        run.record_data_order(cfg.trainer)


def run(args: argparse.Namespace) -> None:
    cfg = compose(args.conf, args.overrides)
    job_function(cfg.job, preflight=args.preflight)  # an unknown or missing job fails here
    run_dir = Path(cfg.output_dir) / cfg.name
    training = cfg.job in TRAINING_JOBS
    trainer = cfg.trainer if training else None
    with open_run(run_dir, trainer, cfg.job if training else None, "launcher") as run:
        start = cfg.service.start or args.with_bfcl
        with service_for_run(cfg.service, start, run_dir / "env_service.log") as service:
            if args.preflight:
                print(f"[launcher] preflight of the {cfg.job!r} job of {run_dir}")
            else:
                save_run_files(cfg, run)
                print(f"[launcher] job {cfg.job!r}, outputs in {run_dir}")
            # The job's clients, and the processes it starts, read the token from here.
            previous = os.environ.get(TOKEN_ENV)
            os.environ[TOKEN_ENV] = service.token
            cfg.service.token = ""
            if cfg.job == "verl" and cfg.verl.device == "cpu":
                os.environ.update(CPU_PLATFORM_ENV)  # before the job's first `import verl`
            try:
                job = job_function(cfg.job, preflight=args.preflight)
                job(cfg, service.url, run, REPO_ROOT / "data/seal_split.json")
            finally:  # for callers in this process (tests): the run's token was the run's
                if previous is None:
                    os.environ.pop(TOKEN_ENV, None)
                else:
                    os.environ[TOKEN_ENV] = previous


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--conf",
        type=Path,
        default=REPO_ROOT / "exp/cpu_default.yaml",
        help="experiment config (default: exp/cpu_default.yaml)",
    )
    p.add_argument(
        "--with-bfcl",
        action="store_true",
        help="start the environment service even if the config does not ask for it",
    )
    p.add_argument("--debug", action="store_true", help="print the full traceback on failure")
    p.add_argument(
        "--explain",
        action="store_true",
        help="print every config key with its default and documentation, then exit",
    )
    p.add_argument(
        "--preflight",
        action="store_true",
        help="check a verl run (GPUs, driver, memory, disk, the model on every node, Ray CPUs, "
        "the service from every node, shared filesystem, tracking) or a local run (GPU memory) "
        "and exit: 1 on a blocker",
    )
    p.add_argument(
        "overrides", nargs="*", help="config overrides after '--', e.g. service.port=8090"
    )
    args = p.parse_args(argv)
    if args.explain:
        print(render(RunConfig))
        return 0
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        run(args)
    except KeyboardInterrupt:
        print("\n[launcher] interrupted; the environment service was stopped", file=sys.stderr)
        return 130
    except Terminated:
        print(
            "[launcher] terminated (SIGTERM); the environment service was stopped", file=sys.stderr
        )
        return 143
    except Exception as e:  # noqa: BLE001 - the launcher's job is to report any failure clearly
        if args.debug:
            traceback.print_exc()
        print(f"[launcher] error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
