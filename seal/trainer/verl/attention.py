"""Which attention implementation verl's actor uses: flash-attention when it imports, else
PyTorch's sdpa.

verl 0.9.1 asks Hugging Face for `attn_implementation="flash_attention_2"` unless the model's
`override_config` says otherwise (verl/workers/config/model.py), and its remove-padding path
(packed sequences without pad tokens) imports `flash_attn.bert_padding`
(verl/utils/torch_functional.py). `install.sh --gpu` installs flash-attn when a prebuilt wheel
or a source build works and leaves it out otherwise, so the launcher decides from what
imports here, on the machine that launches (every node runs the same venv), and prints it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Attention:
    implementation: str
    """Hugging Face's attn_implementation for the actor and reference models."""
    remove_padding: bool
    """verl's use_remove_padding: pack micro-batches without pad tokens (needs flash-attn)."""
    reason: str
    """One line for the launcher to print."""


def flash_attn_version() -> str | None:
    """flash-attn's version when it and the module verl's remove-padding path uses import;
    None otherwise (not installed, or built against another torch: an ImportError too)."""
    try:
        flash_attn = importlib.import_module("flash_attn")
        importlib.import_module("flash_attn.bert_padding")
    except ImportError:
        return None
    return getattr(flash_attn, "__version__", "unknown")


def choose_attention(device: str, flash_attn: str | None) -> Attention:
    """The attention for a run on `device` (cuda | cpu) given flash-attn's version (None:
    not importable)."""
    if device == "cpu":
        return Attention("sdpa", False, "CPU backend: sdpa attention, remove-padding off")
    if flash_attn is not None:
        return Attention(
            "flash_attention_2",
            True,
            f"flash-attn {flash_attn}: flash_attention_2, remove-padding on",
        )
    return Attention(
        "sdpa",
        False,
        "flash-attn does not import: sdpa attention with remove-padding off (slower; each "
        "micro-batch is padded to its longest sample, so peak memory can exceed the token "
        "budget: lower verl.update_max_tokens_per_gpu if the update runs out of memory)",
    )


def attention_keys(attention: Attention) -> dict:
    """verl keys of that choice (the reference model reads the same model section)."""
    return {
        "actor_rollout_ref.model.use_remove_padding": attention.remove_padding,
        "+actor_rollout_ref.model.override_config.attn_implementation": attention.implementation,
    }
