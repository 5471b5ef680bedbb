"""BFCL V4 web search through bfcl-eval's own backend (`WebSearchAPI`), with no network:

- episodes search through a recorded transport (SerpAPI DuckDuckGo replies kept in
  tests/data/serpapi_duckduckgo_recording.json) bound where bfcl-eval's backend takes its
  transport, and are scored by bfcl-eval's checker; `fetch_url_content` reads a page from
  a server on 127.0.0.1;
- the real transport (`SerpApiSearch`: pacing, timeout, bounded retry) runs against a
  fake SerpAPI on 127.0.0.1: it retries 429 and 5xx, honours Retry-After, paces searches
  across processes, and gives up with an error the service turns into an aborted
  episode (the evaluator's failed task), never into a wrong answer.

Needs the ood extra's google-search-results (module serpapi), html2text and
beautifulsoup4, which bfcl-eval's backend imports; skipped without them.
"""

from __future__ import annotations

import asyncio
import http.server
import importlib.util
import json
import multiprocessing
import threading
import time
from pathlib import Path

import pytest
from agentic_scripts import agentic_service, answer_text, call, play

from seal.bfcl import web_search
from seal.bfcl.agentic import ANSWER_NOT_FOUND, PASS
from seal.bfcl.tasks import load_task
from seal.rollout.env_client import EnvServiceError

MISSING = [m for m in ("serpapi", "html2text", "bs4") if importlib.util.find_spec(m) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"bfcl-eval's web search backend imports {', '.join(MISSING)} (the ood extra): "
    "pip install -e '.[ood]'",
)
RECORDING = json.loads(
    (Path(__file__).parent / "data" / "serpapi_duckduckgo_recording.json").read_text()
)
QUICK = {
    # Room for one search (pacing and retries) and one page fetch in a step.
    "max_step_seconds": 60.0,
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


class _Page(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):  # noqa: N802 - http.server's name
        _Page.hits += 1
        body = b"<html><body><h1>Da Hong Pao</h1><p>Grown in <b>Fujian</b>.</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _fetch_local_page(tmp_path, **service) -> tuple[dict, int]:
    """Play one fetch_url_content of a page served on 127.0.0.1; the report and how many
    requests reached the page's server."""
    _Page.hits = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = f"http://127.0.0.1:{server.server_address[1]}/tea"
    try:
        with agentic_service(tmp_path, workers=1, **QUICK, **service) as (url, _):
            fetch = call("fetch_url_content", url=page, mode="markdown")
            report = asyncio.run(play(url, "web_search_base_0", [[fetch, "done"]]))
    finally:
        server.shutdown()
    return report, _Page.hits


def test_fetch_url_content_reads_a_page_through_the_backend(tmp_path, recorded_search):
    report, hits = _fetch_local_page(tmp_path, web_fetch_private_urls=True)
    content = json.loads(report["output"][1]["content"].split("\n")[1])["content"]
    assert "# Da Hong Pao" in content and "**Fujian**" in content
    assert hits == 1


def test_fetch_url_content_refuses_the_services_own_network(tmp_path, recorded_search):
    """By default a model cannot make the service read loopback (or any non-public
    address): the call gets bfcl-eval's fetch error and nothing reaches the server."""
    report, hits = _fetch_local_page(tmp_path)
    result = report["output"][1]["content"]
    assert "An error occurred while fetching" in result and "not a public address" in result
    assert hits == 0


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8082/v1/profile", "http://localhost/", "http://10.1.2.3/",
     "http://169.254.169.254/latest/meta-data/", "http://[::1]/", "http://100.64.0.1/",
     "http://192.168.0.1/", "file:///etc/passwd"],
)  # fmt: skip
def test_non_public_addresses_are_refused(url):
    with pytest.raises(web_search.NonPublicAddressError):
        web_search.check_public_url(url)


def test_a_public_address_is_allowed():
    web_search.check_public_url("http://8.8.8.8/search")  # an IP literal: no DNS needed


def test_a_redirect_into_the_private_network_is_refused(monkeypatch):
    """Redirects are followed one hop at a time, each hop checked before it is requested."""
    import requests

    requested = []

    def fake_get(url, **kwargs):
        requested.append(url)
        assert kwargs["allow_redirects"] is False
        response = requests.Response()
        response.status_code, response.url = 302, url
        response.headers["location"] = "http://127.0.0.1:8082/v1/profile"
        return response

    monkeypatch.setattr(requests, "get", fake_get)
    with pytest.raises(web_search.NonPublicAddressError, match="127.0.0.1"):
        web_search.PublicWebOnly().get("http://8.8.8.8/start", timeout=1)
    assert requested == ["http://8.8.8.8/start"]


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
    monkeypatch.setattr(SerpApiClient, "BACKEND", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv(web_search.SERPAPI_KEY_ENV, "test-key")
    FakeSerpApi.script, FakeSerpApi.seen = [], []
    yield FakeSerpApi
    server.shutdown()
    web_search.configure(web_search.SearchLimits())


def test_the_transport_retries_rate_limits_and_server_errors_then_answers(fake_serpapi):
    limits = web_search.SearchLimits(min_interval_s=0, attempts=4, timeout_s=2, backoff_s=0.5)
    web_search.configure(limits)
    fake_serpapi.script = [(429, {"Retry-After": "0.2"}), (503, {}), (429, {"Retry-After": "0"})]
    start = time.monotonic()
    payload = web_search.SerpApiSearch({"engine": "duckduckgo", "q": "x"}).get_dict()
    assert payload["organic_results"][0]["title"] == "t"
    gaps = [b - a for a, b in zip(fake_serpapi.seen, fake_serpapi.seen[1:], strict=False)]
    # Retry-After 0.2 s, then the own back-off (0.5 s doubling: 1 s), then Retry-After 0.
    assert len(fake_serpapi.seen) == 4 and 0.2 <= gaps[0] < 0.9 and 1.0 <= gaps[1] < 1.9
    assert gaps[2] < 0.9 and time.monotonic() - start < 5


def test_the_transport_gives_up_after_its_attempts_with_an_error_bfcl_does_not_retry(
    fake_serpapi,
):
    web_search.configure(web_search.SearchLimits(min_interval_s=0, attempts=2, timeout_s=2))
    fake_serpapi.script = [(429, {"Retry-After": "0"})] * 2
    with pytest.raises(web_search.SearchUnavailableError) as raised:
        web_search.SerpApiSearch({"engine": "duckduckgo", "q": "x"}).get_dict()
    assert len(fake_serpapi.seen) == 2
    assert str(raised.value).startswith(web_search.UNAVAILABLE) and "429" not in str(raised.value)
    # A refused key is not retried.
    fake_serpapi.script, fake_serpapi.seen = [(401, {})], []
    with pytest.raises(web_search.SearchUnavailableError, match="refused the key"):
        web_search.SerpApiSearch({"engine": "duckduckgo", "q": "x"}).get_dict()
    assert len(fake_serpapi.seen) == 1


def test_a_search_that_gives_up_aborts_the_episode_instead_of_scoring_it(tmp_path, fake_serpapi):
    fake_serpapi.script = [(500, {})] * 3
    question = load_task("web_search_base_0")
    turns = [[search(TEA), answer_text(question.answers[0])]]
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _):
        report = asyncio.run(play(url, "web_search_base_0", turns))
    assert report["aborted"] == web_search.ABORTED and report["terminated"]
    assert (report["accuracy"], report["steps"]) == (0, 1)


def _paced(interval: float, count: int, out) -> None:
    for _ in range(count):
        out.put(web_search._PACER.wait(interval))


def test_searches_are_paced_across_forked_worker_processes():
    queue = multiprocessing.get_context("fork").Queue()
    procs = [
        multiprocessing.get_context("fork").Process(target=_paced, args=(0.15, 3, queue))
        for _ in range(2)
    ]
    for proc in procs:
        proc.start()
    times = sorted(queue.get(timeout=30) for _ in range(6))
    for proc in procs:
        proc.join(timeout=30)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert min(gaps) >= 0.15 - 1e-9, gaps  # each search got a slot of its own


def test_web_search_is_refused_without_a_key_or_with_a_step_budget_too_short(tmp_path, monkeypatch):
    monkeypatch.delenv(web_search.SERPAPI_KEY_ENV, raising=False)
    turns = [["done"]]
    no_key = pytest.raises(EnvServiceError, match=r"HTTP 409.*SERPAPI_API_KEY")
    with agentic_service(tmp_path, workers=0, **QUICK) as (url, _), no_key:
        asyncio.run(play(url, "web_search_base_0", turns))
    monkeypatch.setenv(web_search.SERPAPI_KEY_ENV, "test-key")
    too_short = pytest.raises(EnvServiceError, match=r"HTTP 409.*--max-step-seconds \d+")
    with agentic_service(tmp_path, workers=0) as (url, _), too_short:  # the default 10 s
        asyncio.run(play(url, "web_search_base_0", turns))
