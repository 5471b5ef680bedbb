"""A Generator that replays fixed generations instead of running a model.

Drives the episode driver in tests and benchmarks: the ground-truth policy's texts
tokenized and closed with the end-of-turn token play real episodes through the real
service, and the driver's overhead is measured without model time.
"""

from __future__ import annotations

from seal.rollout.generation import Generation, GenerationError, SamplingParams


def text_generation(tokenizer, text: str, closed: bool = True) -> Generation:
    """`text` as a model would return it: its canonical ids, then the eos if `closed`
    (finish "stop"), else without it (finish "length")."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if closed:
        return Generation(ids + [tokenizer.eos_token_id], None, "stop")
    return Generation(ids, None, "length")


class ScriptedGenerator:
    """Returns `generations` in order, one per call, each cut to the call's
    max_new_tokens; running out is an error."""

    def __init__(self, generations: list[Generation], record_prompts: bool = False):
        self.generations = list(generations)
        self.calls = 0
        self.record_prompts = record_prompts
        """Keep a copy of every prompt (tests); off, only its length is kept."""
        self.prompts: list[list[int]] = []
        self.prompt_lengths: list[int] = []

    @classmethod
    def from_texts(cls, tokenizer, texts: list[str], **kwargs) -> ScriptedGenerator:
        return cls([text_generation(tokenizer, t) for t in texts], **kwargs)

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self.calls >= len(self.generations):
            raise GenerationError(f"the script has only {len(self.generations)} generations")
        self.prompt_lengths.append(len(prompt_ids))
        if self.record_prompts:
            self.prompts.append(list(prompt_ids))
        self.calls += 1
        generation = self.generations[self.calls - 1]
        if len(generation.token_ids) <= sampling.max_new_tokens:
            return generation
        # Cut as a model would be: the driver lowers max_new_tokens near the context end.
        n = sampling.max_new_tokens
        logprobs = generation.logprobs[:n] if generation.logprobs is not None else None
        return Generation(generation.token_ids[:n], logprobs, "length")
