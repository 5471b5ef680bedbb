"""The search transport of the BFCL V4 web-search tasks: SerpAPI with a rate limit and a
bounded retry.

bfcl-eval's `WebSearchAPI.search_engine_query` (the backend the tasks use, run as it
is) queries SerpAPI's DuckDuckGo engine through `serpapi.GoogleSearch(params).get_dict()`,
with the key from $SERPAPI_API_KEY, and on an HTTP 429 retries forever with exponential
back-off (2 s doubling to 120 s), sleeping inside the call. In the service that would
hold a worker process for as long as the rate limit lasts and then have the watchdog kill
it. So the name `GoogleSearch` in that module is bound to `SerpApiSearch` (the only way
to put a transport under bfcl-eval's method without copying it), which:

- spaces searches at least `min_interval_s` apart across all of the service's worker
  processes (a lock and a timestamp in shared memory, made before the workers fork), to
  stay under the throughput of the user's SerpAPI plan;
- sends each with a timeout (serpapi's default is 60,000 s) and retries connection
  errors, timeouts, HTTP 429 and 5xx up to `attempts` times with exponential back-off
  (honouring Retry-After), and no more;
- gives up with `SearchUnavailableError`, whose text bfcl-eval hands back as the call's
  `{"error": ...}` result. That result starts with `UNAVAILABLE`, and the service ends the
  episode on it as `aborted: web_search_unavailable` (env_service/episode.py), which the
  evaluator reports as a failed task to run again, never as the model's wrong answer.
  (The text never contains "429", which would send bfcl-eval's loop round forever.)

The key is read by bfcl-eval from the service's environment, never from a file here; the
service refuses web-search episodes when it is not set (`missing_key`).
`use_transport` swaps the transport (tests replay recorded SerpAPI payloads with one).

The backend's other tool, `fetch_url_content`, GETs whatever URL the model writes from the
service's machine. Left as it is, a model (or a client scripting one) could read the
service's own loopback, the cluster's private addresses or a cloud metadata endpoint. The
name `requests` in bfcl-eval's module is therefore bound to `PublicWebOnly`, which follows
redirects itself and refuses every hop whose host resolves to an address that is not
globally routable; the model gets bfcl-eval's usual fetch error. (A host that resolves
differently between the check and the connection could still slip through; closing that
needs a resolver pinned into the connection pool, which `requests` does not offer.)
"""

from __future__ import annotations

import multiprocessing
import os
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from seal.bfcl import web_fetch

SERPAPI_KEY_ENV = "SERPAPI_API_KEY"
UNAVAILABLE = "[seal: web search unavailable]"
ABORTED = "web_search_unavailable"
"""`aborted` of an episode whose search backend failed (see the module docstring)."""
BACKEND_MODULE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code.web_search"
FETCH_TIMEOUT_S = 20.0
"""fetch_url_content's own requests timeout (bfcl-eval's, not configurable)."""


@dataclass(frozen=True)
class SearchLimits:
    """How searches are paced and retried, and which pages may be fetched (service flags
    `--web-search-*`)."""

    min_interval_s: float = 1.0
    """At least this long between two searches of the service (all workers together):
    3,600 an hour at most. Set it from your SerpAPI plan's hourly throughput."""
    attempts: int = 4
    """Tries per search on connection errors, timeouts, HTTP 429 and 5xx."""
    timeout_s: float = 20.0
    """Seconds one SerpAPI request may take."""
    backoff_s: float = 2.0
    """Back-off before the second try, doubling after each (or the server's Retry-After)."""
    max_backoff_s: float = 30.0
    """At most this long between two tries."""

    def __post_init__(self):
        if min(self.min_interval_s, self.backoff_s) < 0 or self.attempts < 1 or self.timeout_s <= 0:
            raise ValueError(f"invalid web search limits: {self}")

    def worst_case_s(self) -> float:
        """The longest one search call can take once its turn has come."""
        backoff = sum(
            min(self.backoff_s * 2**k, self.max_backoff_s) for k in range(self.attempts - 1)
        )
        return self.attempts * self.timeout_s + backoff + self.min_interval_s


class SearchUnavailableError(RuntimeError):
    def __init__(self, why: str):
        # Never "429" in the text: bfcl-eval retries any error that mentions it, forever.
        super().__init__(f"{UNAVAILABLE} {why}".replace("429", "Too Many Requests"))


class _SharedPacer:
    """A minimum interval between events across forked processes: the time of the next
    free slot in shared memory, taken under a lock; the waiting happens outside it."""

    def __init__(self):
        context = multiprocessing.get_context("fork")
        self._lock = context.Lock()
        self._next = context.RawValue("d", 0.0)

    def wait(self, interval_s: float) -> float:
        """Sleep until this caller's slot; returns the slot (time.monotonic())."""
        with self._lock:
            now = time.monotonic()  # system-wide on Linux: comparable across processes
            slot = max(now, self._next.value)
            self._next.value = slot + interval_s
        if slot > now:
            time.sleep(slot - now)
        return slot


# Made at import, in the service's process (env_service imports this module), so the
# worker processes it forks share one pacer.
_PACER = _SharedPacer()
_LIMITS = SearchLimits()


def configure(limits: SearchLimits) -> None:
    """Pace and retry searches of this process and those it forks later by `limits`."""
    global _LIMITS
    _LIMITS = limits


def limits() -> SearchLimits:
    return _LIMITS


class SerpApiSearch:
    """`serpapi.GoogleSearch`'s interface (`GoogleSearch(params).get_dict()`) with the
    pacing, timeout and bounded retry of the module docstring."""

    requires_key = True

    def __init__(self, params: dict):
        self.params = dict(params)

    def get_dict(self) -> dict:
        import requests
        from serpapi import GoogleSearch

        settings, last = _LIMITS, ""
        delay = settings.backoff_s
        for attempt in range(1, settings.attempts + 1):
            _PACER.wait(settings.min_interval_s)
            client = GoogleSearch(dict(self.params))
            client.timeout = settings.timeout_s
            try:
                response = client.get_response()
            except requests.RequestException as e:
                last = f"{type(e).__name__}: {e}"
                retry_after = None
            else:
                status = response.status_code
                if status in (401, 403):
                    raise SearchUnavailableError(
                        f"SerpAPI refused the key in ${SERPAPI_KEY_ENV} (HTTP {status}): "
                        f"{response.text[:200]}"
                    )
                if status != 429 and status < 500:
                    try:
                        payload = response.json()
                    except ValueError as e:
                        raise SearchUnavailableError(
                            f"SerpAPI answered HTTP {status} with a body that is not JSON ({e})"
                        ) from None
                    if "429" not in str(payload.get("error", "")):
                        return payload  # results, or an error bfcl-eval reports itself
                last = f"HTTP {status}: {response.text[:200]}"
                retry_after = _seconds(response.headers.get("Retry-After"))
            if attempt < settings.attempts:
                wait = delay if retry_after is None else retry_after
                time.sleep(min(wait, settings.max_backoff_s))
                delay *= 2
        raise SearchUnavailableError(
            f"SerpAPI failed {settings.attempts} times (rate-limited, unreachable or "
            f"failing); the last: {last}"
        )


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # an HTTP date: use our own back-off


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


class NonPublicAddressError(ValueError):
    pass


class PublicWebOnly:
    """The `requests` bfcl-eval's `fetch_url_content` uses (it calls only `get`), limited
    to globally routable hosts at every redirect hop (module docstring)."""

    max_redirects = 5

    def get(self, url: str, **kwargs):
        import requests

        kwargs["allow_redirects"] = False  # each hop is checked before it is requested
        for _ in range(self.max_redirects + 1):
            check_public_url(url)
            response = requests.get(url, **kwargs)
            if not response.is_redirect:
                return response
            url = urljoin(url, response.headers["location"])
        raise requests.TooManyRedirects(f"more than {self.max_redirects} redirects")

    def __getattr__(self, name: str):
        import requests

        return getattr(requests, name)


def check_public_url(url: str) -> None:
    """Raise NonPublicAddressError unless every address `url`'s host resolves to is
    globally routable (not loopback, private, link-local, shared, reserved, multicast)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NonPublicAddressError(f"not an http(s) URL with a host: {url}")
    port = parts.port or 80
    try:
        addresses = web_fetch.network().resolve(parts.hostname, port)
    except OSError as e:
        raise NonPublicAddressError(f"cannot resolve {parts.hostname}: {e}") from None
    for address in addresses:
        if not web_fetch.network().allows(address, port) or address.is_multicast:
            raise NonPublicAddressError(
                f"{parts.hostname} resolves to {address}, which is not a public address: "
                "the environment service fetches public pages only"
            )


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
