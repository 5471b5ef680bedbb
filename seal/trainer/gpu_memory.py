"""GPU memory a run needs, estimated from the model's config before any weight loads, held
against a share of the card (its headroom) with the margin said. For the local trainer
(`local_trainer_memory`, checked before it loads a model onto a GPU and by `launcher.py
--preflight`) and verl's phases (seal/trainer/verl/preflight.py). Estimates to catch what
cannot fit, not measurements; the terms and their sources: docs/gpu.md, "Memory".
"""

from __future__ import annotations

from dataclasses import dataclass

from seal.algos.loss import needs_reference

GIB = 1024**3
CUDA_CONTEXT_GIB = 1.0
"""One process's CUDA context with its libraries' handles and workspaces (cuBLAS, cuDNN)."""
NCCL_GIB = 1.0
"""NCCL's communicator buffers in each process of a multi-GPU group (FSDP's)."""
DYNAMIC_HEADROOM = 0.90
"""Share of a card a phase that allocates and frees tensors of many sizes may plan to fill
(an update: activations, logits): the rest is lost to the allocator's fragmentation."""
POOL_HEADROOM = 0.95
"""Share of a card a phase of fixed-size pools may plan to fill (a rollout: weights, the
optimizer state, vLLM's preallocated KV cache)."""
MASTER_BYTES = 4 + 4 + 8
"""float32 master weights, their gradients and AdamW's two moments, per parameter."""


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need from a model's Hugging Face config."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int
    tied_embeddings: bool = False
    attention_layers: int | None = None
    """Layers with a KV cache: all (None), or a hybrid model's full-attention layers."""
    state_values: int = 0
    """Values of a hybrid model's fixed per-sequence state (its linear-attention layers'
    recurrent and convolution states), whatever the sequence's length."""

    @classmethod
    def from_hf_config(cls, c) -> ModelShape:
        c = getattr(c, "text_config", None) or c
        heads = c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        h, inter, layers, vocab = (
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            c.vocab_size,
        )
        tied = bool(getattr(c, "tie_word_embeddings", False))
        attention = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
        mlp = 3 * h * inter + 2 * h
        linear, state = _linear_attention(c)
        full = layers - linear
        if linear:  # the hybrid Qwens gate the attention output: q_proj is twice as wide
            attention += h * heads * head_dim
        return cls(
            params=vocab * h * (1 if tied else 2) + full * attention + linear * state[0]
            + layers * mlp + h,
            layers=layers,
            hidden=h,
            intermediate=inter,
            kv_heads=kv_heads,
            head_dim=head_dim,
            vocab=vocab,
            max_positions=getattr(c, "max_position_embeddings", 0) or 0,
            tied_embeddings=tied,
            attention_layers=full if linear else None,
            state_values=linear * state[1],
        )  # fmt: skip

    @property
    def linear_layers(self) -> int:
        """A hybrid model's Gated DeltaNet layers (0 for other models)."""
        return 0 if self.attention_layers is None else self.layers - self.attention_layers

    def kv_bytes_per_token(self, value_bytes: int = 2) -> int:
        """Keys and values of every layer with a KV cache (bf16 by default)."""
        layers = self.layers if self.attention_layers is None else self.attention_layers
        return 2 * layers * self.kv_heads * self.head_dim * value_bytes

    def sequence_bytes(self, tokens: int, value_bytes: int = 2) -> int:
        """One sequence's cache at `tokens` tokens: its KV cache and a hybrid model's
        fixed state."""
        return tokens * self.kv_bytes_per_token(value_bytes) + self.state_values * value_bytes

    @property
    def outer_params(self) -> int:
        """Parameters outside the decoder layers: embeddings, output layer, final norm. FSDP
        wraps each decoder layer (verl's policy); these form the root unit, gathered whole
        for the forward and backward passes."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden


def _linear_attention(c) -> tuple[int, tuple[int, int]]:
    """A hybrid config's Gated DeltaNet layers (Qwen3-Next, Qwen3.5: `layer_types`): their
    count, and each one's (parameters, state values per sequence); (0, (0, 0)) without."""
    count = list(getattr(c, "layer_types", None) or []).count("linear_attention")
    if not count:
        return 0, (0, 0)
    h, v_heads = c.hidden_size, c.linear_num_value_heads
    keys = c.linear_key_head_dim * c.linear_num_key_heads
    values = c.linear_value_head_dim * v_heads
    conv = 2 * keys + values  # the channels of q, k and v, convolved together
    kernel = c.linear_conv_kernel_dim
    # in_proj_qkv, in_proj_z, in_proj_b and _a, out_proj; conv1d; dt_bias, A_log; the norm
    params = h * (conv + values + 2 * v_heads) + values * h + conv * kernel
    params += 2 * v_heads + c.linear_value_head_dim
    # The convolution's last inputs: `kernel` of them in transformers' cache (vLLM keeps one fewer).
    state = v_heads * c.linear_key_head_dim * c.linear_value_head_dim + conv * kernel
    return count, (params, state)


def activation_bytes(model: ModelShape, tokens: int, checkpointing: bool) -> int:
    """Activations the backward pass keeps for `tokens` tokens (bf16): with gradient
    checkpointing each layer's input and one layer's internals, else every layer's."""
    kept_input = 2 * model.hidden * 2
    layer_full = (20 * model.hidden + 4 * model.intermediate) * 2
    if checkpointing:
        return tokens * (model.layers * kept_input + layer_full)
    return tokens * model.layers * layer_full


@dataclass(frozen=True)
class MemoryNeed:
    """One phase's estimate on one card: `gib` needed against `headroom` of `card_gib`."""

    gib: float
    card_gib: float
    headroom: float
    terms: str
    """What the estimate adds up, for the reader."""

    @property
    def limit_gib(self) -> float:
        return self.headroom * self.card_gib

    @property
    def margin_gib(self) -> float:
        return self.limit_gib - self.gib

    @property
    def fits(self) -> bool:
        return self.margin_gib >= 0

    def describe(self) -> str:
        return (
            f"~{self.gib:.1f} GiB of {self.limit_gib:.1f} ({self.headroom:.0%} of "
            f"{self.card_gib:.1f}): margin {self.margin_gib:+.1f} GiB; {self.terms}"
        )


@dataclass(frozen=True)
class LocalShape:
    """What the local trainer's estimate needs from the `trainer` section."""

    compute_bytes: int
    """Bytes per value of `trainer.model.dtype` (4: float32, no separate compute copy)."""
    reference: bool
    context_tokens: int
    micro_batch_size: int
    chunk_tokens: int
    gradient_checkpointing: bool
    generation_batch: int

    @classmethod
    def from_trainer(cls, t) -> LocalShape:
        """From the `trainer` section (seal/trainer_config.py)."""
        return cls(
            compute_bytes={"float32": 4, "bfloat16": 2, "float16": 2}[t.model.dtype],
            reference=needs_reference(t.loss),
            context_tokens=t.limits.max_context_tokens,
            micro_batch_size=t.optim.micro_batch_size,
            chunk_tokens=t.optim.logprob_chunk_tokens,
            gradient_checkpointing=t.model.gradient_checkpointing,
            generation_batch=t.rollout.max_batch_size,
        )

    def weight_bytes(self) -> int:
        """Per parameter, held through the whole run: master weights, gradients (kept from
        one update to the next), AdamW, the compute copy, the reference."""
        copy = 0 if self.compute_bytes == 4 else self.compute_bytes
        return MASTER_BYTES + copy + (self.compute_bytes if self.reference else 0)


def local_trainer_memory(
    model: ModelShape, run: LocalShape, card_gib: float
) -> tuple[MemoryNeed, MemoryNeed]:
    """The local trainer on one card: (update, rollout). The update adds one micro-batch's
    activations, the compute copy's gradients and a chunk of logits (log-softmax in float32,
    recomputed in the backward pass); the rollout adds `generate`'s KV cache for a batch of
    `generation_batch` episodes at the context limit."""
    weights = model.params * run.weight_bytes()
    fixed = CUDA_CONTEXT_GIB * GIB
    tokens = run.micro_batch_size * run.context_tokens
    grads = 0 if run.compute_bytes == 4 else model.params * run.compute_bytes
    logits = run.micro_batch_size * run.chunk_tokens * model.vocab * 4 * 3
    update = (
        weights
        + fixed
        + grads
        + activation_bytes(model, tokens, run.gradient_checkpointing)
        + logits
    )
    kv = run.generation_batch * model.sequence_bytes(run.context_tokens, run.compute_bytes)
    held = f"{run.weight_bytes()} bytes per parameter x {model.params / 1e9:.2f}B held"
    return (
        MemoryNeed(
            update / GIB,
            card_gib,
            DYNAMIC_HEADROOM,
            f"{held}, a micro-batch of {tokens} tokens (activations, logits, bf16 gradients), "
            "the CUDA context",
        ),
        MemoryNeed(
            (weights + fixed + kv) / GIB,
            card_gib,
            POOL_HEADROOM,
            f"{held}, the KV cache of {run.generation_batch} generations at "
            f"{run.context_tokens} tokens ({kv / GIB:.1f} GiB), the CUDA context",
        ),
    )


def largest_local_model(model: ModelShape, run: LocalShape, card_gib: float) -> float:
    """Parameters (billions) of the largest model of this one's proportions whose update
    fits the card: what to name when this one does not."""
    update, _ = local_trainer_memory(model, run, card_gib)
    per_param = run.weight_bytes() + (0 if run.compute_bytes == 4 else run.compute_bytes)
    other = update.gib * GIB - model.params * per_param
    return max(0.0, (update.limit_gib * GIB - other) / per_param) / 1e9
