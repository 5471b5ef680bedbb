"""Playing one episode with the driver against the real service, for the driver's tests:
`play` runs a scripted generator through `run_episode` with a client that records what
the service sent and got (`RecordingEnv`); the other helpers rebuild what the model saw
(each format's full render) and check a sample's ids and mask against it."""

from __future__ import annotations

import asyncio
import dataclasses

from conftest import full_render

from seal.formats.base import Conversation
from seal.formats.qwen35 import Qwen35Template
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.driver import EpisodeSample, run_episode
from seal.rollout.env_client import EnvClient, RemoteEpisode
from seal.rollout.scripted import ScriptedGenerator
from seal.service_contract import EpisodeLimits, EpisodeSettings, InterfaceSettings

LAYERS = InterfaceSettings(schema_cues=True)


def settings(limits: EpisodeLimits | None = None) -> EpisodeSettings:
    return EpisodeSettings(mode="sample", interface=LAYERS, limits=limits or EpisodeLimits())


GREP_TASK = "multi_turn_base_0"
LONG_TASK = "multi_turn_long_context_0"  # a grep answer of several hundred tokens


def tokenizer_for(name: str, request) -> object:
    """The shared tokenizer fixture a format needs: `llama_tokenizer` for Llama's layout,
    `qwen35_tokenizer` for Qwen3.5's template."""
    fmt = get_format(name)
    if isinstance(fmt, Qwen35Template):
        return request.getfixturevalue("qwen35_tokenizer")
    uses_llama = fmt.end_of_turn == "<|eot_id|>"
    return request.getfixturevalue("llama_tokenizer" if uses_llama else "tokenizer")


class RecordingEnv(EnvClient):
    """EnvClient whose episodes keep what the service sent and got."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.created: dict = {}
        self.texts: list[str] = []
        self.observations: list[list[dict]] = []

    def episode(self, task_id, settings=None):
        return RecordingEpisode(self, task_id, settings or EpisodeSettings())


class RecordingEpisode(RemoteEpisode):
    async def __aenter__(self):
        await super().__aenter__()
        self.env.created = self.created
        return self

    async def step(self, content, calls):
        reply = await super().step(content, calls)
        self.env.texts.append(content)
        self.env.observations.append(reply.messages)
        return reply


def play(base_url, tokenizer, task_id, generator, limits=None, tool_format=None):
    tool_format = tool_format or get_format(PAPER_QWEN)

    async def main():
        async with RecordingEnv(base_url) as env:
            episode_settings = dataclasses.replace(
                settings(limits),
                prompt=tool_format.prompt,
                end_on_malformed_call=tool_format.end_on_malformed_call,
            )
            sample = await run_episode(
                env, generator, tokenizer, task_id, episode_settings, tool_format=tool_format
            )
            return sample, env

    return asyncio.run(main())


def conversation_before(fmt, env: RecordingEnv, k: int) -> Conversation:
    """The conversation generation k (0-based) continued: the first messages, then each
    earlier generation and the observation that followed it."""
    conversation = fmt.start(env.created)
    for text, observation in zip(env.texts[:k], env.observations[:k], strict=True):
        conversation.messages += [fmt.assistant_message(text), *fmt.observation(observation)]
    return conversation


def full_render_ids(tokenizer, fmt, env, k) -> list[int]:
    conversation = conversation_before(fmt, env, k)
    return tokenizer.encode(full_render(fmt, conversation), add_special_tokens=False)


def generated_spans(generator: ScriptedGenerator, sample: EpisodeSample):
    """(start, ids) of each generation inside the response."""
    offset = len(sample.prompt_ids)
    return [
        (start - offset, generator.generations[k].token_ids)
        for k, start in enumerate(generator.prompt_lengths)
    ]


def assert_sequence_is_what_the_model_saw(generator, sample):
    full = sample.prompt_ids + sample.response_ids
    assert len(sample.response_mask) == len(sample.response_ids)
    expected_mask = [0] * len(sample.response_ids)
    for k, (start, ids) in enumerate(generated_spans(generator, sample)):
        assert sample.response_ids[start : start + len(ids)] == ids  # kept as returned
        assert generator.prompts[k] == full[: len(sample.prompt_ids) + start]  # a prefix
        expected_mask[start : start + len(ids)] = [1] * len(ids)
    assert sample.response_mask == expected_mask
    last_start, last_ids = generated_spans(generator, sample)[-1]
    assert last_start + len(last_ids) == len(sample.response_ids)  # ends with the last generation
