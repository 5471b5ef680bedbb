"""BFCL V4 web search through bfcl-eval's own backend (`WebSearchAPI`), with no network:

- episodes search through a recorded transport (SerpAPI DuckDuckGo replies kept in
  tests/data/serpapi_duckduckgo_recording.json) bound where bfcl-eval's backend takes its
  transport, and are scored by bfcl-eval's checker; `fetch_url_content` reads a page from
  a server on 127.0.0.1;
- the real transport (`SerpApiSearch`, paced and retried by env_service/agentic/web_calls.py) runs
  against a fake SerpAPI on 127.0.0.1: it retries 429 and 5xx, honours Retry-After,
  paces searches across the service, and gives up with an error the service turns into
  an aborted episode (the evaluator's failed task), never into a wrong answer.

Needs the ood extra's google-search-results (module serpapi), html2text and
beautifulsoup4, which bfcl-eval's backend imports; skipped without them.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from pathlib import Path

import pytest
from agentic_scripts import WEB_SEARCH_MISSING, agentic_service, answer_text, call, play

from benchfixtures.web import network, web_server
from env_service.agentic.web_calls import WebCalls
from seal.bfcl.agentic import web_fetch, web_search
from seal.bfcl.agentic.tasks import ANSWER_NOT_FOUND, PASS
from seal.bfcl.calls import ToolCall
from seal.bfcl.tasks import load_task
from seal.rollout.env_client import EnvServiceError

MISSING = WEB_SEARCH_MISSING
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"bfcl-eval's web search backend imports {', '.join(MISSING)} (the ood extra): "
    "pip install -e '.[ood]'",
)
RECORDING = json.loads(
    (Path(__file__).parents[3] / "data" / "serpapi_duckduckgo_recording.json").read_text()
)
QUICK = {
    "web_search_interval_s": 0.0,
    "web_search_attempts": 3,
    "web_search_timeout_s": 2.0,
    "web_search_backoff_s": 0.1,
}
TEA, BILLIONAIRE = "most expensive tea in the world", "richest billionaire in China Forbes 2025"


class RecordedSearch:
    """serpapi.GoogleSearch's interface over the recording; an unrecorded query fails
    the test rather than reaching the network."""

    requires_key = False
    sent: list[dict] = []

    def __init__(self, params: dict):
        self.params = params

    def get_dict(self) -> dict:
        RecordedSearch.sent.append(dict(self.params))
        query = self.params["q"]
        if query not in RECORDING:
            raise AssertionError(f"no recorded reply for {query!r}")
        return json.loads(json.dumps(RECORDING[query]))


@pytest.fixture
def recorded_search():
    RecordedSearch.sent = []
    web_search.use_transport(RecordedSearch)
    yield RecordedSearch
    web_search.use_transport(web_search.SerpApiSearch)


def search(keywords: str) -> str:
    return call("search_engine_query", keywords=keywords)


@pytest.mark.parametrize("workers", [0, 1])
def test_web_search_question_scores_the_ground_truth_one_through_the_real_backend(
    tmp_path, recorded_search, workers, monkeypatch
):
    monkeypatch.delenv(web_search.SERPAPI_KEY_ENV, raising=False)
    task_id = "web_search_base_0"
    question = load_task(task_id)
    turns = [[search(TEA), search(BILLIONAIRE), answer_text(question.answers[0])]]
    wrong = [[search(TEA), answer_text("Zhong Shanshan")]]
    with agentic_service(tmp_path, workers=workers, **QUICK) as (url, _):
        right = asyncio.run(play(url, task_id, turns))
        wrong = asyncio.run(play(url, task_id, wrong))

    assert (right["accuracy"], right["failure_tags"], right["tool_calls"]) == (1, [PASS], 2)
    assert (wrong["accuracy"], wrong["failure_tags"]) == (0, [ANSWER_NOT_FOUND])
    # bfcl-eval's formatting of the recorded reply: title, href and the snippet as body.
    results = right["output"][3]["content"]
    assert "'title': 'The richest billionaire in each country 2025 - Forbes'" in results
    assert "'body': 'China: Zhang Yiming" in results
    assert right["input"][0]["content"].startswith("For your final answer to the user")
    if workers == 0:  # the transport ran in this process: what bfcl-eval asked SerpAPI for
        assert recorded_search.sent[0] == {"engine": "duckduckgo", "q": TEA, "kl": "wt-wt",
                                           "api_key": None}  # fmt: skip


def test_no_snippet_search_hides_the_result_bodies(tmp_path, recorded_search):
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _):
        report = asyncio.run(play(url, "web_search_no_snippet_0", [[search(TEA), "done"]]))
    results = report["output"][1]["content"]
    assert "'href': 'https://en.wikipedia.org/wiki/Da_Hong_Pao'" in results
    assert "'body'" not in results and "Wuyi" not in results


def test_a_search_without_results_is_answered_as_bfcl_answers_it(tmp_path, recorded_search):
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _):
        turns = [[search("a query nobody answers"), "done"]]
        report = asyncio.run(play(url, "web_search_base_1", turns))
    assert "Failed to retrieve the search results" in report["output"][1]["content"]
    assert report["aborted"] is None and report["tool_errors"] == 1


def _fetch_local_page(tmp_path, outside: bool) -> tuple[dict, int]:
    """Play one fetch_url_content of a page on a local server: one the test network names
    `outside.test` and allows, or (`outside` false) a bystander on 127.0.0.1 it does not;
    the report and how many requests reached the page's server."""
    with web_server() as web, web_server() as bystander:
        web_fetch.use_network(network(outside=web))
        page = f"http://outside.test:{web.port}" if outside else bystander.url("")
        try:
            with agentic_service(tmp_path, workers=1, **QUICK) as (url, _):
                fetch = call("fetch_url_content", url=f"{page}/page/tea", mode="markdown")
                report = asyncio.run(play(url, "web_search_base_0", [[fetch, "done"]]))
        finally:
            web_fetch.use_network(web_fetch.PublicInternet())
        return report, (web if outside else bystander).pages["tea"]


def test_fetch_url_content_reads_a_page_through_the_backend(tmp_path, recorded_search):
    report, hits = _fetch_local_page(tmp_path, outside=True)
    content = json.loads(report["output"][1]["content"].split("\n")[1])["content"]
    assert "# tea" in content and "**Fujian**" in content  # bfcl-eval's markdown
    assert hits == 1


def test_fetch_url_content_refuses_the_services_own_network(tmp_path, recorded_search):
    """A model cannot make the service read loopback (or any address the network does
    not allow): the call gets bfcl-eval's fetch error and nothing reaches the server
    (tests/seal/bfcl/agentic/test_web_fetch.py has every spelling)."""
    report, hits = _fetch_local_page(tmp_path, outside=False)
    result = report["output"][1]["content"]
    assert "An error occurred while fetching" in result and "public web pages only" in result
    assert hits == 0


# --- the real transport against a fake SerpAPI ----------------------------------------------


class FakeSerpApi(http.server.BaseHTTPRequestHandler):
    """Answers the statuses queued in `script` (then 200 with a result), recording when
    each request came."""

    script: list[tuple[int, dict]] = []
    seen: list[float] = []

    def do_GET(self):  # noqa: N802
        FakeSerpApi.seen.append(time.monotonic())
        status, headers = FakeSerpApi.script.pop(0) if FakeSerpApi.script else (200, {})
        body = {"organic_results": [{"title": "t", "link": "https://x", "snippet": "s"}]}
        if status != 200:
            body = {"error": f"status {status}"}
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_serpapi(monkeypatch):
    from serpapi.serp_api_client import SerpApiClient

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeSerpApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    web_fetch.use_network(network(serpapi=port))
    monkeypatch.setattr(SerpApiClient, "BACKEND", f"http://serpapi.test:{port}")
    monkeypatch.setenv(web_search.SERPAPI_KEY_ENV, "test-key")
    FakeSerpApi.script, FakeSerpApi.seen = [], []
    yield FakeSerpApi
    server.shutdown()
    web_fetch.use_network(web_fetch.PublicInternet())
    web_search.configure(web_search.SearchLimits())


def searched(limits: web_search.SearchLimits, *queries: str) -> list[str]:
    """The results of searches made at once, as the service makes them (paced and
    retried on its event loop: env_service/agentic/web_calls.py; here in threads)."""

    async def run() -> list[str]:
        pool = WebCalls(len(queries), limits, threads=True)
        calls = [ToolCall("search_engine_query", {"keywords": q}) for q in queries]
        answers = await asyncio.gather(
            *(pool.call(f"episode-{k}", "web_search_base_0", c) for k, c in enumerate(calls))
        )
        return [result for result, _ in answers]

    web_search.configure(limits)
    return asyncio.run(run())


def test_searches_are_retried_on_rate_limits_and_server_errors_then_answered(fake_serpapi):
    limits = web_search.SearchLimits(min_interval_s=0, attempts=4, timeout_s=2, backoff_s=2.0)
    fake_serpapi.script = [(429, {"Retry-After": "0.2"}), (503, {}), (429, {"Retry-After": "0"})]
    (result,) = searched(limits, "x")
    assert "'title': 't'" in result and "'href': 'https://x'" in result
    gaps = [b - a for a, b in zip(fake_serpapi.seen, fake_serpapi.seen[1:], strict=False)]
    # Retry-After 0.2 s (not the own 2 s), then the own back-off (2 s doubling: 4 s, not
    # 8 s), then Retry-After 0 (not 8 s): each below the wait it would be if it were wrong,
    # with seconds of room for a loaded machine.
    assert len(fake_serpapi.seen) == 4, fake_serpapi.seen
    assert 0.2 <= gaps[0] < 2.0 and 4.0 <= gaps[1] < 8.0 and gaps[2] < 4.0, gaps


def test_a_search_gives_up_after_its_attempts_with_an_error_bfcl_does_not_retry(fake_serpapi):
    limits = web_search.SearchLimits(min_interval_s=0, attempts=2, timeout_s=2, backoff_s=0)
    fake_serpapi.script = [(429, {"Retry-After": "0"})] * 2
    (result,) = searched(limits, "x")
    assert len(fake_serpapi.seen) == 2
    assert web_search.is_unavailable(result) and "429" not in result
    assert "test-key" not in result  # the key is in the request's URL, never in an error
    # A refused key is not retried.
    fake_serpapi.script, fake_serpapi.seen = [(401, {})], []
    (result,) = searched(limits, "x")
    assert web_search.is_unavailable(result) and "refused the key" in result
    assert len(fake_serpapi.seen) == 1


def test_a_search_that_gives_up_aborts_the_episode_instead_of_scoring_it(tmp_path, fake_serpapi):
    fake_serpapi.script = [(500, {})] * 3
    question = load_task("web_search_base_0")
    turns = [[search(TEA), answer_text(question.answers[0])]]
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _):
        report = asyncio.run(play(url, "web_search_base_0", turns))
    assert report["aborted"] == web_search.ABORTED and report["terminated"]
    assert (report["accuracy"], report["steps"]) == (0, 1)


def test_searches_are_paced_across_the_service(fake_serpapi):
    limits = web_search.SearchLimits(min_interval_s=0.15, attempts=1, timeout_s=2)
    searched(limits, "warm-up")  # the first search's imports and connection make it late
    fake_serpapi.seen.clear()
    searched(limits, *[f"q{k}" for k in range(6)])
    # Each search had a slot of its own: the k-th is sent k intervals after the first. They
    # are timed where they arrive, so one late thread shortens the gap after it, but the
    # slots are absolute: the k-th's distance from the first holds, less the first's delay.
    seen = fake_serpapi.seen
    late_first = 0.1  # a loaded machine's thread start
    assert len(seen) == 6
    assert all(seen[k] - seen[0] >= 0.15 * k - late_first for k in range(6)), seen


def test_web_search_is_refused_without_a_key(tmp_path, monkeypatch):
    monkeypatch.delenv(web_search.SERPAPI_KEY_ENV, raising=False)
    no_key = pytest.raises(EnvServiceError, match=r"HTTP 409.*SERPAPI_API_KEY")
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _), no_key:
        asyncio.run(play(url, "web_search_base_0", [["done"]]))
