"""BFCL multi-turn tasks: ids, categories, held-out tools and private configurations."""

import copy

import pytest

from seal.bfcl.multi_turn import UnknownTaskError, initial_config_copy
from seal.bfcl.tasks import CATEGORIES, category_of, load_task, task_ids


def test_two_hundred_tasks_per_category_in_bfcl_order():
    for category in CATEGORIES:
        ids = task_ids(category)
        assert len(ids) == 200
        assert ids[:3] == [f"{category}_0", f"{category}_1", f"{category}_2"]
        assert len(set(ids)) == 200
    assert len(task_ids()) == 800


@pytest.mark.parametrize(
    ("category", "low", "high"),
    [
        ("multi_turn_base", 1, 7),
        ("multi_turn_long_context", 1, 7),
        ("multi_turn_miss_func", 2, 8),
        ("multi_turn_miss_param", 2, 8),
    ],
)
def test_turn_counts_and_one_ground_truth_per_turn(category, low, high):
    tasks = [load_task(t) for t in task_ids(category)]
    assert min(t.num_turns for t in tasks) == low
    assert max(t.num_turns for t in tasks) == high
    assert all(len(t.ground_truth) == t.num_turns for t in tasks)
    assert all(t.category == category for t in tasks)
    assert all(t.long_context == (category == "multi_turn_long_context") for t in tasks)


def test_category_of():
    assert category_of("multi_turn_base_12") == "multi_turn_base"
    assert category_of("multi_turn_long_context_199") == "multi_turn_long_context"
    with pytest.raises(UnknownTaskError):
        category_of("simple_python_3")


@pytest.mark.parametrize(
    "task_id", ["multi_turn_base_200", "multi_turn_base_x", "multi_turn_base", "live_simple_0", ""]
)
def test_unknown_ids_raise_a_named_error(task_id):
    with pytest.raises(UnknownTaskError) as info:
        load_task(task_id)
    assert isinstance(info.value, KeyError)
    assert repr(task_id) in str(info.value)


def test_tasks_are_cached_and_frozen():
    task = load_task("multi_turn_base_0")
    assert load_task("multi_turn_base_0") is task
    with pytest.raises(AttributeError):
        task.category = "other"


def test_miss_func_holds_tools_out_until_their_turn():
    task = load_task("multi_turn_miss_func_0")
    assert list(task.held_out) == [3]
    assert [d["name"] for d in task.held_out[3]] == ["sort"]
    names = {d["name"] for d in task.tools}
    assert "sort" not in names
    assert task.questions[3] == []  # the holdout turn has no question
    for turn in range(3):
        assert "sort" not in {d["name"] for d in task.tools_until(turn)}
    assert {d["name"] for d in task.tools_until(3)} == names | {"sort"}
    assert task.tools_until(task.num_turns - 1) == task.tools_until(3)


def test_every_miss_func_task_holds_out_tools_and_others_do_not():
    for category in CATEGORIES:
        for task_id in task_ids(category):
            task = load_task(task_id)
            assert bool(task.held_out) == (category == "multi_turn_miss_func"), task_id
            for turn, docs in task.held_out.items():
                assert 0 < turn < task.num_turns
                assert task.questions[turn] == []
                assert not {d["name"] for d in docs} & {d["name"] for d in task.tools}


def test_initial_config_copy_is_private():
    task = load_task("multi_turn_base_1")
    before = copy.deepcopy(task.initial_config)
    config = initial_config_copy(task, "GorillaFileSystem")
    config["root"]["alex"]["contents"].clear()
    assert task.initial_config == before
    assert initial_config_copy(task, "NoSuchAPI") == {}
