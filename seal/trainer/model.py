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
    Qwen3_5ForCausalLM,
    Qwen3_5TextConfig,
)

from seal.formats import qwen35
from seal.formats.registry import TINY_MODEL as TINY
from seal.formats.registry import TINY_QWEN35
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.trainer.precision import MASTER_DTYPE, cast_parameters
from seal.trainer_config import ModelSettings

TINY_MODELS = (TINY, TINY_QWEN35)
"""The random models built from config (`trainer.model.tiny`): nothing is downloaded."""
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def load_tokenizer(cfg: ModelSettings):
    if cfg.tokenizer:
        return AutoTokenizer.from_pretrained(cfg.tokenizer)
    if cfg.path == TINY_QWEN35:
        return qwen35_stand_in_tokenizer()
    return AutoTokenizer.from_pretrained(str(SHIPPED_TOKENIZER) if cfg.path == TINY else cfg.path)


def qwen35_stand_in_tokenizer():
    """Qwen3.5's tokenizer as far as it can be built offline, for tiny-qwen3.5 and the CPU
    tests: the shipped Qwen2.5 tokenizer plus the tokens Qwen3.5's template writes that it
    lacks (`<think>`, `</think>`, `<tool_response>`, `</tool_response>`), with Qwen3.5's
    chat template. The template and every marker's being one token are Qwen3.5's; the
    vocabulary (151,669 ids against 248,077, another pre-tokenizer) and so the ids and
    counts are not (docs/tool_formats.md, "Qwen3.5")."""
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    tokenizer.add_tokens(list(qwen35.ADDED_TOKENS))
    tokenizer.chat_template = qwen35.template()
    return tokenizer


def tiny_qwen2_config(cfg: ModelSettings, tokenizer=None) -> Qwen2Config:
    """The tiny Qwen2's config (`cfg.tiny`); its end and padding ids from `tokenizer`."""
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


def tiny_qwen35_config(cfg: ModelSettings, tokenizer=None) -> Qwen3_5TextConfig:
    """The tiny Qwen3.5's config (`cfg.tiny`): Qwen3.5's hybrid layout, a full-attention
    layer after every `full_attention_interval - 1` Gated DeltaNet layers."""
    tiny = cfg.tiny
    if tiny.num_hidden_layers < tiny.full_attention_interval:
        raise ValueError(
            f"tiny-qwen3.5 with {tiny.num_hidden_layers} layers has no full-attention layer "
            f"(one in every {tiny.full_attention_interval}): set trainer.model.tiny."
            f"num_hidden_layers to at least {tiny.full_attention_interval}"
        )
    head_dim = tiny.hidden_size // tiny.num_attention_heads
    return Qwen3_5TextConfig(
        vocab_size=tiny.vocab_size,
        hidden_size=tiny.hidden_size,
        num_hidden_layers=tiny.num_hidden_layers,
        num_attention_heads=tiny.num_attention_heads,
        num_key_value_heads=tiny.num_key_value_heads,
        head_dim=head_dim,
        intermediate_size=tiny.intermediate_size,
        linear_num_key_heads=tiny.linear_num_key_heads,
        linear_num_value_heads=tiny.linear_num_value_heads,
        linear_key_head_dim=head_dim,
        linear_value_head_dim=head_dim,
        full_attention_interval=tiny.full_attention_interval,
        tie_word_embeddings=True,
        eos_token_id=getattr(tokenizer, "eos_token_id", None),
        pad_token_id=getattr(tokenizer, "pad_token_id", None),
    )


def tiny_config(cfg: ModelSettings, tokenizer=None):
    """The config of the tiny model `cfg.path` names."""
    return (tiny_qwen35_config if cfg.path == TINY_QWEN35 else tiny_qwen2_config)(cfg, tokenizer)


def model_config(cfg: ModelSettings):
    """The policy's Hugging Face config, without its weights (the tiny model's from `cfg`)."""
    if cfg.path in TINY_MODELS:
        return tiny_config(cfg)
    return AutoConfig.from_pretrained(cfg.path)


def base_model_kind(cfg: ModelSettings) -> str:
    """What the run record says the tiny model `cfg.path` names is."""
    return f"random {'Qwen3.5' if cfg.path == TINY_QWEN35 else 'Qwen2'} built from config"


def build_tiny_model(cfg: ModelSettings, tokenizer) -> torch.nn.Module:
    """The tiny model `cfg.path` names, randomly initialised (the same for the same seed),
    its vocabulary covering the shipped tokenizer's."""
    config = tiny_config(cfg, tokenizer)
    torch.manual_seed(cfg.tiny.seed)
    if cfg.path == TINY_QWEN35:
        return Qwen3_5ForCausalLM(config)
    return Qwen2ForCausalLM(config)


def save_tiny_model(cfg: ModelSettings, directory: Path) -> Path:
    """Write the tiny model and its tokenizer as a Hugging Face model directory, for
    backends that load a model by path (verl). Deterministic: same settings, same weights."""
    tokenizer = load_tokenizer(cfg)
    build_tiny_model(cfg, tokenizer).save_pretrained(directory)
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
    elif cfg.path in TINY_MODELS:
        model = build_tiny_model(cfg, tokenizer).to(dtype)
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
