"""SEAL-repro launcher: compose a run's config, start the environment service, run the job.

    python launcher.py [--conf exp/cpu_default.yaml] [--with-bfcl] [-- key=value ...]
    python launcher.py --explain          # every config key, its default and meaning

The config is `exp/NAME.yaml` merged onto the documented defaults in
seal/launch/config.py, then the `key=value` overrides. The resolved config and the code
version are saved in the run directory before anything runs. The environment service
is started when the config says so (`service.start`) or with `--with-bfcl`, reused if
one is already healthy on the port, and stopped on exit, error and Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import subprocess
import sys
import traceback
from pathlib import Path

from omegaconf import OmegaConf

from seal.launch.config import RunConfig
from seal.launch.config_docs import render
from seal.launch.service import environment_service
from seal.rollout.env_client import is_healthy
from seal.trainer.verl.cpu import PLATFORM_ENV as CPU_PLATFORM_ENV

REPO_ROOT = Path(__file__).resolve().parent
# Imported when chosen: the trainers pull in torch and transformers (verl: also Ray),
# the replay job none of them.
JOBS = {
    "replay": "seal.eval.replay:run_replay_job",
    "local": "seal.trainer.local:run_local_training",
    "verl": "seal.trainer.verl.launch:run_verl_training",
}


def job_function(name: str):
    module, function = JOBS[name].split(":")
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


def run(args: argparse.Namespace) -> None:
    cfg = compose(args.conf, args.overrides)
    run_dir = Path(cfg.output_dir) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    (run_dir / "code_version.txt").write_text(code_version())
    print(f"[launcher] job {cfg.job!r}, outputs in {run_dir}")

    svc = cfg.service
    if svc.start or args.with_bfcl:
        service = environment_service(
            svc.host,
            svc.port,
            run_dir / "env_service.log",
            svc.startup_timeout_s,
            extra_args=("--max-live-episodes", str(svc.max_live_episodes)),
        )
    else:
        url = f"http://{svc.host}:{svc.port}"
        if not is_healthy(url):
            raise RuntimeError(
                f"no environment service at {url}; start one or set service.start=true"
            )
        service = contextlib.nullcontext(url)
    if cfg.job == "verl" and cfg.verl.device == "cpu":
        os.environ.update(CPU_PLATFORM_ENV)  # before the job's first `import verl`
    with service as url:
        job_function(cfg.job)(cfg, url, run_dir, REPO_ROOT / "data/seal_split.json")


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
        "overrides", nargs="*", help="config overrides after '--', e.g. service.port=8090"
    )
    args = p.parse_args(argv)
    if args.explain:
        print(render(RunConfig))
        return 0
    try:
        run(args)
    except KeyboardInterrupt:
        print("\n[launcher] interrupted; the environment service was stopped", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the launcher's job is to report any failure clearly
        if args.debug:
            traceback.print_exc()
        print(f"[launcher] error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
