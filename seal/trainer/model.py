"""Loading the policy, its frozen reference and the tokenizer for the local trainer.

The policy is loaded as float32 master weights whatever `trainer.model.dtype` says; that key
is the compute dtype of the copy generation and the update run on (precision.py), and of
the frozen reference."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.trainer.config import ModelSettings
from seal.trainer.precision import MASTER_DTYPE, cast_parameters

TINY = "tiny-qwen2"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(cfg: ModelSettings):
    source = cfg.tokenizer or (str(SHIPPED_TOKENIZER) if cfg.path == TINY else cfg.path)
    return AutoTokenizer.from_pretrained(source)


def tiny_qwen2_config(cfg: ModelSettings, tokenizer=None) -> Qwen2Config:
    """The tiny model's config (`cfg.tiny`); its end and padding ids from `tokenizer`."""
    tiny = cfg.tiny
    return Qwen2Config(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        num_hidden_layers=tiny.num_hidden_layers,
        num_attention_heads=tiny.num_attention_heads,
        num_key_value_heads=tiny.num_key_value_heads,
        intermediate_size=tiny.intermediate_size,
        tie_word_embeddings=True,
        eos_token_id=getattr(tokenizer, "eos_token_id", None),
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
    )


def model_config(cfg: ModelSettings):
    """The policy's Hugging Face config, without its weights (the tiny model's from `cfg`)."""
    if cfg.path == TINY:
        return tiny_qwen2_config(cfg)
    return AutoConfig.from_pretrained(cfg.path)


def build_tiny_qwen2(cfg: ModelSettings, tokenizer) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 whose vocabulary matches the Qwen2.5 tokenizer."""
    config = tiny_qwen2_config(cfg, tokenizer)
    torch.manual_seed(cfg.tiny.seed)
    return Qwen2ForCausalLM(config)


def save_tiny_qwen2(cfg: ModelSettings, directory: Path) -> Path:
    """Write the tiny model and its tokenizer as a Hugging Face model directory, for
    backends that load a model by path (verl). Deterministic: same settings, same weights."""
    tokenizer = load_tokenizer(cfg)
    build_tiny_qwen2(cfg, tokenizer).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def compute_dtype(cfg: ModelSettings) -> torch.dtype:
    return DTYPES[cfg.dtype]


def load_policy(cfg: ModelSettings, tokenizer, checkpoint: Path | None = None) -> torch.nn.Module:
    """The policy's float32 master weights from `checkpoint` if given, else from `cfg.path`
    (or the tiny model)."""
    dtype = MASTER_DTYPE
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


def frozen_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The reference policy for the KL loss: the starting weights in the compute dtype,
    never updated."""
    reference = cast_parameters(copy.deepcopy(model), dtype).eval()
    for p in reference.parameters():
        p.requires_grad_(False)
    return reference
