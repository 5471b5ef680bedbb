"""A web-search task's outside calls (page fetches, SerpAPI searches) stall no one, are
bounded, and are never made twice (issue #31, findings 2 and 3).

- A slow page, an unreachable SerpAPI (retried with back-off) and a huge or gzip-bomb
  body do not delay a multi-turn neighbour's step: outside calls run in processes of
  their own, never on a worker that holds other episodes' steps.
- A fetch ends at its deadline however slowly its page trickles in, and stops reading at
  the byte caps, before and after decompression.
- A web-search episode runs on a service with the default step budget: its long budget is
  its own, not the service's.
- Killing the workers (kill -9) repeats no outside call; killing the process of a call in
  flight answers that call with an error and does not send it again.

Every "outside" server is local (benchfixtures/web.py), reached through the test network.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import psutil
import pytest
from agentic_scripts import WEB_SEARCH_MISSING as MISSING
from agentic_scripts import agentic_service, call, walk_every_route
from conftest import Episodes, results, wait_for

from benchfixtures.web import network, silent_server, web_server
from seal.bfcl.agentic import web_fetch, web_search
from seal.bfcl.agentic.tasks import ANSWER_NOT_FOUND

pytestmark = pytest.mark.skipif(bool(MISSING), reason="needs the ood extra (bfcl web search)")

WEB_TASK, NEIGHBOUR_TASK = "web_search_base_0", "multi_turn_base_1"
FAST = {  # SerpAPI tries: 2 s each, 0.5 s then 1 s apart
    "web_search_interval_s": 0.0,
    "web_search_attempts": 3,
    "web_search_timeout_s": 2.0,
    "web_search_backoff_s": 0.5,
    "web_fetch_timeout_s": 3.0,
}


@pytest.fixture
def outside(monkeypatch):
    """The outside web (`outside.test`), SerpAPI served by it, and a key for it."""
    from serpapi.serp_api_client import SerpApiClient

    with web_server() as web:
        web_fetch.use_network(network(outside=web))
        monkeypatch.setattr(SerpApiClient, "BACKEND", f"http://outside.test:{web.port}")
        monkeypatch.setenv(web_search.SERPAPI_KEY_ENV, "test-key")
        try:
            yield web
        finally:
            web_fetch.use_network(web_fetch.PublicInternet())


def fetch(web, path: str) -> str:
    return call("fetch_url_content", url=f"http://outside.test:{web.port}{path}")


def search(keywords: str) -> str:
    return call("search_engine_query", keywords=keywords)


class Clients:
    """A web-search episode and a multi-turn neighbour on the same (single) worker."""

    def __init__(self, url: str):
        self.episodes = Episodes(httpx.Client(base_url=url, timeout=120))
        self.web, _ = self.episodes.create(WEB_TASK, mode="validate")
        self.neighbour, _ = self.episodes.create(NEIGHBOUR_TASK, mode="validate")
        self.neighbour_step()  # its backends are built

    def neighbour_step(self) -> None:
        reply = self.episodes.call(self.neighbour, "pwd", {})
        assert results(reply) == ['{"current_working_directory": "/alex"}'], reply

    def neighbour_steps_during(self, step: dict, what: str, n: int = 3) -> None:
        """`n` trivial steps of the neighbour, which must all end while the web step is
        still in flight: queued behind it, the first would end only once the web step had
        (at its deadline, or when the test lets it go). An order, not a time: it holds
        however slow a loaded machine makes both."""
        for _ in range(n):
            self.neighbour_step()
        assert step["thread"].is_alive(), f"the neighbour's steps waited behind {what}"

    def web_step_in_background(self, text: str) -> dict:
        """Start a step of the web episode; the dict gets its `reply` and `seconds`."""
        out: dict = {}

        def run():
            started = time.perf_counter()
            out["reply"] = self.episodes.step(self.web, text)
            out["seconds"] = time.perf_counter() - started

        out["thread"] = threading.Thread(target=run, daemon=True)
        out["thread"].start()
        return out


def test_a_slow_page_stalls_no_neighbour_and_ends_at_its_deadline(tmp_path, outside):
    deadline_s = 6.0  # room for the neighbour's steps on a loaded machine, before it
    slow_page = {**FAST, "web_fetch_timeout_s": deadline_s}
    with agentic_service(tmp_path, workers=1, **slow_page) as (url, _):
        clients = Clients(url)
        step = clients.web_step_in_background(fetch(outside, "/slow"))
        wait_for(lambda: outside.hits["/slow"] == 1, timeout_s=60)  # (processes start first)
        clients.neighbour_steps_during(step, "a slow page")
        step["thread"].join(timeout=deadline_s + 90)
    result = results(step["reply"])[0]
    assert "An error occurred while fetching" in result and f"{deadline_s} s" in result, result
    # Its deadline, not the page's 500 s of trickle (the first call also starts the
    # outside-call processes).
    assert step["seconds"] < deadline_s + 60, step["seconds"]
    assert outside.hits["/slow"] == 1


def test_an_unreachable_search_stalls_no_neighbour(tmp_path, outside, monkeypatch):
    from serpapi.serp_api_client import SerpApiClient

    with silent_server() as port:
        web_fetch.use_network(network(outside=outside, silent=port))
        monkeypatch.setattr(SerpApiClient, "BACKEND", f"http://silent.test:{port}")
        with agentic_service(tmp_path, workers=1, **FAST) as (url, _):
            clients = Clients(url)
            step = clients.web_step_in_background(search("tea"))
            time.sleep(0.5)  # the first try is waiting (three take 7.5 s at least)
            clients.neighbour_steps_during(step, "an unreachable search")
            step["thread"].join(timeout=60)
    reply = step["reply"]
    assert web_search.UNAVAILABLE in results(reply)[0] and reply["terminated"]
    assert reply["evaluation"]["aborted"] == web_search.ABORTED
    assert step["seconds"] >= 3 * 2.0 + 0.5 + 1.0  # three tries, backed off


def test_a_huge_body_and_a_gzip_bomb_stop_at_the_byte_caps(tmp_path, outside):
    # The huge body waits after its first MiB until the neighbour has stepped (the
    # server's gate): the fetch is in flight for as long as that takes, load or not.
    outside.gate.clear()
    held = {**FAST, "web_fetch_timeout_s": 120.0}
    with agentic_service(tmp_path, workers=1, **held) as (url, _):
        clients = Clients(url)
        step = clients.web_step_in_background(
            fetch(outside, "/huge?mb=256&hold=1") + fetch(outside, "/bomb?mb=64")
        )
        assert outside.holding.wait(timeout=60), "the huge body was never asked for"
        try:
            clients.neighbour_steps_during(step, "a huge body")
        finally:
            outside.gate.set()
        step["thread"].join(timeout=120)
    huge, bomb = results(step["reply"])
    assert "larger than the service's limit" in huge, huge
    assert "larger than the service's limit" in bomb, bomb
    assert outside.sent_bytes < 64 * 2**20, "the fetch read on past its cap"


def test_every_route_of_both_protocols_answers_a_web_search_episode(tmp_path, outside):
    with agentic_service(tmp_path, workers=1) as (url, _):
        for sparse in (False, True):
            data = walk_every_route(url, WEB_TASK, sparse)
            assert data == 0.0 if sparse else data["failure_tags"] == [ANSWER_NOT_FOUND]


def test_a_web_search_episode_runs_on_a_service_with_the_default_step_budget(tmp_path, outside):
    with agentic_service(tmp_path, workers=1) as (url, engine):
        assert engine.config.max_step_seconds == 10.0
        episodes = Episodes(httpx.Client(base_url=url, timeout=60))
        episode_id, _ = episodes.create(WEB_TASK, mode="validate")
        reply = episodes.step(episode_id, fetch(outside, "/page/tea"))
    assert "<h1>tea</h1>" in json.loads(results(reply)[0])["content"]


def _exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _kill(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def test_killing_the_workers_repeats_no_outside_call(tmp_path, outside):
    with agentic_service(tmp_path, workers=2, **FAST) as (url, engine):
        clients = Clients(url)
        first = clients.episodes.step(clients.web, fetch(outside, "/page/a") + search("tea"))
        workers = [w.process.pid for w in engine.pool.workers]
        _kill(workers)
        wait_for(lambda: engine.pool.replaced == len(workers))
        second = clients.episodes.step(clients.web, fetch(outside, "/page/b"))
        clients.neighbour_step()  # the neighbour was rebuilt and answers
    assert (outside.pages["a"], outside.hits["/search"], outside.pages["b"]) == (1, 1, 1)
    page_a, found = results(first)
    assert "<h1>a</h1>" in page_a and "'href': 'https://example.org/'" in found
    assert "<h1>b</h1>" in results(second)[0]


def test_a_call_whose_process_dies_is_answered_and_not_sent_again(tmp_path, outside):
    with agentic_service(tmp_path, workers=1, **FAST) as (url, engine):
        clients = Clients(url)
        step = clients.web_step_in_background(fetch(outside, "/slow"))
        wait_for(lambda: outside.hits["/slow"] == 1, timeout_s=60)
        killed = engine.kinds["agentic"].web_calls.pids()
        _kill(killed)
        step["thread"].join(timeout=30)
        wait_for(lambda: all(_exited(pid) for pid in killed))
        after = clients.episodes.step(clients.web, fetch(outside, "/page/c"))
    result = results(step["reply"])[0]
    assert result.startswith("Error during execution:") and "not sent again" in result, result
    assert outside.hits["/slow"] == 1
    assert "<h1>c</h1>" in results(after)[0], results(after)  # a new process answers
