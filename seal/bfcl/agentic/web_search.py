"""The transports under bfcl-eval's web-search backend (`WebSearchAPI`, run as it is): one
SerpAPI request per search attempt, and page fetches through the guarded GET of
seal/bfcl/agentic/web_fetch.py.

bfcl-eval's module gets these in place of its `serpapi.GoogleSearch` and `requests`
(the only way under its methods without copying them), because it retries a 429 forever
inside the call and fetches any URL unbounded. Retries are the service's
(env_service/agentic/web_calls.py). Why each rule: docs/web_search.md, "The transports".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from urllib.parse import urlencode

from seal.bfcl.agentic import web_fetch

SERPAPI_KEY_ENV = "SERPAPI_API_KEY"
UNAVAILABLE = "[seal: web search unavailable]"
ABORTED = "web_search_unavailable"
"""`aborted` of an episode whose search backend failed (see the module docstring)."""
BACKEND_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.web_search"
SEARCH = "search_engine_query"
FETCH = "fetch_url_content"
MAX_SEARCH_REPLY_BYTES = 2**20
"""A SerpAPI reply is a few tens of KB; past this it is not read."""


@dataclass(frozen=True)
class SearchLimits:
    """How searches are paced and retried, and how long and large a page fetch may be
    (service flags `--web-search-*`, `--web-fetch-*`)."""

    min_interval_s: float = 1.0
    """At least this long between two searches of the service: 3,600 an hour at most.
    Set it from your SerpAPI plan's hourly throughput."""
    attempts: int = 4
    """Tries per search on connection errors, timeouts, HTTP 429 and 5xx."""
    timeout_s: float = 20.0
    """Seconds one SerpAPI request may take."""
    backoff_s: float = 2.0
    """Back-off before the second try, doubling after each (or the server's Retry-After)."""
    max_backoff_s: float = 30.0
    """At most this long between two tries."""
    fetch_timeout_s: float = 20.0
    """Seconds one fetch_url_content may take in all, redirects included (bfcl-eval's
    own timeout is 20 s per read, which a page sending a byte at a time never meets)."""
    max_page_bytes: int = 4 * 2**20
    """Largest page fetch_url_content reads, on the wire and again once decompressed; a
    larger one is the call's error. bfcl-eval converts the page to text after the fetch
    (html2text, BeautifulSoup: 2 s a MiB on this project's machine)."""

    def __post_init__(self):
        if (
            min(self.min_interval_s, self.backoff_s) < 0
            or self.attempts < 1
            or min(self.timeout_s, self.fetch_timeout_s) <= 0
            or self.max_page_bytes < 1
        ):
            raise ValueError(f"invalid web search limits: {self}")

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        """The wait after failed try `attempt` (1-based): the server's Retry-After, else
        the back-off doubling from `backoff_s`; at most `max_backoff_s`."""
        wait = self.backoff_s * 2 ** (attempt - 1) if retry_after is None else retry_after
        return min(wait, self.max_backoff_s)

    def worst_case_s(self) -> float:
        """The longest one search can take, from its first try to its last answer."""
        waits = sum(self.backoff(k, None) for k in range(1, self.attempts))
        return self.attempts * (self.timeout_s + self.min_interval_s) + waits

    def call_seconds(self, name: str) -> float:
        """The longest one attempt of a call named `name` may wait for its answer."""
        return self.fetch_timeout_s if name == FETCH else self.timeout_s


_LIMITS = SearchLimits()


def configure(limits: SearchLimits) -> None:
    """Search and fetch by `limits` in this process and those it forks later."""
    global _LIMITS
    _LIMITS = limits


class SearchUnavailableError(RuntimeError):
    def __init__(self, why: str):
        # Never "429" in the text: bfcl-eval retries any error that mentions it, forever.
        super().__init__(f"{UNAVAILABLE} {why}".replace("429", "Too Many Requests"))


class RetrySearch(BaseException):  # noqa: N818 - not an error: a request to try again
    """A search attempt that failed in a way worth another try (module docstring). A
    BaseException so that bfcl-eval's `except Exception` lets it through to the service."""

    def __init__(self, why: str, retry_after: float | None = None):
        super().__init__(why)
        self.why, self.retry_after = why.replace("429", "Too Many Requests"), retry_after


def unavailable(why: str) -> dict:
    """bfcl-eval's result of a search whose transport gave up."""
    return {"error": str(SearchUnavailableError(why))}


class SerpApiSearch:
    """`serpapi.GoogleSearch`'s interface (`GoogleSearch(params).get_dict()`): one request,
    to the URL serpapi builds, through the guarded GET (module docstring)."""

    requires_key = True

    def __init__(self, params: dict):
        self.params = dict(params)

    def get_dict(self) -> dict:
        from serpapi import GoogleSearch

        url, params = GoogleSearch(dict(self.params)).construct_url()
        query = urlencode({k: v for k, v in params.items() if v is not None})
        try:
            page = web_fetch.get(f"{url}?{query}", {}, _LIMITS.timeout_s, MAX_SEARCH_REPLY_BYTES)
        except web_fetch.RefusedUrlError as e:
            raise SearchUnavailableError(f"SerpAPI's address: {e}") from None
        except web_fetch.FetchError as e:  # (its text holds no URL, so never the key)
            raise RetrySearch(f"SerpAPI: {e}") from None
        text = page.body[:200].decode(errors="replace")
        if page.status in (401, 403):
            raise SearchUnavailableError(
                f"SerpAPI refused the key in ${SERPAPI_KEY_ENV} (HTTP {page.status}): {text}"
            )
        if page.status == 429 or page.status >= 500:
            retry_after = _seconds(dict((k.lower(), v) for k, v in page.headers))
            raise RetrySearch(f"SerpAPI answered HTTP {page.status}: {text}", retry_after)
        try:
            payload = json.loads(page.body)
        except ValueError as e:
            raise SearchUnavailableError(
                f"SerpAPI answered HTTP {page.status} with a body that is not JSON ({e})"
            ) from None
        if isinstance(payload, dict) and "429" in str(payload.get("error", "")):
            raise RetrySearch(f"SerpAPI: {payload['error']}")
        return payload  # results, or an error bfcl-eval reports itself


def _seconds(headers: dict[str, str]) -> float | None:
    try:
        return float(headers["retry-after"])
    except (KeyError, ValueError):
        return None  # none, or an HTTP date: our own back-off


class PublicWebOnly:
    """The `requests` bfcl-eval's `fetch_url_content` uses (it calls only `get`)."""

    def get(self, url: str, headers: dict | None = None, **_):
        """`requests.get(url, headers=..., timeout=..., allow_redirects=True)`: its timeout
        is replaced by `fetch_timeout_s` for the whole fetch; redirects are followed."""
        import requests
        from requests.structures import CaseInsensitiveDict
        from requests.utils import get_encoding_from_headers

        page = web_fetch.get(
            url, dict(headers or {}), _LIMITS.fetch_timeout_s, _LIMITS.max_page_bytes
        )
        response = requests.Response()
        response.status_code, response.reason, response.url = page.status, page.reason, page.url
        response.headers = CaseInsensitiveDict(page.headers)
        response._content = page.body
        response.encoding = get_encoding_from_headers(response.headers)
        return response


_TRANSPORT: type = SerpApiSearch


def use_transport(transport: type) -> None:
    """Search through `transport` (GoogleSearch's interface) in this process and those
    it forks later; rebinds bfcl-eval's module if it is already imported."""
    global _TRANSPORT
    _TRANSPORT = transport
    import sys

    module = sys.modules.get(BACKEND_MODULE)
    if module is not None:
        bind_transport(module)


def bind_transport(module) -> None:
    """Make bfcl-eval's web-search backend module search through the chosen transport and
    fetch pages through `PublicWebOnly`."""
    module.GoogleSearch = _TRANSPORT
    module.requests = PublicWebOnly()


def missing_key() -> str | None:
    """Why web-search episodes cannot run in this process, or None."""
    if getattr(_TRANSPORT, "requires_key", False) and not os.environ.get(SERPAPI_KEY_ENV):
        return (
            f"the BFCL V4 web-search tasks search through SerpAPI: set ${SERPAPI_KEY_ENV} in "
            "the environment service's environment (never in a file of the repository)"
        )
    return None


def is_unavailable(result: str) -> bool:
    """A call result that says the search transport gave up (not the model's doing)."""
    return result.startswith('{"error": "' + UNAVAILABLE)
