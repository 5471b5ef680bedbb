"""Loading the policy, its frozen reference and the tokenizer for the local trainer."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.trainer.config import ModelSettings

TINY = "tiny-qwen2"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(cfg: ModelSettings):
    source = cfg.tokenizer or (str(SHIPPED_TOKENIZER) if cfg.path == TINY else cfg.path)
    return AutoTokenizer.from_pretrained(source)


def build_tiny_qwen2(cfg: ModelSettings, tokenizer) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 whose vocabulary matches the Qwen2.5 tokenizer."""
    tiny = cfg.tiny
    config = Qwen2Config(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        num_hidden_layers=tiny.num_hidden_layers,
        num_attention_heads=tiny.num_attention_heads,
        num_key_value_heads=tiny.num_key_value_heads,
        intermediate_size=tiny.intermediate_size,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(tiny.seed)
    return Qwen2ForCausalLM(config)


def save_tiny_qwen2(cfg: ModelSettings, directory: Path) -> Path:
    """Write the tiny model and its tokenizer as a Hugging Face model directory, for
    backends that load a model by path (verl). Deterministic: same settings, same weights."""
    tokenizer = load_tokenizer(cfg)
    build_tiny_qwen2(cfg, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def load_policy(cfg: ModelSettings, tokenizer, checkpoint: Path | None = None) -> torch.nn.Module:
    """The policy from `checkpoint` if given, else from `cfg.path` (or the tiny model)."""
    dtype = DTYPES[cfg.dtype]
    if checkpoint is not None:
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype)
    elif cfg.path == TINY:
        model = build_tiny_qwen2(cfg, tokenizer).to(dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(cfg.path, dtype=dtype)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(resolve_device(cfg.device))


def gpu_peak_gb(model: torch.nn.Module) -> float | None:
    """The peak GPU memory torch allocated on `model`'s device since the last call, in GB,
    and a new count started; None when the model is not on a CUDA device."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(device) / 1e9
    torch.cuda.reset_peak_memory_stats(device)
    return peak


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The reference policy for the KL loss: the starting weights, never updated."""
    reference = copy.deepcopy(model).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference
