"""Async client for the environment service's wire protocol.

Every failure is an `EnvServiceError` naming the task or episode and the cause; there
is no fallback value. Busy answers (503) and connection errors are retried with
backoff, because they are transient by design; everything else is raised at once.

Built on aiohttp rather than httpx: with 256 concurrent episodes httpx's async pool
spent about 2 ms of CPU per request and its throughput fell as connections grew
(scripts/bench_env.py: 15 episodes/s at 256 connections), so the client alone would
take a core from the trainer. aiohttp's connector holds up at that concurrency.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import orjson


class EnvServiceError(RuntimeError):
    """The service refused or failed a request."""


@dataclass
class StepReply:
    messages: list[dict]
    terminated: bool
    reward: float


class EnvClient:
    """One client per event loop; use as `async with EnvClient(url) as env: ...`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8082",
        timeout_s: float = 60.0,
        retries: int = 5,
        max_connections: int = 256,
    ):
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        # Created lazily: an aiohttp session must be made inside the running event loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                json_serialize=lambda o: orjson.dumps(o).decode(),
            )
        return self._session

    async def __aenter__(self) -> EnvClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self, method: str, path: str, what: str, body: dict | None = None
    ) -> tuple[int, dict]:
        delay = 0.05
        for attempt in range(self.retries + 1):
            try:
                async with self.session.request(
                    method, self.base_url + path, json=body
                ) as response:
                    status, payload = (
                        response.status,
                        orjson.loads(await response.read() or b"null"),
                    )
            except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as e:
                if attempt == self.retries:
                    raise EnvServiceError(f"{path} for {what}: {type(e).__name__}: {e}") from e
            else:
                if status != 503 or attempt == self.retries:
                    return status, payload
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def _post(self, path: str, what: str, **body) -> object:
        status, payload = await self._request("POST", path, what, body)
        if status != 200 or not payload.get("success"):
            raise EnvServiceError(f"{path} for {what} failed ({status}): {payload.get('error')}")
        return payload["data"]

    async def create(
        self, task_id: str, params: dict | None = None, instance_id: str | None = None
    ) -> tuple[str, list[dict]]:
        """Start an episode; returns its instance id and the first messages (system, user)."""
        data = await self._post(
            "/create",
            task_id,
            env_type="bfcl",
            task_id=task_id,
            instance_id=instance_id,
            params=params or {},
        )
        return data["info"]["instance_id"], data["state"]

    async def step(self, instance_id: str, content: str) -> StepReply:
        data = await self._post(
            "/step",
            instance_id,
            instance_id=instance_id,
            messages={"role": "assistant", "content": content},
        )
        return StepReply(data["state"], data["is_terminated"], data["reward"])

    async def evaluate(self, instance_id: str) -> dict:
        """The full report: accuracy, reward, progress, failure_tags, counters."""
        return await self._post(
            "/evaluate", instance_id, instance_id=instance_id, params={"sparse": False}
        )

    async def release(self, instance_id: str) -> None:
        await self._post("/release", instance_id, instance_id=instance_id)

    async def push_profile(self, profile: dict) -> None:
        """Send the trainer's failure profile (seal.tocf) for the guideline layer."""
        status, payload = await self._request("PUT", "/v1/profile", "the failure profile", profile)
        if status != 200:
            raise EnvServiceError(f"pushing the failure profile failed ({status}): {payload}")

    async def healthy(self) -> bool:
        try:
            status, _ = await self._request("GET", "/healthz", "health check")
        except EnvServiceError:
            return False
        return status == 200


def push_profile(env_url: str, profile: dict) -> None:
    """Push a failure profile from synchronous code (a trainer step) over a fresh client."""

    async def push() -> None:
        async with EnvClient(env_url) as env:
            await env.push_profile(profile)

    asyncio.run(push())
