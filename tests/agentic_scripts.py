"""Scripted policies and a service for the BFCL V4 agentic tests.

A memory scenario is played as bfcl-eval plays it: its prerequisite conversations in
order, then questions. The scripted policy writes down every user message of a
conversation (KV: one archival entry per turn, keyed `note_<conversation>_<turn>`, and
one core-memory entry in the first; recursive summary: each message appended), answers
"Noted." to end the turn, and answers a question after one memory read, with whatever
answer the test gives it. Calls are written in the Qwen2.5 format and parsed by it, as
a model's would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from pathlib import Path

import httpx
from conftest import serving

from env_service.app import create_app
from env_service.service_config import ServiceConfig
from seal.bfcl.agentic.tasks import AgenticTask, agentic_task_ids
from seal.bfcl.calls import ToolCall
from seal.bfcl.tasks import load_task
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout.env_client import EnvClient
from seal.rollout.scripted import run_scripted_episode
from seal.service_contract import EpisodeSettings

WEB_SEARCH_MISSING = [
    m for m in ("serpapi", "html2text", "bs4") if importlib.util.find_spec(m) is None
]
"""What bfcl-eval's web-search backend imports and this environment lacks (the ood extra)."""
FORMAT = get_format(PAPER_QWEN)
VALIDATE = EpisodeSettings(mode="validate")
CORE_KEY, CORE_VALUE = "user_profile", "the user of this notetaker scenario"


def call(name: str, **arguments) -> str:
    return FORMAT.call_text([ToolCall(name, arguments)])


def answer_text(answer: str) -> str:
    """A final answer in the format bfcl-eval's system message asks for."""
    return "{'answer': '" + answer + "', 'context': 'what my memory holds'}"


def note_key(position: int, turn: int) -> str:
    return f"note_{position}_{turn}"


def prereq_turns(task: AgenticTask) -> list[list[str]]:
    """One conversation: per turn, write the user's message down, then end the turn."""
    turns = []
    for turn, messages in enumerate(task.questions):
        text = messages[0]["content"]
        if task.backend == "rec_sum":
            write = call("memory_append", text=text + "\n")
        elif task.backend == "vector":
            write = call("archival_memory_add", text=text[:2000])
        else:
            write = call(
                "archival_memory_add", key=note_key(task.position, turn), value=text[:2000]
            )
        turns.append([write, "Noted."])
    if task.position == 0 and task.backend == "kv":
        turns[0].insert(0, call("core_memory_add", key=CORE_KEY, value=CORE_VALUE))
    return turns


def memory_read(task: AgenticTask) -> str:
    """One read of what the first conversation stored."""
    if task.backend == "rec_sum":
        return call("memory_retrieve")
    if task.backend == "vector":
        first = load_task(task.chain[0]).questions[0][0]["content"]
        return call("archival_memory_retrieve", query=first[:200], top_k=1)
    return call("archival_memory_retrieve", key=note_key(0, 0))


def notetaker(category: str, j: int = 0) -> str:
    """The j-th question of the notetaker scenario (the shortest chain: 5 conversations)."""
    return [t for t in agentic_task_ids(category) if "-notetaker-" in t][j]


async def play(
    url: str, task_id: str, turns: list[list[str]], settings: EpisodeSettings = VALIDATE
) -> dict:
    async with EnvClient(url) as env:
        return await run_scripted_episode(env, task_id, turns, settings)


def play_chain(url: str, question_id: str) -> list[dict]:
    """Every prerequisite conversation of the question's scenario, in order."""
    question = load_task(question_id)
    return [
        asyncio.run(play(url, prereq_id, prereq_turns(load_task(prereq_id))))
        for prereq_id in question.chain
    ]


def ask(url: str, question_id: str, answer: str) -> dict:
    question = load_task(question_id)
    return asyncio.run(play(url, question_id, [[memory_read(question), answer_text(answer)]]))


def walk_every_route(url: str, task_id: str, sparse: bool) -> object:
    """Create an episode of `task_id` on the native API, then ask every route of both
    protocols about it (status, the task's info, /get_info, /get_env_profile, a release
    protocol /step that answers, /evaluate with `sparse`, the native evaluation, the native
    close with `?evaluate=true`, which answers that evaluation; a second episode for the
    release protocol's /release); each must answer 200. Returns /evaluate's data. The
    release protocol's /create refuses agentic tasks with a 404 naming the native API."""
    http = httpx.Client(base_url=url, timeout=60)

    def created() -> dict:
        reply = http.post(
            "/v1/episodes", json={"task_id": task_id, "settings": {"mode": "validate"}}
        )
        assert reply.status_code == 201, reply.text
        return {"env_type": "bfcl", "instance_id": reply.json()["episode_id"]}

    iid = created()
    episode_id = iid["instance_id"]
    step = {**iid, "messages": {"role": "assistant", "content": "I do not know"}}
    replies = {
        "status": http.get(f"/v1/episodes/{episode_id}"),
        "task info": http.get(f"/v1/tasks/{task_id}"),
        "get_info": http.post("/get_info", json=iid),
        "get_env_profile": http.post(
            "/get_env_profile", json={**iid, "params": {"split": "train"}}
        ),
        "release protocol step": http.post("/step", json=step),
        "evaluate": http.post("/evaluate", json={**iid, "params": {"sparse": sparse}}),
        "native evaluation": http.get(f"/v1/episodes/{episode_id}/evaluation"),
        "native close": http.delete(f"/v1/episodes/{episode_id}", params={"evaluate": "true"}),
        "release": http.post("/release", json=created()),
    }
    statuses = {route: r.status_code for route, r in replies.items()}
    assert set(statuses.values()) == {200}, statuses
    assert replies["task info"].json()["task_id"] == task_id
    assert replies["get_env_profile"].json()["data"], "the train split lists no task"
    assert replies["native close"].json() == replies["native evaluation"].json()
    gone = http.get(f"/v1/episodes/{episode_id}")
    assert gone.status_code == 404 and episode_id in gone.text, gone.text
    refused = http.post("/create", json={"env_type": "bfcl", "task_id": task_id})
    assert refused.status_code == 404 and "native API" in refused.json()["error"]
    return replies["evaluate"].json()["data"]


@contextlib.contextmanager
def agentic_service(snapshot_dir: Path | None, workers: int = 1, **config):
    """The service with a memory snapshot folder, served on a free local port."""
    app = create_app(ServiceConfig(memory_snapshot_dir=snapshot_dir, workers=workers, **config))
    with serving(app) as url:
        yield url, app.state.engine
