"""The verl config of a run: the run config's `trainer` section mapped onto verl's keys.

`compose_verl_config` composes verl 0.9.1's own `ppo_trainer` config with Hydra, the mapped
keys and the run's `verl.overrides` as overrides (an unknown key is an error, as on verl's
command line), adds the `seal` section and validates the result, so the same `trainer`
keys mean the same on the local and the verl backend. The mapping, key by key, and what
is derived from the machine: docs/gpu.md, "The run config in verl's keys".
"""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_module
from omegaconf import DictConfig, OmegaConf, open_dict
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from seal.trainer.model import TINY_MODELS
from seal.trainer.verl.agent_loop import AGENT_NAME
from seal.trainer.verl.attention import (
    Attention,
    attention_keys,
    choose_attention,
    flash_attn_version,
)
from seal.trainer.verl.cpu import PLATFORM_NAME
from seal.trainer.verl.cpu.rollout import ROLLOUT_NAME
from seal.trainer.verl.cpu.trainer import TRAINER_MODE_CPU, TRAINER_MODE_CPU_VLLM
from seal.trainer.verl.cpu.vllm_config import vllm_cpu_keys
from seal.trainer.verl.cpu.weight_sync import BACKEND as WEIGHT_SYNC_BACKEND
from seal.trainer.verl.section import SealSection
from seal.trainer.verl.trainer import TRAINER_MODE

FIXED = {
    "algorithm.adv_estimator": "grpo",
    "algorithm.use_kl_in_reward": False,
    "trainer.use_v1": True,
    "trainer.v1.trainer_mode": TRAINER_MODE,
    "actor_rollout_ref.rollout.mode": "async",
    "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
    "actor_rollout_ref.rollout.calculate_log_probs": True,
    "actor_rollout_ref.rollout.val_kwargs.n": 1,
    "actor_rollout_ref.actor.ppo_epochs": 1,
    # The reward is the service's verdict, returned by the agent loop; no reward model.
    "reward.reward_model.enable": False,
}
"""verl keys every SEAL run sets the same way."""

CPUS_PER_GPU = 3
"""CPUs verl reserves with each GPU: every bundle of its GPU placement groups asks for
ResourcePoolManager's max_colocate_count (3) CPUs (verl/single_controller/ray/base.py)."""
CPUS_PER_ROLLOUT_REPLICA = 2
"""CPUs of a standalone rollout replica's bundle (verl/workers/rollout/replica.py); only the
CPU test backend runs one."""
STORAGE_UNITS_PER_NODE = 2
"""TransferQueue storage units per node (verl's recommendation: at least 2 x nodes; each
holds one CPU for the whole run; verl's default of 8 with 3 CPUs per GPU asks 21 CPUs of a
4-GPU node)."""

DATACLASS_SECTIONS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.rollout",
    "algorithm",
)


def model_path(run_cfg, run_dir: Path) -> str:
    """The policy verl loads: trainer.model.path, or on the CPU backend the tiny model
    saved in the run directory (seal/trainer/verl/launch.py writes it)."""
    path = run_cfg.trainer.model.path
    if path not in TINY_MODELS:
        return path
    if run_cfg.verl.device != "cpu":
        raise ValueError(
            f"the verl backend needs a Hugging Face model (trainer.model.path), not {path!r} "
            "(verl.device=cpu runs it, for tests)"
        )
    return str(tiny_model_dir(run_dir))


def tiny_model_dir(run_dir: Path) -> Path:
    return Path(run_dir).absolute() / "tiny_model"


def cpu_backend_keys(run_cfg) -> dict:
    """verl keys of the CPU test backend (seal/trainer/verl/cpu): its platform, rollout
    replica, weight sync and trainer; FSDP2 in float32 on gloo without torch.compile;
    a local Ray whose logical GPU slots are the actor's workers plus one per replica."""
    v = run_cfg.verl
    if run_cfg.trainer.loss.use_kl_loss:
        raise ValueError(
            "verl.device=cpu cannot run the reference policy (trainer.loss.use_kl_loss): verl "
            "0.9.1 builds it as a forward-only FSDP engine, which FSDP2 always offloads with "
            "pinned memory (verl/workers/engine/fsdp/transformer_impl.py, CPUOffloadPolicy("
            "pin_memory=True)) and FSDP1 syncs on a GPU (sync_module_states); both need an "
            "accelerator. Set trainer.loss.use_kl_loss=false for CPU runs."
        )
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    keys = {
        "trainer.device": "cpu",
        "trainer.v1.trainer_mode": TRAINER_MODE_CPU,
        f"{r}.name": ROLLOUT_NAME,
        "reward.reward_model.rollout.name": ROLLOUT_NAME,
        f"{r}.checkpoint_engine.backend": WEIGHT_SYNC_BACKEND,
        f"{r}.nnodes": 1,
        f"{r}.n_gpus_per_node": 1,
        f"{a}.strategy": "fsdp2",
        # float32 throughout: CPU matmuls in bfloat16 fall back to slow reference kernels,
        # and the replica (float32) then computes the same log-probs as the actor.
        f"+{a}.fsdp_config.mixed_precision.param_dtype": "fp32",
        f"+{a}.fsdp_config.mixed_precision.reduce_dtype": "fp32",
        f"+{a}.fsdp_config.mixed_precision.buffer_dtype": "fp32",
        f"{a}.fsdp_config.use_torch_compile": False,
        # verl's chunked log-prob/entropy head (torch backend, 512 tokens a chunk) instead of
        # whole (tokens x 151,936) logits: the smoke's update worker peaks at 3.4 GB instead
        # of 12.8, which left a 24 GiB machine to Ray's OOM killer (docs/verl_notes.md).
        "actor_rollout_ref.model.use_fused_kernels": True,
        "actor_rollout_ref.model.fused_kernel_options.impl_backend": "torch",
        # One process each for agent loops, reward loops and data loading (verl: 8 each).
        f"{r}.agent.num_workers": 1,
        "reward.num_workers": 1,
        "data.dataloader_num_workers": 0,
        # Two CPUs: more storage units hang TransferQueue (docs/design.md, verl facts).
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        # Scheduling slots, not cores: each of verl's placement-group bundles asks for 3
        # CPUs, more than a 2-core machine has.
        "ray_kwargs.ray_init.num_cpus": 16,
        "+ray_kwargs.ray_init.num_gpus": v.n_gpus_per_node * v.nnodes + 1,
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM": PLATFORM_NAME,
        # Ray gives each actor OMP_NUM_THREADS = its num_cpus (1), so torch in the FSDP
        # worker and the replica used one core of the machine. They take turns (the
        # trainer is synchronous), so each may use every core: half the step time on 2.
        "+ray_kwargs.ray_init.runtime_env.env_vars.OMP_NUM_THREADS": str(os.cpu_count() or 1),
    }
    if v.cpu_rollout == "vllm":  # verl's hybrid vLLM rollout on vLLM's CPU build
        keys |= vllm_cpu_keys(TRAINER_MODE_CPU_VLLM)
    elif v.cpu_rollout != "hf":
        raise ValueError(f"verl.cpu_rollout must be hf or vllm, not {v.cpu_rollout!r}")
    return keys


def token_budgets(run_cfg) -> tuple[int, int]:
    """(update, log-prob) token budgets per GPU micro-batch under dynamic batching; each at
    least the context limit, which bounds every sample (prompt + response)."""
    v, context = run_cfg.verl, run_cfg.trainer.limits.max_context_tokens
    update = v.update_max_tokens_per_gpu or context
    logprob = v.logprob_max_tokens_per_gpu or context
    for key, budget in (("update", update), ("logprob", logprob)):
        if budget < context:
            raise ValueError(
                f"verl.{key}_max_tokens_per_gpu {budget} is below the context limit "
                f"(trainer.limits.max_context_tokens {context}): verl never splits a sample, "
                "and a longest episode would not fit a micro-batch"
            )
    return update, logprob


def batching_keys(run_cfg) -> dict:
    """Micro-batching of the actor update and the old/reference log-prob passes: by token
    budget (dynamic batching) or a fixed number of samples."""
    v = run_cfg.verl
    a, r, ref = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
    if not v.dynamic_batching:
        return {
            f"{a}.use_dynamic_bsz": False,
            f"{a}.ppo_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
            f"{r}.log_prob_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
            f"{ref}.log_prob_micro_batch_size_per_gpu": v.micro_batch_size_per_gpu,
        }
    update, logprob = token_budgets(run_cfg)
    return {
        f"{a}.use_dynamic_bsz": True,
        f"{a}.ppo_max_token_len_per_gpu": update,
        f"{r}.log_prob_use_dynamic_bsz": True,
        f"{r}.log_prob_max_token_len_per_gpu": logprob,
        f"{ref}.log_prob_use_dynamic_bsz": True,
        f"{ref}.log_prob_max_token_len_per_gpu": logprob,
    }


def checkpoint_keys(run_cfg) -> dict:
    """What each checkpoint holds: the FSDP shards, optimizer and trainer state verl resumes
    from, and (verl.export_hf_weights) the policy as Hugging Face weights."""
    contents = ["model", "optimizer", "extra"]
    a = "actor_rollout_ref.actor.checkpoint"
    return {
        f"{a}.save_contents": contents + (["hf_model"] if run_cfg.verl.export_hf_weights else []),
        f"{a}.load_contents": contents,
    }


def storage_units(run_cfg) -> int:
    return STORAGE_UNITS_PER_NODE * run_cfg.verl.nnodes


def reserved_cpus(n_gpus: int, replicas: int, units: int) -> int:
    """CPUs verl's placement groups and TransferQueue actors hold for the whole run: the
    GPU bundles, standalone rollout replicas, the storage units and TransferQueue's
    controller. Any other actor needs one free CPU to be placed."""
    return CPUS_PER_GPU * n_gpus + CPUS_PER_ROLLOUT_REPLICA * replicas + units + 1


def ray_cpus(run_cfg) -> int:
    """CPUs of a Ray the launcher starts (one node): the machine's, or what verl reserves
    plus one when that is more. Ray's CPUs are scheduling slots, not cores: verl's GPU
    workers mostly wait on their GPU, and with fewer slots than it reserves Ray waits
    forever for a placement group. A cluster started with `ray start` keeps its own count
    (`--num-cpus`), which the preflight checks."""
    v = run_cfg.verl
    needed = reserved_cpus(v.n_gpus_per_node * v.nnodes, 0, storage_units(run_cfg)) + 1
    return max(os.cpu_count() or 1, needed)


def mapped_keys(run_cfg, run_dir: Path, attention: Attention | None = None) -> dict:
    """verl key -> value for one run (the mapping: docs/gpu.md, "The run config in verl's
    keys"). `attention`: the choice for this machine, found from what imports unless given
    (tests)."""
    t, v = run_cfg.trainer, run_cfg.verl
    if v.device not in ("cuda", "cpu"):
        raise ValueError(f"verl.device must be cuda or cpu, not {v.device!r}")
    if attention is None:
        attention = choose_attention(v.device, flash_attn_version())
    run_dir = Path(run_dir).absolute()
    logger = ["console"] + ([] if t.logging.wandb == "disabled" else ["wandb"])
    a, r, ref = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
    return {
        **FIXED,
        "actor_rollout_ref.model.path": model_path(run_cfg, run_dir),
        "actor_rollout_ref.model.enable_gradient_checkpointing": t.model.gradient_checkpointing,
        # Absolute: Ray workers need not share the launcher's working directory.
        "data.train_files": str(Path(t.data.train_file).absolute()),
        "data.val_files": str(Path(t.data.val_file).absolute()),
        "data.train_batch_size": t.data.train_batch_size,
        "data.seed": t.data.seed,
        "data.train_max_samples": t.data.max_train_tasks or -1,
        "data.val_max_samples": t.data.max_val_tasks or -1,
        "data.max_prompt_length": v.max_prompt_length,
        "data.max_response_length": t.limits.max_context_tokens,
        f"{r}.name": v.rollout_engine,
        "reward.reward_model.rollout.name": v.rollout_engine,  # unused, but verl has no default
        f"{r}.n": t.rollout.n,
        f"{r}.temperature": t.rollout.temperature,
        f"{r}.top_p": t.rollout.top_p,
        f"{r}.seed": t.rollout.seed,
        f"{r}.tensor_model_parallel_size": v.tensor_parallel_size,
        f"{r}.gpu_memory_utilization": v.gpu_memory_utilization,
        # The driver never lets prompt + response exceed the context limit, so vLLM needs
        # no more; left unset it sizes for the model's whole window (vllm_async_server.py).
        f"{r}.max_model_len": t.limits.max_context_tokens,
        f"{r}.val_kwargs.temperature": t.validation.temperature,
        f"{r}.val_kwargs.do_sample": t.validation.temperature > 0,
        f"{a}.optim.lr": t.optim.lr,
        f"{a}.optim.weight_decay": t.optim.weight_decay,
        f"{a}.optim.clip_grad": t.optim.grad_clip,
        f"{a}.ppo_mini_batch_size": t.optim.mini_batch_size,
        f"{a}.clip_ratio_low": t.loss.clip_ratio_low,
        f"{a}.clip_ratio_high": t.loss.clip_ratio_high,
        f"{a}.clip_ratio_c": t.loss.clip_ratio_c,
        f"{a}.loss_agg_mode": t.loss.loss_agg_mode,
        f"{a}.use_kl_loss": t.loss.use_kl_loss,
        f"{a}.kl_loss_coef": t.loss.kl_loss_coef,
        f"{a}.kl_loss_type": t.loss.kl_loss_type,
        f"{a}.entropy_coeff": t.loss.entropy_coeff,
        f"{a}.fsdp_config.param_offload": v.param_offload,
        f"{a}.fsdp_config.optimizer_offload": v.optimizer_offload,
        f"{ref}.fsdp_config.param_offload": v.param_offload,
        **batching_keys(run_cfg),
        **checkpoint_keys(run_cfg),
        **attention_keys(attention),
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": storage_units(run_cfg),
        "ray_kwargs.ray_init.num_cpus": ray_cpus(run_cfg),
        "algorithm.norm_adv_by_std_in_grpo": t.advantage.norm_by_std,
        "trainer.total_epochs": t.total_epochs,
        "trainer.total_training_steps": t.total_steps or None,
        "trainer.test_freq": t.validation.test_freq,
        "trainer.val_before_train": t.validation.before_train,
        "trainer.save_freq": t.checkpoint.save_freq or -1,
        "trainer.resume_mode": "auto" if t.checkpoint.resume else "disable",
        "trainer.max_actor_ckpt_to_keep": 1 if t.checkpoint.keep_only_best else None,
        "trainer.project_name": t.logging.project,
        "trainer.experiment_name": run_cfg.name,
        "trainer.logger": logger,
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        "trainer.validation_data_dir": str(run_dir / "verl_validation"),
        "trainer.n_gpus_per_node": v.n_gpus_per_node,
        "trainer.nnodes": v.nnodes,
    } | (cpu_backend_keys(run_cfg) if v.device == "cpu" else {})


def seal_section(run_cfg, env_url: str, run_dir: Path) -> SealSection:
    return SealSection(
        env_url=env_url,
        run_dir=str(Path(run_dir).absolute()),
        client=OmegaConf.to_object(run_cfg.service.client),
        dump_advantages=run_cfg.verl.dump_advantages,
        trainer=OmegaConf.to_object(run_cfg.trainer),
    )


def compose_verl_config(
    run_cfg, env_url: str, run_dir: Path, attention: Attention | None = None
) -> DictConfig:
    """verl's config for the run, validated (raises with the offending key otherwise)."""
    mapped = mapped_keys(run_cfg, run_dir, attention)
    env_url = run_cfg.verl.env_url or env_url
    overrides = [hydra_override(k, value) for k, value in mapped.items()]
    overrides += list(run_cfg.verl.overrides)
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    with open_dict(config):
        config.seal = OmegaConf.structured(seal_section(run_cfg, env_url, run_dir))
    validate(config)
    return config


def validate(config: DictConfig) -> None:
    """verl's own checks, plus what verl would find only on the GPU nodes."""
    missing = sorted(OmegaConf.missing_keys(config))
    if missing:
        raise ValueError(f"verl config has keys without a value: {missing}")
    validate_config(config, need_reference_policy(config), need_critic(config))
    for section in DATACLASS_SECTIONS:
        omega_conf_to_dataclass(OmegaConf.select(config, section))
    SealSection.from_config(config)
    context = config.seal.trainer.limits.max_context_tokens
    arr = config.actor_rollout_ref
    if context > arr.rollout.response_length:
        raise ValueError("rollout.response_length must hold max_context_tokens (agent_loop.py)")
    if (arr.rollout.max_model_len or 0) < context:
        raise ValueError(
            f"rollout.max_model_len {arr.rollout.max_model_len} is below max_context_tokens "
            f"{context}: vLLM would refuse the episodes' longest requests"
        )
    # verl checks this only without dynamic batching (verl/utils/config.py); with it, the
    # actor's mini-batch split asserts it at the first update (engine_workers.py).
    n_gpus = config.trainer.n_gpus_per_node * config.trainer.nnodes
    for what, samples in (
        ("data.train_batch_size x rollout.n", config.data.train_batch_size * arr.rollout.n),
        ("actor.ppo_mini_batch_size x rollout.n", arr.actor.ppo_mini_batch_size * arr.rollout.n),
    ):
        if samples % n_gpus:
            raise ValueError(f"{what} ({samples}) must be divisible by the {n_gpus} GPUs")
    budgets = {
        "actor.ppo_max_token_len_per_gpu": (arr.actor.use_dynamic_bsz, arr.actor.ppo_max_token_len_per_gpu),
        "rollout.log_prob_max_token_len_per_gpu": (arr.rollout.log_prob_use_dynamic_bsz, arr.rollout.log_prob_max_token_len_per_gpu),
        "ref.log_prob_max_token_len_per_gpu": (arr.ref.log_prob_use_dynamic_bsz, arr.ref.log_prob_max_token_len_per_gpu),
    }  # fmt: skip
    for key, (dynamic, budget) in budgets.items():
        if dynamic and budget < context:
            raise ValueError(
                f"{key} {budget} is below max_context_tokens {context}: a longest sample "
                "would not fit one micro-batch"
            )


def hydra_override(key: str, value) -> str:
    """`key=value` in Hydra's override grammar; strings are quoted, so paths and names
    with special characters stay literal."""
    return f"{key}={hydra_value(value)}"


def hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"
