"""The tests' tiny models and samples: a random one-layer Qwen2 with Qwen2.5's vocabulary
(or a 64-id one where no tokenizer is needed), Qwen2.5-7B's shape for the memory
estimates, and four token-id samples for the update and warm-up tests."""

from __future__ import annotations

from types import SimpleNamespace

SMALL_VOCAB = 64
"""The tiny Qwen2's vocabulary for tests that feed it token ids and need no tokenizer
(`tiny_qwen2(vocab_size=SMALL_VOCAB)`): Qwen2.5's 151,936 rows are most of the model's
cost (the logits, their softmax and their gradient), a 64-row one leaves the layers'."""


def tiny_qwen2_config(**overrides):
    """The tests' tiny Qwen2: Qwen2.5's vocabulary (the shipped tokenizer's), one layer 32
    wide (the vocabulary is most of its cost), tied embeddings; `overrides` are
    Qwen2Config's own arguments."""
    from transformers import Qwen2Config

    shape = {
        "vocab_size": 151936,
        "hidden_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 64,
        "tie_word_embeddings": True,
    }
    return Qwen2Config(**(shape | overrides))


def qwen25_7b_config():
    """Qwen2.5-7B-Instruct's shape (its config.json), for the memory estimates."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
        tie_word_embeddings=False,
    )  # fmt: skip


def tiny_qwen2(seed: int = 0, **overrides):
    """A randomly initialised `tiny_qwen2_config(**overrides)` model, the same for a seed."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(tiny_qwen2_config(**overrides))


def sample(prompt, response, mask):
    """A training sample as the trainers' update reads it (token ids, no tokenizer)."""
    return SimpleNamespace(prompt_ids=prompt, response_ids=response, response_mask=mask)


PAD = SMALL_VOCAB - 1
"""The padding id of the update tests' samples (a model of `SMALL_VOCAB` ids)."""
SAMPLES = [
    sample([1, 2, 3, 4], [5, 6, 7, 8, 9], [1, 1, 0, 1, 1]),
    sample([10, 11], [12, 13, 14], [1, 0, 1]),
    sample([20, 21, 22], [23, 24, 25, 26], [0, 1, 1, 1]),
    sample([30], [31, 32], [1, 1]),
]
"""Four samples of different lengths and masks, for the update and warm-up tests (ids
below `PAD`)."""
