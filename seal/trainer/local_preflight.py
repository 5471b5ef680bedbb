"""The local trainer's preflight: is the model on this machine's disk (model_files.py), and
do it and the `trainer` section fit the one GPU it trains on? Checked before any weight
loads (LocalTrainer) and by `launcher.py --preflight` for a `local` job, from the model's
config alone (gpu_memory.py's estimate). A refusal names the download command, or what would
fit: a model of at most so many parameters of this shape, or verl on one GPU with its
parameters and optimizer offloaded to the CPU.
"""

from __future__ import annotations

from pathlib import Path

from seal.trainer.gpu_memory import (
    CUDA_CONTEXT_GIB,
    GIB,
    LocalShape,
    ModelShape,
    largest_local_model,
    local_trainer_memory,
)
from seal.trainer.model_files import local_model_dir, model_files_check
from seal.trainer.preflight_rows import (
    BLOCKER,
    OK,
    SKIP,
    WARN,
    Check,
    linear_attention_check,
    raise_on_blockers,
    render,
)

VERL_ON_ONE_GPU = (
    "-- job=verl verl.n_gpus_per_node=1 verl.param_offload=true verl.optimizer_offload=true"
)
NAMES = ("memory: local update", "memory: local rollout")


def check_local_memory(model: ModelShape, run: LocalShape, card_gib: float) -> list[Check]:
    """The update's and the rollout's estimates against one card of `card_gib`."""
    update, rollout = local_trainer_memory(model, run, card_gib)
    rows = []
    if update.fits:
        rows.append(Check(NAMES[0], OK, update.describe()))
    else:
        largest = largest_local_model(model, run, card_gib)
        rows.append(
            Check(
                NAMES[0],
                BLOCKER,
                f"{update.describe()}. Fits: a model of up to ~{largest:.1f}B parameters of "
                f"this shape, or verl on this one GPU with offload ({VERL_ON_ONE_GPU})",
            )
        )
    if rollout.fits:
        rows.append(Check(NAMES[1], OK, rollout.describe()))
    else:
        kv_each = model.sequence_bytes(run.context_tokens, run.compute_bytes)
        room = rollout.limit_gib * GIB - model.params * run.weight_bytes()
        batch = int((room - CUDA_CONTEXT_GIB * GIB) // kv_each)
        status = WARN if batch >= 1 else BLOCKER
        fix = (
            f"at most {batch} generations at the context limit fit: "
            f"trainer.rollout.max_batch_size={batch}"
            if batch >= 1
            else "not one generation at the context limit fits"
        )
        rows.append(Check(NAMES[1], status, f"{rollout.describe()}; {fix}"))
    if model.max_positions and run.context_tokens > model.max_positions:
        rows.append(
            Check(
                "context",
                BLOCKER,
                f"trainer.limits.max_context_tokens {run.context_tokens} exceeds the model's "
                f"max_position_embeddings {model.max_positions}",
            )
        )
    return rows


def cuda_card(device) -> tuple[str, float]:
    """The name and memory (GiB) of the CUDA device `device`."""
    import torch

    properties = torch.cuda.get_device_properties(device)
    return properties.name, properties.total_memory / GIB


def local_checks(t) -> list[Check]:
    """The checks for the `trainer` section `t` on the device it resolves to (no GPU: the
    rows say so): the model's files on this machine's disk first, then its memory."""
    from transformers import AutoConfig

    from seal.trainer.model import TINY_MODELS, model_config, resolve_device

    files = model_files_check(t.model.path, t.model.tokenizer)
    if files.status == BLOCKER:
        return [files] + [Check(name, SKIP, "the model's config is not here") for name in NAMES]
    device = resolve_device(t.model.device)
    if device.type != "cuda":
        skipped = [Check(name, SKIP, f"device {device}: no GPU memory to check") for name in NAMES]
        return [files, *skipped]
    name, card = cuda_card(device)
    if t.model.path in TINY_MODELS:
        config = model_config(t.model)
    else:  # from the folder found: the name would send transformers to the hub first
        config = AutoConfig.from_pretrained(local_model_dir(t.model.path))
    shape = ModelShape.from_hf_config(config)
    rows = [files, Check("GPU", OK, f"{device}: {name}, {card:.1f} GiB")]
    rows += linear_attention_check(shape.linear_layers)
    return rows + check_local_memory(shape, LocalShape.from_trainer(t), card)


def refuse_if_it_cannot_fit(t) -> None:
    """Before the local trainer loads a model: the table and PreflightFailed on a blocker
    (on the CPU, only the model's files are checked)."""
    checks = local_checks(t)
    if any(c.status == BLOCKER for c in checks):
        print(render(checks))
    raise_on_blockers(checks, "estimates: seal/trainer/gpu_memory.py")


def run_local_preflight(cfg, env_url: str, run, split_file: Path) -> None:
    """`launcher.py --preflight` for a `local` job: the table; raises on a blocker."""
    from omegaconf import OmegaConf

    checks = local_checks(OmegaConf.to_object(cfg.trainer))
    print(render(checks))
    raise_on_blockers(checks, "estimates: seal/trainer/gpu_memory.py")
    print(f"[local] preflight passed: no blocker in {len(checks)} checks")
