"""Shared fixtures for the BFCL and environment-service tests.

`service(**config)` starts the FastAPI app in-process (starlette's TestClient, lifespan
included) with a `ServiceConfig` and returns a `Service`: the HTTP client, the engine
behind it, and the native API's episode calls (`Episodes`), which check each status;
`results(step)` lists a step's tool results. `release_service(**config)` is the same on
the release protocol (tests/release_protocol_client.py). `live_service` runs the app
under uvicorn on a free local port, for clients that need a real socket.
`service_process(*flags)` runs `python -m env_service` in its own process on a free
port, for tests where the service may hang or must be signalled (it is killed after).
`one_step_run` is a one-step launcher run made once per session, for the modules that
only read it.

Shared helpers the test modules import from here: `free_port()`, `serving(app)`,
`call_text`/`native_step` (a call as the model writes it, a native step body),
`gt_turns`/`gt_texts` (the ground-truth policy's texts), `shipped_tokenizer()` (with the
`tokenizer` and `llama_tokenizer` fixtures). The tiny models are tests/tiny_models.py's,
the verl smokes' early runs tests/early_runs.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from early_runs import EarlyRuns
from fastapi.testclient import TestClient
from filelock import FileLock
from release_protocol_client import ReleaseProtocolClient

from env_service.app import create_app
from env_service.engine import EnvEngine, ServiceConfig
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import (
    END_OF_TURN_TEXT,
    assistant_messages,
    ground_truth_trajectory,
    tool_call_text,
)
from seal.bfcl.tasks import load_task
from seal.formats.base import ToolFormat
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.env_client import TOKEN_ENV, call_body
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER

QWEN_FORMAT = get_format(PAPER_QWEN)
"""The tool format the harness writes and parses assistant texts in (the paper's Qwen2.5
prompt's; an episode made with `prompt="rich"` is parsed as the `qwen2.5` format does)."""
PARSERS = {"paper": QWEN_FORMAT.parse, "rich": get_format("qwen2.5").parse}


class Episodes:
    """The native API's episode calls, each checking its status: over the in-process
    app (`Service`) or a service on a socket (`Episodes(httpx.Client(base_url=url))`).
    Steps take a model's text in Qwen2.5's format and send the calls the client parses
    from it, as the project's clients do (seal/rollout/env_client.py)."""

    def __init__(self, http: httpx.Client):
        self.http = http
        self.prompts: dict[str, str] = {}
        """The prompt each episode was made with (its texts are parsed by that prompt's
        format)."""

    def create(self, task_id: str, episode_id: str | None = None, **settings) -> tuple[str, dict]:
        """Create an episode with `settings` (EpisodeSettings' keys): (its id, the reply)."""
        body = {"task_id": task_id, "episode_id": episode_id, "settings": settings}
        reply = self.http.post("/v1/episodes", json=body)
        assert reply.status_code == 201, reply.text
        self.prompts[reply.json()["episode_id"]] = settings.get("prompt", "paper")
        return reply.json()["episode_id"], reply.json()

    def step(self, episode_id: str, text: str, expect: int = 200) -> dict:
        """One assistant turn: the StepResult, or the error's body when `expect` is one."""
        parse = PARSERS[self.prompts.get(episode_id, "paper")]
        calls = [call_body(call) for call in parse(text)]
        body = {"content": text, "tool_calls": calls}
        reply = self.http.post(f"/v1/episodes/{episode_id}/steps", json=body)
        assert reply.status_code == expect, reply.text
        return reply.json()

    def call(self, episode_id: str, name: str, arguments: dict) -> dict:
        """One assistant turn of one call, sent as given (a name no model format would
        parse included): the StepResult."""
        body = {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}
        reply = self.http.post(f"/v1/episodes/{episode_id}/steps", json=body)
        assert reply.status_code == 200, reply.text
        return reply.json()

    def evaluate(self, episode_id: str) -> dict:
        """The Evaluation of a live episode (one that ended carries its own)."""
        reply = self.http.get(f"/v1/episodes/{episode_id}/evaluation")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def close(self, episode_id: str) -> None:
        reply = self.http.delete(f"/v1/episodes/{episode_id}")
        assert reply.status_code == 204, reply.text

    def play(self, episode_id: str, turns: list[list[str]]) -> list[dict]:
        """Send each turn's texts until the episode ends; returns every StepResult."""
        replies = []
        for texts in turns:
            for text in texts:
                replies.append(self.step(episode_id, text))
                if replies[-1]["terminated"]:
                    return replies
        return replies


def results(step: dict) -> list[str]:
    """The tool results a StepResult answers, in the order of the step's calls."""
    return [m["content"] for m in step["messages"] if m["role"] == "tool"]


def call_text(name: str, **arguments) -> str:
    """One call written as the paper's Qwen2.5 prompt has the model write it."""
    return tool_call_text([ToolCall(name, arguments)])


def native_step(text: str, seq: int | None) -> dict:
    """A native step body: the text and the calls the Qwen2.5 format parses from it."""
    calls = [call_body(c) for c in QWEN_FORMAT.parse(text)]
    return {"content": text, "tool_calls": calls, "seq": seq}


class Service(Episodes):
    """The app in this process: its TestClient (`http`) and its engine."""

    def __init__(self, http: TestClient, engine: EnvEngine):
        super().__init__(http)
        self.engine = engine


@pytest.fixture
def service():
    """A factory: `service(max_live_episodes=2, ...)` -> a running `Service`."""
    with contextlib.ExitStack() as stack:

        def start(**config) -> Service:
            app = create_app(ServiceConfig(**config))
            http = stack.enter_context(TestClient(app))
            return Service(http, app.state.engine)

        yield start


@pytest.fixture
def release_service(service):
    """A factory: `release_service(prompt=None, **config)` -> the service, spoken to on the
    release protocol (tests/release_protocol_client.py's ReleaseProtocolClient, with the
    service's engine;
    `prompt`: the prompt its episodes ask for, None for the default, the paper's)."""

    def start(prompt: str | None = None, **config) -> ReleaseProtocolClient:
        svc = service(**config)
        return ReleaseProtocolClient(svc.http, svc.engine, prompt)

    return start


@pytest.fixture
def no_token_from_the_environment(monkeypatch):
    """The launcher reads $SEAL_ENV_TOKEN and sets it for its job: keep tests apart
    (setenv first, so that the variable is unset again after the test, whatever sets it)."""
    monkeypatch.setenv(TOKEN_ENV, "")
    monkeypatch.delenv(TOKEN_ENV)


STOPPING_SERVERS: list[threading.Thread] = []
"""Threads of uvicorn servers told to exit, joined at the session's end."""


@pytest.fixture(scope="session", autouse=True)
def servers_stopped():
    """Fails the session's last test if a server `serving` started still runs 30 s after
    it was told to exit (an app that ignores its shutdown)."""
    yield
    deadline = time.monotonic() + 30
    for thread in STOPPING_SERVERS:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    running = sum(thread.is_alive() for thread in STOPPING_SERVERS)
    assert not running, f"{running} uvicorn server(s) still running 30 s after their tests"


@contextlib.contextmanager
def serving(app, lifespan: str = "auto"):
    """Serve any ASGI app with uvicorn on 127.0.0.1 (a free port); yields the base URL.
    lifespan "auto": the service runs its start-up, a bare fake app need not speak it.

    On exit the server is told to stop and the test goes on: uvicorn takes 0.1-0.2 s to
    stop (its loop looks for the exit flag every 0.1 s, then waits 0.1 s for connections
    to close) and hundreds of tests serve an app; the stops are awaited at the session's
    end (`servers_stopped`). Each server has its own port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True  # uvicorn closes `sock` as it stops
        STOPPING_SERVERS.append(thread)


@contextlib.contextmanager
def serving_aiohttp(app):
    """Serve an aiohttp application (a fake model endpoint) on 127.0.0.1 (a free port), in
    its own thread and event loop; yields the base URL."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


@pytest.fixture
def serve_app():
    """A factory: `serve_app(asgi_app)` -> its base URL, served until the test ends (the
    service wrapped in a misbehaving middleware: tests/misbehaving.py)."""
    with contextlib.ExitStack() as stack:
        yield lambda app: stack.enter_context(serving(app))


@pytest.fixture
def live_service():
    """The app served by uvicorn on 127.0.0.1 (a free port); yields (base_url, engine)."""
    app = create_app()
    with serving(app, lifespan="on") as url:
        yield url, app.state.engine


REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A local port no one listens on now (the OS's pick; it may be taken again later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServiceProcess:
    proc: subprocess.Popen
    url: str

    def terminate(self, timeout_s: float) -> int | None:
        """SIGTERM, then the exit status if it exits within `timeout_s` (else None)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None


@pytest.fixture
def service_process():
    """A factory: `service_process("--max-step-seconds", "1", patch="...")` -> a
    `ServiceProcess` once /healthz answers. `patch` is Python run in the service process
    before it starts (to plant a misbehaving backend). Every process is killed after."""
    procs: list[subprocess.Popen] = []

    def start(*flags: str, patch: str = "", env: dict | None = None) -> ServiceProcess:
        port = free_port()
        argv = ["--port", str(port), *flags]
        code = f"{patch}\nfrom env_service.__main__ import main\nmain({argv!r})"
        proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO_ROOT, env={**os.environ, **(env or {})}
        )
        procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the service exited with {proc.returncode}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    return ServiceProcess(proc, url)
            time.sleep(0.1)
        raise AssertionError("the service did not answer /healthz within 60 s")

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


# --- the ground-truth texts, the shipped tokenizer, the tiny Qwen2 ----------------------


def gt_turns(task_id: str, tool_format: ToolFormat | None = None) -> list[list[str]]:
    """Per turn, the assistant texts of the ground-truth policy of `task_id`, its calls
    written as `tool_format` writes them (Qwen2.5's Hermes format by default)."""
    fmt = tool_format or get_format(PAPER_QWEN)
    trajectory = ground_truth_trajectory(load_task(task_id))
    return assistant_messages(trajectory, fmt.call_text, fmt.answer_text(END_OF_TURN_TEXT))


def gt_texts(task_id: str, tool_format: ToolFormat | None = None) -> list[str]:
    """The texts of `gt_turns`, all turns in order (one per generation)."""
    return [text for turn in gt_turns(task_id, tool_format) for text in turn]


STRIP_RULE = "{%- if loop.index0 > ns.last_query_index %}"
"""The line of Qwen3.5's template that keeps an assistant turn's think block only after
the last user question."""


def full_render(fmt: ToolFormat, conversation) -> str:
    """`fmt`'s full render of `conversation`, what the driver's ids must equal. Qwen3.5's
    template drops the think blocks of assistant turns before the last user question,
    which an append-only driver keeps (docs/tool_formats.md, "Qwen3.5"): for its formats,
    the template with that one rule off, every turn's block kept."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from seal.formats import qwen35

    if not isinstance(fmt, qwen35.Qwen35Template):
        return fmt.render(conversation)
    assert qwen35.template().count(STRIP_RULE) == 1
    keeping = qwen35.template().replace(STRIP_RULE, "{%- if true %}")
    rendered, _ = render_jinja_template(
        [conversation.messages],
        tools=conversation.functions or None,
        chat_template=keeping,
        add_generation_prompt=True,
    )
    return rendered[0]


LLAMA_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]


def shipped_tokenizer(llama_tokens: bool = False):
    """A new copy of the shipped Qwen2.5 tokenizer (the tiny model's). With `llama_tokens`,
    plus Llama 3's special tokens, for the Llama-layout formats: exact for the Qwen models,
    a close proxy for Llama 3's tokenizer (the context budget needs their end-of-turn token
    as one token). Qwen3.5's stand-in: `qwen35_tokenizer`."""
    # Imported here: transformers takes seconds to import, and most tests never need it.
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_TOKENIZER)
    if llama_tokens:
        tokenizer.add_special_tokens({"additional_special_tokens": LLAMA_SPECIAL_TOKENS})
    return tokenizer


@pytest.fixture(scope="session")
def tokenizer():
    """The shipped Qwen2.5 tokenizer, one for the session: a test that changes a tokenizer
    makes its own with `shipped_tokenizer()`."""
    return shipped_tokenizer()


@pytest.fixture(scope="session")
def llama_tokenizer():
    """`tokenizer` plus Llama 3's special tokens (another object), one for the session."""
    return shipped_tokenizer(llama_tokens=True)


@pytest.fixture(scope="session")
def qwen35_tokenizer():
    """tiny-qwen3.5's tokenizer, Qwen3.5's stand-in (seal/trainer/model.py), one for the
    session."""
    from seal.trainer.model import qwen35_stand_in_tokenizer

    return qwen35_stand_in_tokenizer()


# --- one launcher run, shared -------------------------------------------------------------

ONE_STEP_ABLATION = [
    "trainer.apatch.enable=false",
    "trainer.interface.schema_cues=false",
    "trainer.rollout.push_profile=false",
    "trainer.total_steps=1",
    "trainer.rollout.n=2",
    "trainer.rollout.seed=7",
    "trainer.limits.max_generations=1",
    "trainer.limits.max_new_tokens=4",
    "trainer.data.max_val_tasks=4",
    "trainer.validation.before_train=false",
]
"""A one-step local run of exp/cpu_default.yaml, an ablation (A-Patch, the schema cues and
the profile push off) smaller than cpu_default but with its data order (tasks, batch size,
seed): a resume with the default config differs in the ablation's keys alone."""


@pytest.fixture(scope="session")
def one_step_run(tmp_path_factory, worker_id):
    """The `ONE_STEP_ABLATION` run through the launcher (the tiny random Qwen2, its own
    environment service, a checkpoint at step 1), made once for the modules that read it
    (tests/seal/runs/): (run directory, the overrides given, what the launcher printed).
    Read-only: a test that resumes it works on a copy.

    Under pytest-xdist the processes share one run (a file lock in the session's common
    temporary folder): it is 15-30 s of CPU, which each process would otherwise repeat."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the folder every xdist process's basetemp is made in
    out = root / "one_step_run"
    overrides = [f"output_dir={out}", "name=b", *ONE_STEP_ABLATION]
    printed = out / "printed.txt"
    with FileLock(root / "one_step_run.lock"):
        if not printed.exists():
            sys.path.insert(0, str(REPO_ROOT))
            import launcher

            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                assert launcher.main(["--", *overrides]) == 0
            printed.write_text(text.getvalue())
    return out / "b", overrides, printed.read_text()


# --- runs started ahead of their tests --------------------------------------------------

EARLY_RUNS = pytest.StashKey["EarlyRuns"]()


def pytest_collection_finish(session):
    """Modules with a `start_early_run()` (the verl CPU smokes: minutes of launcher run)
    get it started as soon as their tests are selected, so the runs overlap the tests
    before those modules instead of adding their whole length to the suite; each
    module's fixture waits for its run. Not started when their tests are deselected
    (`-m 'not slow'`). The object `start_early_run()` returns has `wait()` (until its
    background work ends) and `stop()`."""
    if session.config.option.collectonly:
        return
    starters: dict[str, object] = {}
    for item in session.items:
        start = getattr(item.module, "start_early_run", None)
        if start is not None:
            starters.setdefault(item.module.__name__, start)
    if starters and os.environ.get("PYTEST_XDIST_WORKER"):
        # Each worker would start its own: two verl runs at once need more than 24 GiB.
        raise pytest.UsageError(
            f"{', '.join(starters)} start verl runs: run them without -n "
            "(-n 2 is for `-m 'not slow'`, docs/development.md)"
        )
    session.config.stash[EARLY_RUNS] = EarlyRuns(list(starters.items()))


def early_run(config, module_name: str):
    """The run `pytest_collection_finish` started for the module (waiting while the runs
    before it finish), or None."""
    runs = config.stash.get(EARLY_RUNS, None)
    return None if runs is None else runs.get(module_name)


def pytest_sessionfinish(session):
    runs = session.config.stash.get(EARLY_RUNS, None)
    if runs is not None:
        runs.stop()


def wait_for(condition, timeout_s: float = 10.0) -> None:
    """Return once `condition()` is true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
