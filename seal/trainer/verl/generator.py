"""A `Generator` over verl's LLM server client, for the episode driver inside verl.

verl's agent loops call `server_manager.generate(request_id, prompt_ids=...,
sampling_params=...)` (verl.workers.rollout.llm_server.LLMServerClient) and get a
`TokenOutput` (token_ids, log_probs, stop_reason, ...). This module maps one to the
other; it imports nothing from verl, so it is tested with a fake client. `finish_reason`
is derived from the ids, since verl's engines do not say reliably whether a stop token or
max_tokens ended a generation: docs/verl_notes.md, "Which code path verl runs".
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from seal.rollout.generation import Generation, GenerationError, SamplingParams

_FINISHED = frozenset({"completed", "stop", "length"})
"""TokenOutput.stop_reason values of a generation that ran to its end (vLLM, SGLang)."""


class VerlGenerator:
    """One episode's generator: every call shares one request id, so verl's load
    balancer keeps the episode on one server (sticky session, prefix cache reuse)."""

    def __init__(
        self,
        server_manager: Any,
        base_sampling_params: dict[str, Any] | None = None,
        stop_token_ids: frozenset[int] | set[int] = frozenset(),
        request_id: str | None = None,
    ):
        self.server_manager = server_manager
        self.base_sampling_params = dict(base_sampling_params or {})
        """verl's per-sample sampling dict (top_k, repetition_penalty, logprobs, ...);
        temperature, top_p and max_tokens are set from each call's SamplingParams."""
        self.stop_token_ids = frozenset(stop_token_ids)
        """Where generation stops (sent with every request as `stop_token_ids`)."""
        self.request_id = request_id or uuid.uuid4().hex
        self.wants_logprobs = bool(self.base_sampling_params.get("logprobs", False))
        self.seconds = 0.0
        """Time spent waiting on the server (the agent loop's generate metric)."""
        self.weight_versions: list[int] = []
        """The weights' version (verl's global step) each generation came from, as the
        server reports it; verl's step metrics need the first and the last."""

    def sampling_dict(self, sampling: SamplingParams) -> dict[str, Any]:
        params = dict(self.base_sampling_params)
        # max_tokens is the key both vLLM and SGLang servers read in verl 0.9.1 (SGLang
        # also takes max_new_tokens); without it the server falls back to
        # rollout.response_length, which is the whole multi-turn budget, not one turn's.
        params.pop("max_new_tokens", None)
        params.update(
            max_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
        )
        if self.stop_token_ids:
            # The engine stops at the model's EOS ids on its own; a format whose end of turn
            # is not among them (Llama 3.1 in BFCL's prompt mode ends turns with <|eot_id|>,
            # whose EOS is <|end_of_text|>) would otherwise generate to max_tokens every turn.
            params["stop_token_ids"] = sorted(self.stop_token_ids)
        return params

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        start = time.perf_counter()
        try:
            output = await self.server_manager.generate(
                self.request_id,
                # A copy: the driver's list keeps growing, and verl's rollout tracing may
                # keep the inputs it was given.
                prompt_ids=list(prompt_ids),
                sampling_params=self.sampling_dict(sampling),
            )
        except Exception as e:
            raise GenerationError(f"verl server generate failed: {type(e).__name__}: {e}") from e
        finally:
            self.seconds += time.perf_counter() - start
        return self.to_generation(output, sampling.max_new_tokens)

    def to_generation(self, output: Any, max_new_tokens: int) -> Generation:
        version = (getattr(output, "extra_fields", None) or {}).get("global_steps")
        if version is not None:
            self.weight_versions.append(int(version))
        stop_reason = getattr(output, "stop_reason", None)
        if stop_reason not in _FINISHED:
            raise GenerationError(f"the verl server's generation ended with {stop_reason!r}")
        ids = list(output.token_ids)
        if not ids:
            raise GenerationError("the verl server returned no tokens")
        logprobs = output.log_probs
        if logprobs is None and self.wants_logprobs:
            raise GenerationError("log-probabilities were requested but none came back")
        if logprobs is not None:
            logprobs = [float(x) for x in logprobs]
            if len(logprobs) != len(ids):
                raise GenerationError(f"{len(logprobs)} log-probabilities for {len(ids)} ids")
        stopped = ids[-1] in self.stop_token_ids or len(ids) < max_new_tokens
        return Generation(ids, logprobs, "stop" if stopped else "length")
