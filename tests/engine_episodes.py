"""Episodes of an engine without worker processes (`ServiceConfig(workers=0)`), for tests
that drive one episode synchronously: each method runs one call of the engine's async API
(acreate, astep, aevaluate) to its end, so an episode's steps and evaluation go the way
the service's requests go (its pool, its caps, its evaluations)."""

from __future__ import annotations

import asyncio

from env_service.engine import EnvEngine, ServiceConfig
from env_service.episode import StepOutcome
from seal.bfcl.calls import CallParseError, ToolCall
from seal.service_contract import EpisodeSettings


def in_process_engine(**config) -> EnvEngine:
    return EnvEngine(ServiceConfig(workers=0, **config))


class EngineEpisode:
    def __init__(
        self, task_id: str, settings: EpisodeSettings | None = None, engine: EnvEngine | None = None
    ):
        self.engine = engine or in_process_engine()
        created = self.engine.acreate(task_id, settings or EpisodeSettings())
        self.episode_id, self.episode = asyncio.run(created)

    def step(
        self, content: str, calls: list[ToolCall | CallParseError] | None = None
    ) -> StepOutcome:
        """One assistant message; `calls` as a native client parsed them, or None to
        parse `content` as Qwen2.5 text (the release protocol)."""
        return asyncio.run(self.engine.astep(self.episode_id, content, calls=calls))

    def evaluation(self) -> dict:
        return asyncio.run(self.engine.aevaluate(self.episode_id))
