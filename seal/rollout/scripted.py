"""Scripted stand-ins for a model: fixed assistant texts or fixed generations.

They isolate the service and the episode driver from model speed and randomness:
- `run_scripted_episode` sends fixed assistant texts through the client's episode lifecycle
  in a tool format (the ground-truth policy of seal.bfcl.ground_truth drives the benchmarks,
  the agreement checks and the replay demonstration through a trainer's HTTP path);
- `ScriptedGenerator` is a `Generator` that replays fixed generations (token ids), so the
  driver plays real episodes through the real service in tests and benchmarks, and its own
  overhead is measured without model time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from seal.formats.base import ToolFormat
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout import loop
from seal.rollout.env_client import EnvClient
from seal.rollout.generation import Generation, GenerationError, SamplingParams
from seal.rollout.loop import ContextSize
from seal.service_contract import EpisodeSettings


async def run_scripted_episode(
    client: EnvClient,
    task_id: str,
    turns: list[list[str]],
    settings: EpisodeSettings | None = None,
    pause: Callable[[], float] | None = None,
    tool_format: ToolFormat | None = None,
) -> dict:
    """Send each turn's texts in order until the service ends the episode; returns the
    evaluation plus the transcript in `tool_format`'s chat messages (Qwen2.5's by
    default; 'input': the first messages, 'output': the rest). `pause()` seconds are
    waited before the episode starts and before each text, standing in for generation
    time."""
    script = ScriptedTurns([text for turn in turns for text in turn], tool_format, pause)
    if pause is not None:
        await asyncio.sleep(pause())
    async with client.episode(task_id, settings) as episode:
        await loop.play(episode, script, episode.settings.limits)
        evaluation = await episode.finish()
    first = script.format.start(episode.created).messages
    return {**evaluation, "input": first, "output": script.transcript}


class ScriptedTurns:
    """Fixed assistant texts as the one loop's turns (seal.rollout.loop.Turns). A script
    counts no tokens and keeps observations whole, so only the service, or the end of
    the script, stops it."""

    context_size = ContextSize(0, 0)

    def __init__(
        self, texts: list[str], tool_format: ToolFormat | None, pause: Callable[[], float] | None
    ):
        self.format = tool_format or get_format(PAPER_QWEN)
        self.texts, self.pause = iter(texts), pause
        self.transcript: list[dict] = []
        """The assistant messages and observations, in the format's chat messages."""
        self.observation: list[dict] = []

    async def reply(self, budget: int) -> str | None:
        text = next(self.texts, None)
        if text is not None:
            if self.pause is not None:
                await asyncio.sleep(self.pause())
            self.transcript.append(self.format.assistant_message(text))
        return text

    def observe(self, messages: list[dict], max_tokens: int) -> ContextSize:
        self.observation = self.format.observation(messages)
        return self.context_size

    def keep(self) -> None:
        self.transcript += self.observation

    def end(self, messages: list[dict]) -> None:
        self.transcript += self.format.observation(messages)


def text_generation(
    tokenizer, text: str, closed: bool = True, end_of_turn_id: int | None = None
) -> Generation:
    """`text` as a model would return it: its canonical ids, then the end-of-turn token
    (the tokenizer's eos unless given) if `closed` (finish "stop"), else without it
    (finish "length")."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if closed:
        end = tokenizer.eos_token_id if end_of_turn_id is None else end_of_turn_id
        return Generation([*ids, end], None, "stop")
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
    def from_texts(
        cls, tokenizer, texts: list[str], end_of_turn_id: int | None = None, **kwargs
    ) -> ScriptedGenerator:
        return cls([text_generation(tokenizer, t, True, end_of_turn_id) for t in texts], **kwargs)

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
