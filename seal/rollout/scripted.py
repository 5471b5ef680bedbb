"""Run an episode with scripted assistant texts instead of a model.

Isolates the service (and later the episode driver) from model speed: the ground-truth
policy of seal.bfcl.ground_truth drives benchmarks, the agreement checks and the
demonstration run through exactly the HTTP path a trainer uses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from seal.rollout.env_client import EnvClient


async def run_scripted_episode(
    client: EnvClient,
    task_id: str,
    turns: list[list[str]],
    params: dict | None = None,
    pause: Callable[[], float] | None = None,
) -> dict:
    """Send each turn's texts in order until the service ends the episode; returns the
    evaluation report plus the transcript ('input': first messages, 'output': the rest).
    `pause()` seconds are waited before the episode starts and before each text,
    standing in for generation time."""
    if pause is not None:
        await asyncio.sleep(pause())
    instance_id, first = await client.create(task_id, params)
    transcript: list[dict] = []
    try:
        for texts in turns:
            for text in texts:
                if pause is not None:
                    await asyncio.sleep(pause())
                reply = await client.step(instance_id, text)
                transcript += [{"role": "assistant", "content": text}, *reply.messages]
                if reply.terminated:
                    break
            else:
                continue
            break
        report = await client.evaluate(instance_id)
    finally:
        await client.release(instance_id)
    return {**report, "input": first, "output": transcript}
