"""The launcher's `verl` job: compose and validate verl's config, run the preflight (on one
node before Ray starts, joining a cluster through it), start Ray with the workers'
environment, then verl's PPO entry point with the SEAL trainer
(trainer.v1.trainer_mode = seal_sync). `run_verl_preflight` (launcher.py --preflight) stops
after the preflight.

Needs GPUs and `bash install.sh --gpu` (verl[vllm]); the environment service is started by
the launcher as for the local job. What it writes in the run directory: docs/gpu.md, "Run,
with a preflight first".
"""

from __future__ import annotations

from pathlib import Path

import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from seal.runs.run import Run
from seal.runs.run_record import model_identity, record_base_model
from seal.trainer.model import TINY_MODELS, save_tiny_model
from seal.trainer.preflight_rows import raise_on_blockers, render
from seal.trainer.verl.attention import choose_attention, flash_attn_version
from seal.trainer.verl.cpu.shm import remove_new_segments, segments
from seal.trainer.verl.plugin import check_registrations
from seal.trainer.verl.preflight import run_preflight
from seal.trainer.verl.ray_init import joins_cluster, start_ray, worker_env
from seal.trainer.verl.verl_config import compose_verl_config, model_path, tiny_model_dir


def prepare(cfg, env_url: str, run_dir: Path):
    """The validated verl config, saved as verl_config.yaml."""
    if cfg.verl.device == "cpu" and cfg.trainer.model.path in TINY_MODELS:
        save_tiny_model(cfg.trainer.model, tiny_model_dir(run_dir))
    attention = choose_attention(cfg.verl.device, flash_attn_version())
    print(f"[verl] attention: {attention.reason}")
    config = compose_verl_config(cfg, env_url, run_dir, attention)
    OmegaConf.save(config, run_dir / "verl_config.yaml")
    print(f"[verl] resolved verl config: {run_dir / 'verl_config.yaml'}")
    check_registrations()  # verl swallows plugin import errors; fail here instead
    return config


def preflight(cfg, config, run_dir: Path, probe_env: dict[str, str] | None = None) -> None:
    """Print the preflight's table; raise PreflightFailed on a blocker."""
    checks = run_preflight(cfg, config, run_dir, probe_env=probe_env)
    print(render(checks))
    raise_on_blockers(checks, "verl.preflight=false skips the check")
    print(f"[verl] preflight passed: no blocker in {len(checks)} checks")


def run_verl_preflight(cfg, env_url: str, run: Run | Path, split_file: Path) -> None:
    """`launcher.py --preflight`: the checks only; raises on a blocker (exit 1). Joining a
    cluster, every node is probed through Ray; on one node, where the run would start its
    own Ray, this process probes the node with the environment the run's workers get (no
    Ray to start and stop: seconds less), as the run itself does before it starts Ray."""
    run_dir = Path(run)
    config = prepare(cfg, env_url, run_dir)
    env = worker_env(cfg, run_dir)
    if not joins_cluster(config):
        preflight(cfg, config, run_dir, probe_env=env)
        return
    start_ray(config, env)
    try:
        preflight(cfg, config, run_dir)
    finally:
        ray.shutdown()


def run_verl_training(cfg, env_url: str, run: Run | Path, split_file: Path) -> None:
    """The launcher's `verl` job in its opened run (the launcher holds its lock while verl's
    processes write into the directory, and prints the pass rates once it returns)."""
    run_dir = Path(run)
    config = prepare(cfg, env_url, run_dir)
    env, cluster = worker_env(cfg, run_dir), joins_cluster(config)
    if cfg.verl.preflight and not cluster:  # before Ray starts: a refusal in seconds
        preflight(cfg, config, run_dir, probe_env=env)
    start_ray(config, env)
    shm_before = segments()
    try:
        if cfg.verl.preflight and cluster:
            preflight(cfg, config, run_dir)
        attempt = run.attempt if isinstance(run, Run) else None
        if attempt is not None:  # the base checkpoint (the preflight fetched its config)
            record_base_model(attempt, model_identity(model_path(cfg, run_dir)))
        run_ppo(config, task_runner_class=TaskRunnerV1)  # Ray is up: verl uses it as it is
    finally:
        ray.shutdown()
        if cfg.verl.device == "cpu" and cfg.verl.cpu_rollout == "vllm":
            # vLLM's shared memory outlives the processes Ray ends (cpu/shm.py): remove
            # what this run created, on success and on error.
            removed = remove_new_segments(shm_before, wait_s=30)
            print(f"[verl] removed {len(removed)} shared-memory segments of vLLM: {removed}")
