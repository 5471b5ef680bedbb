"""What the episode driver asks of a language model: token ids in, token ids out.

Every backend (the in-process Hugging Face generator, a scripted one for tests and
benchmarks, verl's rollout servers in the multi-GPU plugin) implements `Generator`, so
the driver never sees text it has to re-tokenize and never knows which engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How one generation samples. Frozen and hashable: the HF generator batches only
    requests whose parameters are equal."""

    max_new_tokens: int
    """Most tokens this generation may produce. The driver sets it per generation from
    the episode's limits (`EpisodeLimits.max_new_tokens`) and the context left."""
    temperature: float = 1.0
    """0 means greedy decoding; the paper samples at 1.0 and validates at 0."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 keeps the whole distribution (the paper's setting)."""


@dataclass
class Generation:
    """One generation's output, exactly as the engine produced it."""

    token_ids: list[int]
    """New ids only, up to and including the first stop token when there is one."""
    logprobs: list[float] | None
    """Log-probability of each id in `token_ids` under the sampling distribution
    (logits / temperature, before top-p; the plain logits when greedy), or None when
    the backend has none."""
    finish_reason: FinishReason
    """"stop": it ended with a stop token; "length": it hit max_new_tokens."""


class GenerationError(RuntimeError):
    """The model backend failed. Raised, never turned into model output: a rollout
    built from an error message would train the policy on text it never wrote."""


class Generator(Protocol):
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        """Continue `prompt_ids`. The list is the caller's live sequence, passed without
        a copy: read it during the call, never keep or modify it."""
        ...
