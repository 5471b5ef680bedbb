"""Async client for the environment service's wire protocol (httpx).

Every failure is an `EnvServiceError` naming the task or episode and the cause; there
is no fallback value. Busy answers (503) and connection errors are retried with
backoff, because they are transient by design; everything else is raised at once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx


class EnvServiceError(RuntimeError):
    """The service refused or failed a request."""


@dataclass
class StepReply:
    messages: list[dict]
    terminated: bool
    reward: float


class EnvClient:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8082",
        timeout_s: float = 60.0,
        retries: int = 5,
        max_connections: int = 512,
    ):
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http = httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits)
        self.retries = retries

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, what: str, **body) -> object:
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.post(path, json=body)
            except httpx.TransportError as e:
                if attempt == self.retries:
                    raise EnvServiceError(f"{path} for {what}: {type(e).__name__}: {e}") from e
            else:
                if response.status_code != 503 or attempt == self.retries:
                    break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        payload = response.json()
        if response.status_code != 200 or not payload.get("success"):
            raise EnvServiceError(f"{path} for {what} failed ({response.status_code}): {payload.get('error')}")
        return payload["data"]

    async def create(self, task_id: str, params: dict | None = None, instance_id: str | None = None) -> tuple[str, list[dict]]:
        """Start an episode; returns its instance id and the first messages (system, user)."""
        data = await self._post(
            "/create", task_id, env_type="bfcl", task_id=task_id, instance_id=instance_id, params=params or {}
        )
        return data["info"]["instance_id"], data["state"]

    async def step(self, instance_id: str, content: str) -> StepReply:
        data = await self._post(
            "/step", instance_id, instance_id=instance_id, messages={"role": "assistant", "content": content}
        )
        return StepReply(data["state"], data["is_terminated"], data["reward"])

    async def evaluate(self, instance_id: str) -> dict:
        """The full report: accuracy, reward, progress, failure_tags, counters."""
        return await self._post("/evaluate", instance_id, instance_id=instance_id, params={"sparse": False})

    async def release(self, instance_id: str) -> None:
        await self._post("/release", instance_id, instance_id=instance_id)

    async def push_profile(self, profile: dict) -> None:
        response = await self._http.put("/v1/profile", json=profile)
        if response.status_code != 200:
            raise EnvServiceError(f"pushing the failure profile failed ({response.status_code}): {response.text}")

    async def healthy(self) -> bool:
        try:
            return (await self._http.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False
