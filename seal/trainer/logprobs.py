"""Per-token log-probabilities of response tokens, with memory bounded by chunking.

A causal LM's output layer is `vocab` wide (151,936 for Qwen2.5), so full logits for a
16k-token episode would not fit. The decoder runs once; the output projection,
log-softmax and gather then run over chunks of response positions, each under
activation checkpointing so the backward pass recomputes a chunk's logits instead of
keeping every chunk's [tokens, vocab] activations alive.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from seal.trainer.batch import MicroBatch


def _decoder(model: torch.nn.Module) -> torch.nn.Module:
    # Hugging Face causal LMs expose the transformer body without the output layer.
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if decoder is None:
        raise TypeError(f"{type(model).__name__} has no get_decoder(); cannot chunk its logits")
    return decoder


def _chunk_logprobs(
    head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logp = F.log_softmax(head(hidden).float(), dim=-1)
    token_logp = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1) if with_entropy else torch.zeros_like(token_logp)
    return token_logp, entropy


def response_logprobs(
    model: torch.nn.Module, batch: MicroBatch, chunk_tokens: int = 1024, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of each response token, shape [b, R] like
    `batch.response_mask`; values at masked-out positions are meaningless (use the mask)."""
    hidden = _decoder(model)(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask
    ).last_hidden_state
    # The token at position t is predicted from the hidden state at t - 1.
    positions = (
        batch.response_start[:, None] + torch.arange(batch.response_len, device=hidden.device) - 1
    )
    positions = positions.clamp(0, hidden.shape[1] - 1)
    predictors = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    head = model.get_output_embeddings()
    logps, entropies = [], []
    for start in range(0, batch.response_len, chunk_tokens):
        span = slice(start, start + chunk_tokens)
        args = (head, predictors[:, span], batch.response_ids[:, span], with_entropy)
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(*args)
        logps.append(lp)
        entropies.append(ent)
    logp = torch.cat(logps, dim=1)
    return logp, (torch.cat(entropies, dim=1) if with_entropy else None)
