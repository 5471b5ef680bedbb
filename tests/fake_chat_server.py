"""A scripted OpenAI-compatible endpoint for the endpoint evaluator's tests.

`FakeChatServer` answers each request from a per-task script (the n-th assistant message
of a conversation gets the script's n-th text, "Done." past its end; an entry (text,
"length") is a reply cut at max_tokens) and can be told to fail a task's next requests
with given HTTP statuses. Tasks are told apart by their first question; a request of
neither task is the preflight's. It lists its model at /models and may require an API
key. `served_fake_chat_server()` serves it (aiohttp, its own thread and loop);
`evaluate(...)` scores tasks against it with the evaluator.
"""

import asyncio
import contextlib
import json
from collections import Counter

from aiohttp import web
from conftest import serving_aiohttp, shipped_tokenizer

from seal.bfcl.ground_truth import END_OF_TURN_TEXT
from seal.bfcl.tasks import load_task
from seal.eval.chat_endpoint import EndpointSettings
from seal.eval.endpoint_episode import Prompting
from seal.eval.evaluator import evaluate_endpoint
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER, turn_tokenizer

# One eval task per category, with distinct first questions.
TASKS = [
    "multi_turn_base_4",
    "multi_turn_miss_func_9",
    "multi_turn_miss_param_21",
    "multi_turn_long_context_29",
]
LONG_TASK = "multi_turn_long_context_0"  # its first tool result is several hundred tokens
MODEL = "fake-model"
FAST_RETRIES = {"attempts": 3, "backoff_s": 0.001}
TOKENIZER = shipped_tokenizer()
TOKENS = turn_tokenizer(TOKENIZER, get_format(PAPER_QWEN))
LLAMA_TOKENIZER = shipped_tokenizer(llama_tokens=True)  # for the Llama-layout formats


def tokenizer_for(prompting: Prompting | None):
    uses_llama = prompting is not None and prompting.tool_format.end_of_turn == "<|eot_id|>"
    return LLAMA_TOKENIZER if uses_llama else TOKENIZER


def first_question(task_id: str) -> str:
    return load_task(task_id).questions[0][0]["content"]


class FakeChatServer:
    """The scripted endpoint; `requests` lists (task id, request body) in arrival order."""

    def __init__(self):
        known = [*TASKS, LONG_TASK]
        self.task_of = {first_question(task_id): task_id for task_id in known}
        assert len(self.task_of) == len(known), "test tasks must differ in their first question"
        self.scripts: dict[str, list[str | tuple[str, str]]] = {}
        self.failures: dict[str, list[tuple[int, dict]]] = {}
        self.requests: list[tuple[str, dict]] = []
        self.preflights: list[dict] = []
        self.models: list[dict] | None = [{"id": MODEL, "object": "model"}]
        """The /models listing; None: the route answers 404."""
        self.api_key: str | None = None
        """When set, requests without it as a Bearer token get a 401."""
        self.hits: Counter[str] = Counter()
        """Requests per path, whatever their answer (a retry shows as a second)."""

    def refuse_key(self, request: web.Request) -> web.Response | None:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"error": "invalid api key"}, status=401)
        return None

    async def list_models(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        if self.models is None:
            return web.json_response({"detail": "Not Found"}, status=404)
        return self.refuse_key(request) or web.json_response({"data": self.models})

    def fail_next(self, task_id: str, status: int, times: int = 1, body: dict | None = None):
        self.failures.setdefault(task_id, []).extend([(status, body or {"error": "boom"})] * times)

    def requests_of(self, task_id: str) -> list[dict]:
        return [body for task, body in self.requests if task == task_id]

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        body = await request.json()
        if refusal := self.refuse_key(request):
            return refusal
        if body["model"] != MODEL:
            return web.json_response({"error": f"model {body['model']} not found"}, status=404)
        messages = body["messages"]
        task_id = self.task_of.get(messages[1]["content"]) if len(messages) > 1 else None
        if task_id is None:
            self.preflights.append(body)
            return reply("OK", "length")
        self.requests.append((task_id, body))
        if self.failures.get(task_id):
            status, payload = self.failures[task_id].pop(0)
            return web.json_response(payload, status=status)
        script = self.scripts.get(task_id, [])
        turn = sum(message["role"] == "assistant" for message in messages)
        entry = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        return reply(*((entry, "stop") if isinstance(entry, str) else entry))

    async def handle_completion(self, request: web.Request) -> web.Response:
        """The completions API: the prompt is a whole rendered conversation; the n-th
        request of a task gets its script's n-th text."""
        self.hits[request.path] += 1
        body = await request.json()
        if refusal := self.refuse_key(request):
            return refusal
        found = [t for question, t in self.task_of.items() if question in body["prompt"]]
        if not found:
            self.preflights.append(body)
            return reply("OK", "length", completion=True)
        task_id = found[0]
        self.requests.append((task_id, body))
        if self.failures.get(task_id):
            status, payload = self.failures[task_id].pop(0)
            return web.json_response(payload, status=status)
        script = self.scripts.get(task_id, [])
        turn = len(self.requests_of(task_id)) - 1
        entry = script[turn] if turn < len(script) else END_OF_TURN_TEXT
        text, finish_reason = (entry, "stop") if isinstance(entry, str) else entry
        return reply(text, finish_reason, completion=True)


def reply(text: str, finish_reason: str, completion: bool = False) -> web.Response:
    """A chat reply, or with `completion` a completions-API reply."""
    if completion:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason}
        # Token counts as a real server sends them (bfcl-eval's handlers read them).
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        return web.json_response({"choices": [choice], "usage": usage})
    else:
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": finish_reason}
    return web.json_response({"choices": [choice]})


@contextlib.contextmanager
def served_fake_chat_server():
    """(server, base_url): the fake endpoint served by aiohttp in its own thread and loop."""
    server = FakeChatServer()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    app.router.add_get("/v1/models", server.list_models)
    app.router.add_post("/v1/completions", server.handle_completion)
    with serving_aiohttp(app) as url:
        yield server, f"{url}/v1"


def evaluate(
    base_url, env_url, out_dir, task_ids=TASKS, model=MODEL, api_key=None, limits=None, **options
):
    settings = EndpointSettings(base_url=base_url, model=model, api_key=api_key, **FAST_RETRIES)
    return asyncio.run(
        evaluate_endpoint(
            settings,
            list(task_ids),
            out_dir,
            env_url=env_url,
            tokenizer=tokenizer_for(options.get("prompting")),
            limits=limits,
            show_progress=False,
            **options,
        )
    )


def seal_eval_args(base_url: str, env_url: str, tmp_path, out_dir) -> list[str]:
    """`seal-eval`'s arguments for TASKS against the fake endpoint (the split written in
    `tmp_path`), the shipped tokenizer and `out_dir`, without progress bars."""
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"eval": TASKS, "train": []}))
    args = ["--base-url", base_url, "--model", MODEL, "--split-file", str(split), "--quiet"]
    args += ["--env-url", env_url, "--out-dir", str(out_dir)]
    return [*args, "--tokenizer", str(SHIPPED_TOKENIZER)]
