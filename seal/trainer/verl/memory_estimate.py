"""A verl run's shape (what the preflight needs from its config) and its memory per GPU:
the training and rollout phases, the KV cache's capacity in tokens, and the largest
gpu_memory_utilization that fits. The model behind it: docs/gpu.md, "Memory: what the
preflights estimate"; the preflight's rows: preflight.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

from seal.trainer.gpu_memory import (
    CUDA_CONTEXT_GIB,
    DYNAMIC_HEADROOM,
    GIB,
    NCCL_GIB,
    POOL_HEADROOM,
    MemoryNeed,
    ModelShape,
    activation_bytes,
)

VLLM_OVERHEAD_GIB = 2.5
"""vLLM's non-KV memory besides the weights, inside its share (its CUDA context, profiling
activations, CUDA graphs)."""


@dataclass(frozen=True)
class RunShape:
    """What the checks need from the run's verl config."""

    device: str
    n_gpus_per_node: int
    nnodes: int
    tensor_parallel: int
    gpu_memory_utilization: float
    max_model_len: int
    episodes_per_step: int
    update_tokens: int
    logprob_tokens: int
    gradient_checkpointing: bool
    param_offload: bool
    optimizer_offload: bool
    storage_units: int
    rollout_replicas: int
    """Standalone rollout replicas (their own CPU bundles): the CPU test backend's one."""
    remove_padding: bool = True
    """verl's use_remove_padding (flash-attn); off (sdpa), a micro-batch is padded and masked."""

    @classmethod
    def from_config(cls, config) -> RunShape:
        arr, tr = config.actor_rollout_ref, config.trainer
        context = config.seal.trainer.limits.max_context_tokens
        actor, rollout = arr.actor, arr.rollout
        update = actor.ppo_max_token_len_per_gpu if actor.use_dynamic_bsz else context
        logprob = (
            rollout.log_prob_max_token_len_per_gpu if rollout.log_prob_use_dynamic_bsz else context
        )
        return cls(
            device=tr.device,
            n_gpus_per_node=tr.n_gpus_per_node,
            nnodes=tr.nnodes,
            tensor_parallel=rollout.tensor_model_parallel_size,
            gpu_memory_utilization=rollout.gpu_memory_utilization,
            max_model_len=rollout.max_model_len,
            episodes_per_step=config.data.train_batch_size * rollout.n,
            update_tokens=update,
            logprob_tokens=logprob,
            gradient_checkpointing=arr.model.enable_gradient_checkpointing,
            param_offload=actor.fsdp_config.param_offload,
            optimizer_offload=actor.fsdp_config.optimizer_offload,
            storage_units=config.transfer_queue.backend.SimpleStorage.num_data_storage_units,
            rollout_replicas=0 if tr.device != "cpu" else 1,
            remove_padding=arr.model.use_remove_padding,
        )

    @property
    def n_gpus(self) -> int:
        return self.n_gpus_per_node * self.nnodes


def memory_estimate(model: ModelShape, run: RunShape, gpu_gib: float) -> dict:
    """Per GPU: the training and rollout phases (MemoryNeed), the KV cache's capacity in
    tokens, and the largest gpu_memory_utilization whose rollout phase fits (see the module
    docstring for the model)."""
    p = model.params
    state = (
        4 * (not run.param_offload) + 4 + 8 * (not run.optimizer_offload)
    )  # weights, grads, Adam
    resident = 4 * (not run.param_offload) + 8 * (not run.optimizer_offload)  # between steps
    tokens = max(run.update_tokens, run.logprob_tokens)
    logits = tokens * model.vocab * 4
    activations = activation_bytes(model, run.update_tokens, run.gradient_checkpointing)
    root = model.outer_params * (2 + 2)  # gathered whole: bf16 weights and gradients
    # sdpa with padding: the micro-batch's 4D mask, boolean and as the bf16 bias it becomes.
    mask = 0 if run.remove_padding else 3 * tokens**2
    contexts = 2 * CUDA_CONTEXT_GIB * GIB  # the FSDP worker and vLLM asleep
    training = state * p / run.n_gpus + logits + activations + root + mask + contexts
    training += NCCL_GIB * GIB
    sharded = f"{state} bytes per parameter over {run.n_gpus} GPUs"
    padding = "" if run.remove_padding else f", sdpa's mask ({mask / GIB:.1f})"
    weights_vllm = 2 * p / run.tensor_parallel
    vllm = run.gpu_memory_utilization * gpu_gib * GIB
    worker = resident * p / run.n_gpus + (CUDA_CONTEXT_GIB + NCCL_GIB) * GIB
    largest = (POOL_HEADROOM * gpu_gib * GIB - worker) / (gpu_gib * GIB)
    return {
        "training": MemoryNeed(
            training / GIB,
            gpu_gib,
            DYNAMIC_HEADROOM,
            f"{sharded} ({state * p / run.n_gpus / GIB:.1f}), logits ({logits / GIB:.1f}) and "
            f"activations ({activations / GIB:.1f}) of {tokens} tokens, FSDP's root unit "
            f"whole ({root / GIB:.1f}){padding}, 2 CUDA contexts and NCCL "
            f"({(contexts / GIB) + NCCL_GIB:.1f})",
        ),
        "rollout": MemoryNeed(
            (worker + vllm) / GIB,
            gpu_gib,
            POOL_HEADROOM,
            f"the actor's weights and optimizer ({resident * p / run.n_gpus / GIB:.1f}), its "
            f"CUDA context and NCCL ({CUDA_CONTEXT_GIB + NCCL_GIB:.1f}) beside vLLM's "
            f"{run.gpu_memory_utilization:.0%} ({vllm / GIB:.1f})",
        ),
        "vllm_weights_gib": weights_vllm / GIB,
        "kv_tokens": kv_tokens_at(model, run, gpu_gib, run.gpu_memory_utilization),
        "largest_utilization": math.floor(largest * 100) / 100,
    }


def kv_tokens_at(model: ModelShape, run: RunShape, gpu_gib: float, utilization: float) -> float:
    """The KV cache's capacity in tokens with vLLM at `utilization` of the card."""
    kv = utilization * gpu_gib * GIB - 2 * model.params / run.tensor_parallel
    # A hybrid model's fixed state per sequence, spread over a full-length episode's tokens.
    per_token = model.sequence_bytes(run.max_model_len) / run.max_model_len
    return max(0.0, (kv - VLLM_OVERHEAD_GIB * GIB) / per_token)
