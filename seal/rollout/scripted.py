"""Run an episode with scripted assistant texts instead of a model.

Isolates the service (and the episode driver) from model speed: the ground-truth policy
of seal.bfcl.ground_truth drives benchmarks, the agreement checks and the demonstration
run through exactly the HTTP path and episode lifecycle a trainer uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from seal.rollout.env_client import EnvClient
from seal.rollout.protocol import EpisodeSettings


async def run_scripted_episode(
    client: EnvClient,
    task_id: str,
    turns: list[list[str]],
    settings: EpisodeSettings | None = None,
    pause: Callable[[], float] | None = None,
) -> dict:
    """Send each turn's texts in order until the service ends the episode; returns the
    evaluation plus the transcript ('input': first messages, 'output': the rest).
    `pause()` seconds are waited before the episode starts and before each text,
    standing in for generation time."""
    if pause is not None:
        await asyncio.sleep(pause())
    transcript: list[dict] = []
    async with client.episode(task_id, settings) as episode:
        texts = [text for turn in turns for text in turn]
        for text in texts:
            if pause is not None:
                await asyncio.sleep(pause())
            reply = await episode.step(text)
            transcript += [{"role": "assistant", "content": text}, *reply.messages]
            if reply.terminated:
                break
        evaluation = await episode.finish()
    return {**evaluation, "input": episode.messages, "output": transcript}
