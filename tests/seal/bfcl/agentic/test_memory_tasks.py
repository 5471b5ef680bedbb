"""BFCL V4 memory tasks end to end through the environment service, against a scripted
policy (tests/agentic_scripts.py): a scenario's prerequisite conversations fill the memory
in order, each saved as bfcl-eval saves it, and a question asked after them sees that
memory (in its system prompt and through its tools) and is scored by bfcl-eval's
`agentic_checker`: the ground-truth answer 1, a wrong one 0.

The notetaker scenario (5 conversations, 24 turns) keeps the tests short. The KV backend
needs rank_bm25 (the `ood` extra); the recursive-summary backend needs nothing more.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal

import httpx
import pytest
from agentic_scripts import (
    CORE_KEY,
    CORE_VALUE,
    VALIDATE,
    agentic_service,
    answer_text,
    ask,
    call,
    memory_read,
    notetaker,
    play,
    play_chain,
    prereq_turns,
    walk_every_route,
)
from conftest import Episodes, results, wait_for

from env_service.app import create_app
from env_service.errors import ServiceStartError
from env_service.service_config import ServiceConfig
from seal.bfcl.agentic.memory import MemorySnapshots
from seal.bfcl.agentic.tasks import ANSWER_NOT_FOUND, NO_FINAL_ANSWER, PASS
from seal.bfcl.tasks import load_task
from seal.rollout.env_client import EnvServiceError
from seal.service_contract import EpisodeLimits, EpisodeSettings

needs_bm25 = pytest.mark.skipif(
    importlib.util.find_spec("rank_bm25") is None,
    reason="the KV memory backend imports rank_bm25, in the ood extra: pip install -e '.[ood]'",
)
BACKENDS = [pytest.param("memory_kv", marks=needs_bm25), "memory_rec_sum"]


def play_prereq(url: str, prereq_id: str) -> dict:
    return asyncio.run(play(url, prereq_id, prereq_turns(load_task(prereq_id))))


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("category", BACKENDS)
def test_memory_question_scores_one_for_the_ground_truth_and_zero_for_a_wrong_answer(
    tmp_path, category, workers
):
    question_id = notetaker(category)
    question = load_task(question_id)
    with agentic_service(tmp_path, workers=workers) as (url, engine):
        chain = play_chain(url, question_id)
        right = ask(url, question_id, question.answers[0])
        wrong = ask(url, question_id, "I do not know")
        assert engine.stats()["live_episodes"] == 0

    # The conversations ran every turn, were not scored, and saved their memory.
    for report, prereq_id in zip(chain, question.chain, strict=True):
        assert (report["scored"], report["accuracy"], report["failure_tags"]) == (False, 0, [])
        assert report["terminated"] and not report["truncated"] and not report["aborted"]
        assert report["tool_errors"] == 0 and report["invalid_calls"] == 0
        assert report["turns_reached"] == load_task(prereq_id).num_turns
    snapshots = MemorySnapshots(tmp_path)
    assert snapshots.finished(question) == list(range(len(question.chain)))
    final = json.loads(snapshots.final(question).read_text())

    # bfcl-eval's checker on the final answer: the ground truth passes, a wrong one fails.
    assert (right["scored"], right["accuracy"], right["failure_tags"]) == (True, 1, [PASS])
    assert right["answer"] == answer_text(question.answers[0])
    assert (wrong["scored"], wrong["accuracy"], wrong["failure_tags"]) == (
        True,
        0,
        [ANSWER_NOT_FOUND],
    )

    # The question saw what the conversations stored: in its prompt and through its tools.
    system = right["input"][0]["content"]
    first_message = load_task(question.chain[0]).questions[0][0]["content"]
    memory_reply = right["output"][1]["content"]
    if category == "memory_kv":
        assert json.dumps({CORE_KEY: CORE_VALUE}, indent=4) in system
        assert final["core_memory"] == {CORE_KEY: CORE_VALUE}
        turns = sum(load_task(p).num_turns for p in question.chain)
        assert len(final["archival_memory"]) == turns
        assert json.dumps({"value": first_message}) in memory_reply
    else:
        assert first_message in system and first_message in final["memory"]
        assert json.dumps(first_message)[1:-1] in memory_reply
    assert "For your final answer to the user, you must respond in this format" in system


@pytest.mark.parametrize("category", BACKENDS)
def test_a_question_cut_off_before_its_answer_has_none_and_fails(tmp_path, category):
    question_id = notetaker(category)
    read = memory_read(load_task(question_id))
    settings = EpisodeSettings(mode="validate", limits=EpisodeLimits(max_generations=2))
    with agentic_service(tmp_path) as (url, _):
        play_chain(url, question_id)
        # Two generations, both tool calls: the service cuts the turn off there.
        report = asyncio.run(play(url, question_id, [[read, read, "x"]], settings))
    assert report["truncated"] and report["steps"] == 2
    outcome = (report["accuracy"], report["failure_tags"], report["answer"])
    assert outcome == (0, [NO_FINAL_ANSWER], None)


@pytest.mark.parametrize("category", BACKENDS)
def test_conversations_and_questions_out_of_order_are_refused_naming_what_to_run(
    tmp_path, category
):
    question_id = notetaker(category)
    question = load_task(question_id)
    first, second, last = question.chain[0], question.chain[1], question.chain[-1]
    with agentic_service(tmp_path) as (url, _):
        with pytest.raises(EnvServiceError, match=rf"HTTP 409.*{last}.*has not finished"):
            ask(url, question_id, "x")
        with pytest.raises(EnvServiceError, match=rf"HTTP 409.*{first}.*has not finished"):
            play_prereq(url, second)
        play_chain(url, question_id)
        assert ask(url, question_id, question.answers[0])["accuracy"] == 1
        with pytest.raises(EnvServiceError, match=rf"HTTP 409.*already past it.*from {first}"):
            play_prereq(url, second)

        # Playing the first conversation again starts the scenario's memory over: the
        # later checkpoints are stale, so a question waits for the chain to be replayed.
        play_prereq(url, first)
        assert MemorySnapshots(tmp_path).finished(question) == [0]
        with pytest.raises(EnvServiceError, match=rf"HTTP 409.*{last}.*has not finished"):
            ask(url, question_id, "x")
        play_chain(url, question_id)
        assert ask(url, question_id, question.answers[0])["accuracy"] == 1


def test_memory_tasks_are_refused_by_a_service_without_a_snapshot_folder():
    prereq_id = load_task(notetaker("memory_rec_sum")).chain[0]
    refused = pytest.raises(EnvServiceError, match=r"HTTP 409.*--memory-snapshot-dir")
    with agentic_service(None) as (url, _), refused:
        play_prereq(url, prereq_id)


def test_the_first_message_without_a_tool_call_is_the_answer_and_ends_the_question(tmp_path):
    question_id = notetaker("memory_rec_sum")
    question = load_task(question_id)
    with agentic_service(tmp_path) as (url, _):
        play_chain(url, question_id)
        turns = [[answer_text(question.answers[0]), call("memory_retrieve")]]
        report = asyncio.run(play(url, question_id, turns, VALIDATE))
    assert (report["steps"], report["tool_calls"], report["accuracy"]) == (1, 0, 1)


# --- issue #31: a rebuild reads its own version, every route answers, damaged files ----------


def _kill_workers(engine) -> None:
    pids = [w.process.pid for w in engine.pool.workers]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: engine.pool.replaced == len(pids))


def test_a_rebuilt_question_reads_the_memory_it_started_from(tmp_path):
    """Another client replays the scenario's first conversation (it saves a new memory)
    while a question is live, then the question's worker is killed: the rebuilt question
    reads the memory it started with, not the other client's."""
    question_id = notetaker("memory_rec_sum")
    question = load_task(question_id)
    with agentic_service(tmp_path, workers=1) as (url, engine):
        play_chain(url, question_id)
        episodes = Episodes(httpx.Client(base_url=url, timeout=60))
        episode_id, _ = episodes.create(question_id, mode="validate")
        before = results(episodes.call(episode_id, "memory_retrieve", {}))
        other = [[call("memory_append", text="Mallory wrote this\n"), "Noted."]]
        asyncio.run(play(url, question.chain[0], other))  # another client's replay
        _kill_workers(engine)
        after = results(episodes.call(episode_id, "memory_retrieve", {}))
    assert "Mallory" not in after[0]
    assert after == before


def test_every_route_of_both_protocols_answers_a_memory_episode(tmp_path):
    question_id = notetaker("memory_rec_sum")
    with agentic_service(tmp_path, workers=1) as (url, _):
        play_chain(url, question_id)
        for sparse in (False, True):
            data = walk_every_route(url, question_id, sparse)
            assert data == 0.0 if sparse else data["failure_tags"] == [ANSWER_NOT_FOUND]


def test_a_truncated_snapshot_is_a_409_naming_the_file(tmp_path):
    question_id = notetaker("memory_rec_sum")
    question = load_task(question_id)
    with agentic_service(tmp_path, workers=1) as (url, _):
        play_chain(url, question_id)
        final = MemorySnapshots(tmp_path).final(question)
        final.write_bytes(final.read_bytes()[:40])  # as a kill mid-write left it
        damaged = pytest.raises(EnvServiceError, match=rf"HTTP 409.*{final.name}")
        with damaged:
            ask(url, question_id, "x")
        play_chain(url, question_id)  # replaying the chain repairs it
        assert ask(url, question_id, question.answers[0])["accuracy"] == 1


def test_a_save_cut_short_leaves_the_previous_snapshot_whole(tmp_path, monkeypatch):
    """bfcl-eval writes its snapshot files in place; the service's are written whole or
    not at all: a disk that fills mid-save leaves the previous memory readable."""
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code import memory_rec_sum

    question_id = notetaker("memory_rec_sum")
    question = load_task(question_id)
    first, second = question.chain[0], question.chain[1]
    with agentic_service(tmp_path, workers=0) as (url, _):
        play_prereq(url, first)
        final = MemorySnapshots(tmp_path).final(question)
        saved = final.read_bytes()

        class DiskFull:
            @staticmethod
            def dump(obj, f, **kwargs):
                f.write(json.dumps(obj, **kwargs)[:20])
                raise OSError(28, "No space left on device")

        monkeypatch.setattr(memory_rec_sum, "json", DiskFull)
        with pytest.raises(EnvServiceError, match="No space left on device"):
            play_prereq(url, second)
        monkeypatch.undo()
        assert final.read_bytes() == saved
        assert MemorySnapshots(tmp_path).finished(question) == [0]
        play_prereq(url, second)  # and the conversation can be played again


def test_a_snapshot_folder_that_is_a_file_fails_at_start(tmp_path, service_process):
    not_a_folder = tmp_path / "snapshots"
    not_a_folder.write_text("")
    with pytest.raises(ServiceStartError, match="--memory-snapshot-dir"):
        create_app(ServiceConfig(memory_snapshot_dir=not_a_folder))
    with pytest.raises(AssertionError, match="exited"):
        service_process("--memory-snapshot-dir", str(not_a_folder))


def test_a_silent_conversation_holds_its_scenario_for_minutes_and_names_itself(tmp_path):
    """A prerequisite conversation locks its scenario (its memory is not saved yet), on a
    lease each step renews: one never stepped (a crashed evaluator) is dropped after the
    lease, not after the hour-long episode TTL, and the 409 meanwhile names it."""
    question = load_task(notetaker("memory_rec_sum"))
    first = question.chain[0]
    with agentic_service(tmp_path, workers=1) as (url, engine):
        episodes = Episodes(httpx.Client(base_url=url, timeout=60))
        holder, _ = episodes.create(first, "crashed-evaluator", mode="validate")
        blocked = pytest.raises(EnvServiceError, match=r"HTTP 409.*crashed-evaluator")
        with blocked:
            play_prereq(url, first)
        lease = engine.config.memory_lease_s
        assert lease <= 600 < engine.config.episode_ttl_s
        engine.episodes[holder].last_step -= lease / 2
        episodes.call(holder, "memory_retrieve", {})  # a step renews the lease
        with blocked:
            play_prereq(url, first)
        engine.episodes[holder].last_step -= lease + 1  # silent for longer than the lease
        assert play_prereq(url, first)["terminated"]
        assert httpx.get(f"{url}/v1/episodes/{holder}").status_code == 404
