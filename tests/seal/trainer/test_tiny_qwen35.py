"""tiny-qwen3.5 (seal/trainer/model.py) and the hybrid layers in the memory estimates
(seal/trainer/gpu_memory.py): built from config offline, with transformers' torch fallback for
the Gated DeltaNet layers (no fla, no causal-conv1d), it trains and generates on the CPU;
its parameters and per-sequence state are what the estimates count."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from seal.formats.registry import default_format
from seal.trainer import preflight_rows
from seal.trainer.gpu_memory import ModelShape
from seal.trainer.model import (
    base_model_kind,
    build_tiny_model,
    load_tokenizer,
    model_config,
)
from seal.trainer.preflight_rows import OK, WARN, linear_attention_check
from seal.trainer_config import ModelSettings


def tiny(**tiny_overrides) -> ModelSettings:
    cfg = ModelSettings(path="tiny-qwen3.5")
    cfg.tiny.num_hidden_layers = 4
    for key, value in tiny_overrides.items():
        setattr(cfg.tiny, key, value)
    return cfg


def test_tiny_qwen35_is_a_hybrid_qwen35_of_the_shipped_vocabulary():
    cfg = tiny()
    tokenizer = load_tokenizer(cfg)
    model = build_tiny_model(cfg, tokenizer)
    assert isinstance(model, Qwen3_5ForCausalLM)
    assert model.config.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert model.config.vocab_size >= len(tokenizer)
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert default_format(cfg.path) == "bfcl_qwen_fc_qwen3.5"
    assert base_model_kind(cfg) == "random Qwen3.5 built from config"
    same = build_tiny_model(cfg, tokenizer)  # deterministic: the seed's weights
    assert all(
        torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters(), strict=True)
    )


def test_tiny_qwen35_without_a_full_attention_layer_is_refused():
    with pytest.raises(ValueError, match="num_hidden_layers to at least 4"):
        model_config(tiny(num_hidden_layers=3))


def test_tiny_qwen35_trains_and_generates_on_the_cpu():
    cfg = tiny()
    model = build_tiny_model(cfg, load_tokenizer(cfg))
    ids = torch.randint(0, 151000, (2, 96))
    loss = model(ids, labels=ids).loss
    loss.backward()
    grads = {
        n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0
    }
    assert any("linear_attn" in n for n in grads) and any("self_attn" in n for n in grads)
    out = model.generate(ids[:, :16], max_new_tokens=8, do_sample=False)
    assert out.shape == (2, 24)
    # Generating with the recurrent state equals a full forward over the same ids.
    with torch.no_grad():
        logits = model(out).logits[:, 15:-1].argmax(-1)
    assert torch.equal(logits, out[:, 16:])


HYBRID = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 96,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 12,
}


@pytest.mark.parametrize("tied", [True, False])
def test_the_estimate_counts_a_hybrid_model_s_parameters(tied):
    config = Qwen3_5TextConfig(**HYBRID, tie_word_embeddings=tied)
    real = sum(p.numel() for p in Qwen3_5ForCausalLM(config).parameters())
    estimated = ModelShape.from_hf_config(config).params
    # What the estimate leaves out: the attention layers' q and k norms (2 x 16 each).
    assert real - estimated == 2 * 2 * 16


def test_only_full_attention_layers_hold_a_kv_cache_and_the_others_a_fixed_state():
    config = Qwen3_5TextConfig(**HYBRID)
    shape = ModelShape.from_hf_config(config)
    assert shape.attention_layers == 2  # every 4th of 8
    assert shape.kv_bytes_per_token() == 2 * 2 * 2 * 16 * 2  # k and v, 2 layers, 2 heads
    # Each Gated DeltaNet layer: a state of 4 value heads x 8 x 12, and the convolution's
    # last 4 inputs over q, k and v (2 x 16 + 48 channels).
    assert shape.state_values == 6 * (4 * 8 * 12 + 4 * (2 * 16 + 48))
    model = Qwen3_5ForCausalLM(config)
    out = model(torch.randint(0, 1000, (1, 5)), use_cache=True)
    cache = out.past_key_values.layers
    measured = sum(
        layer.recurrent_states.numel() + layer.conv_states.numel()
        for layer in cache
        if getattr(layer, "recurrent_states", None) is not None
    )
    assert measured == shape.state_values
    assert shape.sequence_bytes(100) == 100 * shape.kv_bytes_per_token() + 2 * shape.state_values


def test_the_preflight_names_the_path_gated_deltanet_layers_take(monkeypatch):
    assert linear_attention_check(0) == []  # a model without them: no row
    [row] = linear_attention_check(24)
    assert row.status == WARN  # neither kernel is installed on this machine
    assert "24 layers: transformers' torch fallback" in row.detail
    assert "flash-linear-attention and causal-conv1d not installed" in row.detail
    monkeypatch.setattr(preflight_rows.importlib.metadata, "version", lambda name: "9.9")
    [row] = linear_attention_check(24)
    assert row.status == OK and "fast path (flash-linear-attention 9.9" in row.detail
    assert ModelShape.from_hf_config(Qwen3_5TextConfig(**HYBRID)).linear_layers == 6
