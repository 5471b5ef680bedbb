"""The launcher's `verl` job: compose and validate verl's config, then run verl's PPO
entry point with the SEAL trainer (trainer.v1.trainer_mode = seal_sync).

Needs GPUs and `bash install.sh --gpu` (verl[vllm,fsdp]); the environment service is
started by the launcher as for the local job. Outputs in the run directory:
verl_config.yaml (the resolved config verl ran with), checkpoints/ (verl's
global_step_N with the capability state, and best/), validation/ (the project's
records), capability_state.json, tocf/, verl_validation/ (verl's own dump).
"""

from __future__ import annotations

import os
from pathlib import Path

import ray
from omegaconf import OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from seal.eval.records import read_val_dir
from seal.eval.summary import render_markdown, summarize
from seal.trainer.model import TINY, save_tiny_qwen2
from seal.trainer.verl.config import compose_verl_config, tiny_model_dir
from seal.trainer.verl.cpu.shm import remove_new_segments, segments
from seal.trainer.verl.plugin import check_registrations


def run_verl_training(cfg, env_url: str, run_dir: Path, split_file: Path) -> None:
    if cfg.verl.device == "cpu" and cfg.trainer.model.path == TINY:
        save_tiny_qwen2(cfg.trainer.model, tiny_model_dir(run_dir))
    config = compose_verl_config(cfg, env_url, run_dir)
    OmegaConf.save(config, run_dir / "verl_config.yaml")
    print(f"[verl] resolved verl config: {run_dir / 'verl_config.yaml'}")
    check_registrations()  # verl swallows plugin import errors; fail here instead
    if cfg.trainer.logging.wandb == "offline":
        os.environ.setdefault("WANDB_MODE", "offline")  # inherited by the Ray workers
    shm_before = segments()
    try:
        run_ppo(config, task_runner_class=TaskRunnerV1)
    finally:
        if cfg.verl.device == "cpu" and cfg.verl.cpu_rollout == "vllm":
            # vLLM's shared memory outlives the processes Ray ends (cpu/shm.py): end
            # them now, then remove what this run created, on success and on error.
            ray.shutdown()
            removed = remove_new_segments(shm_before, wait_s=30)
            print(f"[verl] removed {len(removed)} shared-memory segments of vLLM: {removed}")
    val_dir = run_dir / "validation"
    print(f"\nvalidation pass rates per category ({val_dir}):\n")
    print(render_markdown(summarize(read_val_dir(val_dir))))
