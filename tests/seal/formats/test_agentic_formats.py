"""BFCL V4 agentic prompts in the bfcl-eval handler formats equal those bfcl-eval's own
inference loop builds (`inference_multi_turn_prompting`, its executor loading the same
memory snapshot), as tests/seal/formats/test_formats.py checks for the multi-turn tasks: the
leaderboard's prompt (which keeps the task's own system message) and the training
formats (whose system message is then the task's). A memory question after its scenario's
conversations (the prompt shows the saved memory), a conversation, and a web-search
question (its first prompt: no search is made).
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil

import pytest
from agentic_scripts import agentic_service, notetaker, play_chain
from bfcl_eval.utils import (
    load_dataset_entry,
    populate_initial_settings_for_memory_test_cases,
    populate_initial_settings_for_web_search_test_cases,
)
from bfcl_inference import bfcl_inference_prompts

from env_service import api_native
from env_service.engine import EnvEngine, ServiceConfig
from seal.bfcl.calls import ToolCall
from seal.bfcl.tasks import load_task
from seal.formats.handler_format import leaderboard
from seal.formats.registry import FORMATS, get_format
from seal.rollout.env_client import call_body
from seal.service_contract import CreateEpisode, EpisodeSettings, StepRequest

VALIDATE = EpisodeSettings(mode="validate")
HANDLER_FORMATS = [n for n in FORMATS if hasattr(get_format(n), "REGISTRY_NAME")]


def bfcl_prompts(fmt, task_id: str, texts: list[str], snapshots) -> list[str]:
    """The prompts bfcl-eval's own inference builds for the task, its model answering
    `texts`, its memory backend reading `snapshots` (its result folder)."""
    category = load_task(task_id).category.removesuffix("_prereq")
    entry = next(e for e in load_dataset_entry(category) if e["id"] == task_id)
    entry = copy.deepcopy(entry)
    populate_initial_settings_for_memory_test_cases([entry], snapshots)
    populate_initial_settings_for_web_search_test_cases([entry])
    return bfcl_inference_prompts(fmt, entry, texts)


async def our_prompts(engine, fmt, task_id: str, texts: list[str]) -> list[str]:
    """Full re-renders of the conversation, as the endpoint evaluator builds them."""
    created = await api_native.create(engine, CreateEpisode(task_id=task_id, settings=VALIDATE))
    conversation, prompts = fmt.start(created.model_dump()), []
    for seq, text in enumerate(texts, start=1):
        prompts.append(fmt.render(conversation))
        calls = [call_body(c) for c in fmt.parse(text)]
        body = StepRequest(content=text, tool_calls=calls, seq=seq)
        result = await api_native.step(engine, created.episode_id, body)
        observation = [m.model_dump() for m in result.messages]
        conversation.messages += [fmt.assistant_message(text), *fmt.observation(observation)]
        if result.terminated:
            break
    return prompts


@pytest.fixture(scope="module")
def chain_played(tmp_path_factory):
    """A snapshot folder holding the notetaker scenario's saved chain (recursive summary)."""
    root = tmp_path_factory.mktemp("snapshots")
    with agentic_service(root, workers=0) as (url, _):
        play_chain(url, notetaker("memory_rec_sum"))
    return root


@pytest.mark.parametrize("leaderboard_prompt", [True, False])
@pytest.mark.parametrize("name", HANDLER_FORMATS)
def test_agentic_prompts_equal_bfcl_eval_s_own_inference(
    chain_played, tmp_path, monkeypatch, name, leaderboard_prompt
):
    monkeypatch.setenv("SERPAPI_API_KEY", "unused")  # the web-search prompt makes no search
    training = get_format(name)
    fmt = leaderboard(training.REGISTRY_NAME) if leaderboard_prompt else training
    ours_root = tmp_path / "ours"
    shutil.copytree(chain_played, ours_root)
    config = ServiceConfig(memory_snapshot_dir=ours_root, workers=0, max_step_seconds=600)
    engine = EnvEngine(config)
    question = notetaker("memory_rec_sum")
    prereq = load_task(question).chain[0]
    answer = "{'answer': 'x', 'context': 'y'}"
    cases = {
        # A memory read, then the answer: the second prompt carries the tool's result.
        question: [training.call_text([_retrieve()]), answer],
        # The first conversation: one reply per turn.
        prereq: ["Noted."] * load_task(prereq).num_turns,
        "web_search_base_0": [answer],
    }
    for task_id, texts in cases.items():
        theirs_root = tmp_path / f"theirs_{task_id}"
        shutil.copytree(chain_played, theirs_root)
        ours = asyncio.run(our_prompts(engine, fmt, task_id, texts))
        assert ours == bfcl_prompts(fmt, task_id, texts, theirs_root), task_id
        assert len(ours) == len(texts)
    # The question's prompts showed a real memory: the scenario's first message was saved.
    final = chain_played / "agentic/memory/rec_sum/memory_snapshot/notetaker_final.json"
    first = load_task(prereq).questions[0][0]["content"]
    assert first in json.loads(final.read_text())["memory"]


def _retrieve() -> ToolCall:
    return ToolCall("memory_retrieve", {})
