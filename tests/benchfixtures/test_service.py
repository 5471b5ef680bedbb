"""benchfixtures/service.py, what the benches in scripts/ share: the service they start answers only
to its token and stops when they leave; the timed client records every request of an
episode by kind; the memory sampler sees the service and its worker processes."""

from __future__ import annotations

import asyncio
import time

import httpx

from benchfixtures.service import PeakRss, TimedClient, bench_service, ground_truth_scripts
from seal.rollout.env_client import is_healthy
from seal.rollout.scripted import run_scripted_episode
from seal.service_contract import EpisodeSettings

TASK = "multi_turn_base_1"


async def play(service) -> tuple[dict, list[tuple[str, float]]]:
    scripts = ground_truth_scripts([TASK])
    async with TimedClient(service.url, token=service.token) as client:
        report = await run_scripted_episode(
            client, TASK, scripts[TASK], EpisodeSettings(mode="validate")
        )
        return report, client.latencies


def test_the_bench_service_and_its_timed_client_and_memory_sampler():
    with bench_service() as service:
        assert httpx.get(f"{service.url}/v1/whoami").status_code == 401
        sampler = PeakRss(service.pid)
        sampler.start()
        report, latencies = asyncio.run(play(service))
        time.sleep(1.2)  # the sampler lists the workers once a second
        sampler.running = False
        sampler.join()
        assert report["accuracy"] == 1
        kinds = [kind for kind, _ in latencies]
        # create, then the steps; the last step ends the episode and closes it
        assert len(kinds) >= 2 and kinds == ["create"] + ["step"] * (len(kinds) - 1)
        assert all(seconds > 0 for _, seconds in latencies)
        assert sampler.peak > 2**20 and sampler.peak_tree > sampler.peak  # + 2 workers
        assert sampler.cpu_seconds() > 0
    assert not is_healthy(service.url)
