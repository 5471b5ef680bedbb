"""The training cut: the part of an episode's response that is trained.

The original release trains the first `max_response_length` (4,096) tokens of each sample's
multi-turn response and drops the rest (its `Sample.truncate_output_ids`). Its response
starts at the first assistant header (`<|im_start|>assistant\\n`), which here ends the
prompt as the generation prompt, so its first N response tokens are that header and our
first N - len(header) tokens. Both trainers cut every training sample with `ResponseCut`
(`trainer.loss.trained_response_tokens`); the episode's evaluation is the whole episode's.
"""

from __future__ import annotations

import dataclasses

from seal.rollout.driver import EpisodeSample


def generation_prompt_length(tokenizer) -> int:
    """Tokens the tokenizer's chat template adds as the generation prompt (the assistant
    header the release counts in its response)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"tokenizer {tokenizer.name_or_path} has no chat template: the training cut "
            "counts the release's response from the template's assistant header "
            "(set trainer.loss.trained_response_tokens=0 to train whole responses)"
        )
    probe = [{"role": "user", "content": "x"}]
    texts = [
        tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=prompt)
        for prompt in (False, True)
    ]
    without, with_prompt = (tokenizer.encode(t, add_special_tokens=False) for t in texts)
    if with_prompt[: len(without)] != without:
        raise ValueError(
            f"tokenizer {tokenizer.name_or_path}: the generation prompt is not a suffix"
        )
    return len(with_prompt) - len(without)


class ResponseCut:
    """Cuts a training sample's response to the release's first `max_tokens` (0: no cut)."""

    def __init__(self, max_tokens: int, tokenizer):
        self.max_tokens = max_tokens
        self.kept = max_tokens - generation_prompt_length(tokenizer) if max_tokens else 0
        """Response tokens kept here: the release's count less the header our prompt has."""
        if max_tokens and self.kept < 1:
            raise ValueError(f"trained_response_tokens {max_tokens} keeps no generated token")

    def __call__(self, sample: EpisodeSample) -> EpisodeSample:
        if not self.max_tokens or len(sample.response_ids) <= self.kept:
            return sample
        n, logprobs = self.kept, sample.response_logprobs
        return dataclasses.replace(
            sample,
            response_ids=sample.response_ids[:n],
            response_mask=sample.response_mask[:n],
            response_logprobs=None if logprobs is None else logprobs[:n],
        )
