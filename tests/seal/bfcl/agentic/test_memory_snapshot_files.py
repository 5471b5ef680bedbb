"""What the service does with the snapshot files a memory episode would start from (issue
#41): whatever their content, a create is a 409 naming the file (never a 500), nothing is
read from a file that is not a regular one, the reads leave the event loop free, and a
scenario's lease is renewed by steps only.

The files are planted as a finished chain leaves them (the scenario's final snapshot and
its last conversation's checkpoint, the same text), so no conversation is played.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import httpx
import pytest
from agentic_scripts import agentic_service, notetaker, play, prereq_turns
from conftest import Episodes, results

from seal.bfcl.agentic.memory import MemorySnapshots
from seal.bfcl.tasks import load_task

REC_SUM = notetaker("memory_rec_sum")
MEMORY = "the user keeps notes on tea from Fujian\n"


def _plant(root, question_id: str, text: str, checkpoint_text: str | None = None) -> tuple:
    """The files a finished chain leaves for `question_id`: (final, checkpoint)."""
    question = load_task(question_id)
    snapshots = MemorySnapshots(root)
    final, checkpoint = (
        snapshots.final(question),
        snapshots.checkpoint(question, question.chain[-1]),
    )
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    final.write_text(text, encoding="utf-8")
    checkpoint.write_text(text if checkpoint_text is None else checkpoint_text, encoding="utf-8")
    return final, checkpoint


def _create(http: httpx.Client, task_id: str) -> httpx.Response:
    return http.post("/v1/episodes", json={"task_id": task_id, "settings": {"mode": "validate"}})


def _assert_refused_naming(reply: httpx.Response, path) -> None:
    assert reply.status_code == 409, (reply.status_code, reply.text[:500])
    assert str(path) in reply.json()["detail"], reply.text[:500]


DEEP = 100_000


@pytest.mark.parametrize(
    "content",
    [
        pytest.param('{"memory": ' + "[" * DEEP + "]" * DEEP + "}", id="deeply-nested"),
        pytest.param(json.dumps({"notes": MEMORY}), id="without-its-memory-field"),
        pytest.param(json.dumps({"memory": ["not", "text"]}), id="memory-not-text"),
        pytest.param(json.dumps([MEMORY]), id="not-an-object"),
        pytest.param(json.dumps({}), id="empty-object"),
    ],
)
def test_a_final_snapshot_bfcl_eval_could_not_load_is_a_409_naming_it(tmp_path, content):
    final, _ = _plant(tmp_path, REC_SUM, content)
    with agentic_service(tmp_path, workers=1) as (url, engine):
        http = httpx.Client(base_url=url, timeout=60)
        _assert_refused_naming(_create(http, REC_SUM), final)
        assert engine.stats()["live_episodes"] == 0


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("rank_bm25") is None,
    reason="the KV memory backend imports rank_bm25 (the ood extra)",
)
def test_a_kv_snapshot_without_core_memory_is_a_409_naming_it(tmp_path):
    question_id = notetaker("memory_kv")
    final, _ = _plant(tmp_path, question_id, json.dumps({"archival_memory": {"a": "b"}}))
    with agentic_service(tmp_path, workers=1) as (url, _):
        _assert_refused_naming(_create(httpx.Client(base_url=url, timeout=60), question_id), final)


def test_a_snapshot_larger_than_any_bfcl_eval_writes_is_a_409_naming_it(tmp_path):
    """bfcl-eval's backends cap what a conversation may store (rec_sum: 10,000
    characters); a 16 MiB snapshot is refused, not read into the loop and a worker."""
    final, _ = _plant(tmp_path, REC_SUM, json.dumps({"memory": "x" * (16 * 2**20)}))
    with agentic_service(tmp_path, workers=1) as (url, _):
        _assert_refused_naming(_create(httpx.Client(base_url=url, timeout=60), REC_SUM), final)


def test_a_damaged_copy_in_the_versions_folder_is_rebuilt_from_the_checked_snapshot(tmp_path):
    """The copy under `versions/<hash>/` is the service's own, named by its content: one
    damaged since (a truncated write, an edit) is written again from the final snapshot,
    which was just checked against its checkpoint, and the episode sees that memory."""
    _plant(tmp_path, REC_SUM, json.dumps({"memory": MEMORY}))
    with agentic_service(tmp_path, workers=1) as (url, _):
        http = httpx.Client(base_url=url, timeout=60)
        assert _create(http, REC_SUM).status_code == 201
        (kept,) = (tmp_path / "versions").rglob("*_final.json")
        kept.write_text('{"memory": ', encoding="utf-8")  # cut short
        episodes = Episodes(http)
        episode_id, _ = episodes.create(REC_SUM, mode="validate")
        assert MEMORY.strip() in results(episodes.call(episode_id, "memory_retrieve", {}))[0]
        assert json.loads(kept.read_text(encoding="utf-8")) == {"memory": MEMORY}


@pytest.mark.parametrize("which", ["final", "checkpoint"])
def test_a_fifo_in_a_snapshots_place_is_a_409_and_is_never_opened_for_reading(
    tmp_path, service_process, which
):
    """A FIFO blocked the event loop in its open (for good once written to: the final
    snapshot was read twice). It is refused by its type, without a read."""
    final, checkpoint = _plant(tmp_path, REC_SUM, json.dumps({"memory": MEMORY}))
    fifo = final if which == "final" else checkpoint
    fifo.unlink()
    os.mkfifo(fifo)
    svc = service_process("--memory-snapshot-dir", str(tmp_path), "--workers", "1")
    http = httpx.Client(base_url=svc.url, timeout=20)
    _assert_refused_naming(_create(http, REC_SUM), fifo)
    assert http.get("/healthz").status_code == 200


def test_snapshot_reads_leave_the_event_loop_free(tmp_path, monkeypatch):
    """While a create reads its snapshot (held here until the test lets it go), another
    client's request is answered."""
    _plant(tmp_path, REC_SUM, json.dumps({"memory": MEMORY}))
    reading, go_on = threading.Event(), threading.Event()
    start = MemorySnapshots.start

    def held_start(self, task):
        reading.set()
        go_on.wait(30)
        return start(self, task)

    monkeypatch.setattr(MemorySnapshots, "start", held_start)
    with agentic_service(tmp_path, workers=1) as (url, _):
        http = httpx.Client(base_url=url, timeout=60)
        created: list[int] = []
        creator = threading.Thread(
            target=lambda: created.append(_create(http, REC_SUM).status_code)
        )
        creator.start()
        try:
            assert reading.wait(30), "the create never read its snapshot"
            try:
                answered = httpx.get(f"{url}/healthz", timeout=15).status_code
            except httpx.TimeoutException:
                answered = None
            assert not go_on.is_set()  # (the create was still reading)
        finally:
            go_on.set()
            creator.join(60)
        assert answered == 200, "the event loop was held by a snapshot read"
        assert created == [201]


def test_polling_a_conversation_does_not_renew_its_scenarios_lease(tmp_path):
    """The lease is renewed by a conversation's steps (docs/design.md): a client that only
    asks for its status (a dashboard, a crashed evaluator's watchdog) does not hold the
    scenario past the lease."""
    question = load_task(REC_SUM)
    first = question.chain[0]
    lease = 0.5
    with agentic_service(tmp_path, workers=1, memory_lease_s=lease) as (url, _):
        http = httpx.Client(base_url=url, timeout=60)
        holder, _ = Episodes(http).create(first, "polled", mode="validate")
        created, polls = time.monotonic(), 0
        while time.monotonic() - created < 3 * lease or polls < 5:
            assert http.get(f"/v1/episodes/{holder}").status_code == 200
            polls += 1
            time.sleep(lease / 10)
        replay = asyncio.run(play(url, first, prereq_turns(load_task(first))))
        assert replay["terminated"]
        assert http.get(f"/v1/episodes/{holder}").status_code == 404
