"""Ray for a verl run, started (or joined) by the launcher with the workers' environment.

verl's `run_ppo` starts Ray itself when nobody has, from `ray_kwargs.ray_init` and its own
runtime environment (verl/trainer/main_ppo.py). The launcher does that step instead, with
the same arguments plus the variables every worker needs (`worker_env`): the environment
service's token and the tracking mode. Passed through Ray's runtime environment, they reach
workers on every node of a `ray start` cluster, whose processes do not inherit the
launcher's environment (they inherit the `ray start` shell's), and they stay out of the
verl config, which is saved to disk and printed (run_ppo prints its `ray.init` arguments).
`run_ppo` then finds Ray initialised and goes on with it.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray
from omegaconf import OmegaConf
from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

from seal.rollout.env_client import TOKEN_ENV
from seal.runs.metrics_log import wandb_run_id

WANDB_MODE = "WANDB_MODE"
WANDB_API_KEY = "WANDB_API_KEY"
WANDB_DIR = "WANDB_DIR"


def worker_env(run_cfg, run_dir) -> dict[str, str]:
    """What every Ray worker of the run must have in its environment: the service's token
    (set by the launcher in its own environment), the tracking mode and where its files go
    (the run directory, not the worker's working directory), the run's wandb id (a resumed
    run logs into the same wandb run), and wandb's key when it logs online (from the
    launcher's environment, never a file)."""
    token = os.environ.get(TOKEN_ENV)
    if not token:
        raise RuntimeError(f"${TOKEN_ENV} is not set: the launcher sets it for the run")
    mode = run_cfg.trainer.logging.wandb
    env = {TOKEN_ENV: token, WANDB_MODE: mode, WANDB_DIR: str(Path(run_dir).absolute())}
    if mode != "disabled":
        env |= {"WANDB_RUN_ID": wandb_run_id(run_dir), "WANDB_RESUME": "allow"}
    if mode == "online":
        if not os.environ.get(WANDB_API_KEY):
            raise RuntimeError(
                f"trainer.logging.wandb=online needs ${WANDB_API_KEY} in the launcher's "
                "environment (it is passed to the workers); or use offline"
            )
        env[WANDB_API_KEY] = os.environ[WANDB_API_KEY]
    return env


def joins_cluster(config) -> bool:
    """Whether ray.init connects to a running cluster (RAY_ADDRESS or ray_init.address)
    rather than starting one in this process."""
    return bool(os.environ.get("RAY_ADDRESS") or config.ray_kwargs.ray_init.get("address"))


def ray_init_kwargs(config, env: dict[str, str]) -> dict:
    """The arguments verl's run_ppo would give ray.init, with `env` added to the runtime
    environment's variables. Joining a cluster, its CPU and GPU counts are the cluster's
    (`ray start --num-cpus/--num-gpus`): Ray refuses them from a connecting driver."""
    # As run_ppo (verl 0.9.1): verl's defaults, TransferQueue's switch, then the config's.
    defaults = get_ppo_ray_runtime_env(config)
    if config.transfer_queue.enable:
        defaults.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
    init = OmegaConf.to_container(config.ray_kwargs.get("ray_init", {}), resolve=True)
    runtime_env = OmegaConf.to_container(
        OmegaConf.merge(defaults, init.pop("runtime_env", None) or {}), resolve=True
    )
    runtime_env.setdefault("env_vars", {}).update(env)
    if joins_cluster(config):
        init.pop("num_cpus", None)
        init.pop("num_gpus", None)
    return {**init, "runtime_env": runtime_env}


def start_ray(config, env: dict[str, str]) -> None:
    """Start or join Ray for the run (see the module docstring) and say which."""
    if ray.is_initialized():
        raise RuntimeError(
            "Ray is already initialised in this process: its workers would not get the "
            "run's environment"
        )
    kwargs = ray_init_kwargs(config, env)
    try:
        ray.init(**kwargs)
    except ConnectionError as error:
        if not joins_cluster(config) or os.environ.get("RAY_AUTH_MODE"):
            raise
        # Ray 2.60 starts clusters with token authentication, and a driver that joins one
        # without RAY_AUTH_MODE=token sends no token: Ray says only "Failed to connect".
        raise ConnectionError(
            f"{error}; a `ray start` cluster authenticates with Ray's token by default: set "
            "RAY_AUTH_MODE=token here as on its nodes (docs/gpu.md, 'Several nodes')"
        ) from error
    nodes = [n for n in ray.nodes() if n["Alive"]]
    cpus = sum(n["Resources"].get("CPU", 0) for n in nodes)
    gpus = sum(n["Resources"].get("GPU", 0) for n in nodes)
    how = "joined the cluster" if joins_cluster(config) else "started a local Ray"
    print(
        f"[verl] {how}: {len(nodes)} node(s), {cpus:g} CPUs, {gpus:g} GPUs; the workers get "
        f"{', '.join(sorted(env))} through Ray's runtime environment"
    )
