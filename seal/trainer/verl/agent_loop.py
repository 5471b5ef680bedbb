"""`SealBfclAgentLoop`: verl's agent loop for BFCL multi-turn rows (agent_name "seal_bfcl").

verl instantiates it once per sample; it plays the row's task with the shared episode
driver against the environment service, generating through verl's LLM server client, and
returns an `AgentLoopOutput` whose reward_score is the service's reward (a training sample
cut as `trainer.loss.trained_response_tokens` says). Settings come from the config's `seal`
section. It requires max_context_tokens <= response_length and
fails an over-long prompt rather than truncating it: docs/verl_notes.md, "The SEAL
trainer's hooks".
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    register,
)

from seal.rollout.driver import EpisodeSample, retry_once, run_episode
from seal.rollout.env_client import EnvClient
from seal.rollout.turn_tokens import turn_tokenizer
from seal.trainer.response_cut import ResponseCut
from seal.trainer.verl.episode_fields import EpisodeFields
from seal.trainer.verl.generator import VerlGenerator
from seal.trainer.verl.section import SealSection

AGENT_NAME = "seal_bfcl"
"""The parquet's agent_name column (scripts/prepare_data.py)."""


# One EnvClient per (event loop, URL): verl builds a loop instance per sample, and an
# aiohttp session per episode would open hundreds of connection pools per step.
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, EnvClient]] = (
    weakref.WeakKeyDictionary()
)


# verl builds one loop per sample from the worker's one config object; parsing its
# `seal` section (~3 ms of OmegaConf work, on the event loop every episode shares) is
# done once per config. The config is kept in the value so a reused id cannot match.
_settings: dict[int, tuple[object, SealSection]] = {}


def loop_settings(config) -> SealSection:
    cached = _settings.get(id(config))
    if cached is None or cached[0] is not config:
        cached = _settings[id(config)] = (config, SealSection.from_config(config))
    return cached[1]


def shared_env_client(settings: SealSection) -> EnvClient:
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    if settings.env_url not in per_loop:
        per_loop[settings.env_url] = EnvClient(
            settings.env_url,
            settings.client,
            max_connections=settings.max_env_connections,
        )
    return per_loop[settings.env_url]


async def close_shared_env_clients() -> None:
    """Close this event loop's clients (tests, shutdown)."""
    for client in _clients.pop(asyncio.get_running_loop(), {}).values():
        await client.aclose()


def stop_token_ids(tokenizer, tool_format) -> frozenset[int]:
    """Where the engine stops a generation: the tool format's end-of-turn token, as this
    tokenizer writes it (one token, or TurnTokenizer refuses the pair)."""
    return frozenset({turn_tokenizer(tokenizer, tool_format).end_of_turn_id})


@register(AGENT_NAME)
class SealBfclAgentLoop(AgentLoopBase):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = loop_settings(self.config)
        self.limits = self.settings.trainer.limits
        self.tool_format = self.settings.trainer.model.resolved_tool_format()
        self.stop_token_ids = stop_token_ids(self.tokenizer, self.tool_format)
        # 0.3 ms per loop (a probe of the chat template): no need to share it.
        self.response_cut = ResponseCut(
            self.settings.trainer.loss.trained_response_tokens, self.tokenizer
        )
        response_length = self.rollout_config.response_length
        if self.limits.max_context_tokens > response_length:
            raise ValueError(
                f"seal.max_context_tokens {self.limits.max_context_tokens} exceeds "
                f"rollout.response_length {response_length}: a long episode after a short "
                "prompt would not fit verl's response tensor"
            )

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        if "task_id" not in extra_info:
            raise ValueError(f"row has no extra_info.task_id (keys: {sorted(kwargs)})")
        task_id = str(extra_info["task_id"])
        # Rows of the eval parquet (and any split but train) play the plain benchmark.
        mode = "sample" if str(extra_info.get("split", "train")) == "train" else "validate"
        # Generation stops at the tool format's end of turn; another stop token at
        # exactly max_new_tokens is labelled "length", which changes nothing in the sample.
        generator = VerlGenerator(
            self.server_manager, sampling_params, stop_token_ids=self.stop_token_ids
        )
        start = time.perf_counter()
        # verl's sampling dict carries the temperature of this rollout (validation's
        # val_kwargs or training's), so it is read per call.
        settings = self.settings.trainer.episode_settings(mode)
        temperature = float(sampling_params.get("temperature", 1.0))
        top_p = float(sampling_params.get("top_p", 1.0))
        # Once more, then fail: verl drops the sample's whole group, which is its own
        # tolerance for a failed rollout.
        sample = await retry_once(
            run_episode,
            shared_env_client(self.settings),
            generator,
            self.tokenizer,
            task_id,
            settings,
            tool_format=self.tool_format,
            temperature=temperature,
            top_p=top_p,
            max_prompt_tokens=self.rollout_config.prompt_length,
        )
        total = time.perf_counter() - start
        metrics = AgentLoopMetrics(
            generate_sequences=generator.seconds, tool_calls=total - generator.seconds
        )
        if mode == "sample":  # what verl trains of it (validation's are scored whole)
            sample = self.response_cut(sample)
        return to_output(sample, metrics, generator.weight_versions)


def to_output(
    sample: EpisodeSample, metrics: AgentLoopMetrics, weight_versions: list[int]
) -> AgentLoopOutput:
    if not weight_versions:
        raise ValueError(
            f"task {sample.task_id}: the rollout server reported no weight version "
            "(TokenOutput.extra_fields['global_steps']); verl's step metrics need one"
        )
    return AgentLoopOutput(
        prompt_ids=sample.prompt_ids,
        response_ids=sample.response_ids,
        response_mask=sample.response_mask,
        response_logprobs=sample.response_logprobs,
        reward_score=float(sample.reward),
        num_turns=num_turns(sample.response_mask),
        metrics=metrics,
        extra_fields=EpisodeFields.of_episode(sample, weight_versions).to_extra_fields(),
    )


def num_turns(response_mask: list[int]) -> int:
    """verl counts chat messages (user, assistant, tool): the first user message, one
    per generated run of the mask and one per observation run between them."""
    runs = sum(1 for i, m in enumerate(response_mask) if i == 0 or m != response_mask[i - 1])
    return 1 + runs
