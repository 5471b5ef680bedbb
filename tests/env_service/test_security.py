"""Model text never runs as code: not through tool names, argument keys or values.

Every attempt writes a marker file if it ever executes; the tests run in a temporary
working directory and check that no marker appears, that the model gets a clear error
(or, for values, that the value is stored literally as data), and that the episode's
backend state is what plain data would give.
"""

import json

import pytest
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
from bfcl_official import bfcl_globals_left
from conftest import gt_turns, results

from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import tool_call_text

TASK = "multi_turn_base_1"  # GorillaFileSystem, starting in /alex


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A working directory for relative markers; returns a function naming a marker."""
    monkeypatch.chdir(tmp_path)

    def marker(name):
        return tmp_path / name

    yield marker
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was ever created


def listing(svc, episode_id):
    [content] = results(svc.call(episode_id, "ls", {"a": True}))
    return json.loads(content)["current_directory_content"]


def filesystem(svc, episode_id):
    """The episode's file system; its backends are here only in a service without worker
    processes (`service(workers=0)`), which runs the same code in its own process."""
    return svc.engine.pool.episodes[episode_id].instances["GorillaFileSystem"]


@pytest.mark.parametrize(
    "name",
    [
        "__import__('os').system('touch pwned_name_1')",
        "ls; import os; os.system('touch pwned_name_2')",
        "ls()\n__import__('os').system('touch pwned_name_3')",
        "os.system",
        "_load_scenario",
        "__init__",
        "__class__",
        "eval",
        "exec",
    ],
)
@pytest.mark.parametrize("prompt", ["paper", "rich"])
def test_code_in_the_tool_name(service, sandbox, name, prompt):
    svc = service()
    episode_id, _ = svc.create(TASK, mode="validate", prompt=prompt)
    svc.call(episode_id, "mkdir", {"dir_name": "kept"})
    arguments = {"scenario": {"root": {}}} if name == "_load_scenario" else {}
    [message] = svc.call(episode_id, name, arguments)["messages"]
    if prompt == "paper":  # the release's refusal of the whole message
        refusal = f"Tool '{name}' is not available in the current tool list."
        assert message["content"] == "[ERROR] Invalid tool call format: " + refusal
    else:
        assert message["content"] == f"Error: unknown tool {name!r}"
    # `_load_scenario` would have wiped the file system: it is untouched.
    assert "kept" in listing(svc, episode_id)
    report = svc.evaluate(episode_id)
    assert report["invalid_calls"] == 1 and report["tool_calls"] == 2
    for k in (1, 2, 3):
        assert not sandbox(f"pwned_name_{k}").exists()


@pytest.mark.parametrize("prompt", ["paper", "rich"])
def test_code_in_argument_keys(service, sandbox, tmp_path, prompt):
    """The rich prompt refuses keys outside the signature; the paper's rules run the call
    for the backend's own error, as the release did, but as data: the key is never code."""
    svc = service(workers=0)
    episode_id, _ = svc.create(TASK, mode="validate", prompt=prompt)
    absolute = tmp_path / "pwned_key_abs"
    attempts = [
        {f"x=__import__('os').system('touch {absolute}')": 1},
        {"folder": "workspace", "x=__import__('os').system('touch pwned_key_1')": 1},
        {"folder='workspace'),__import__('os').system('touch pwned_key_2'),print(": 1},
        {"**{'folder': __import__('os').system('touch pwned_key_3')}": 1},
    ]
    for arguments in attempts:
        [content] = results(svc.call(episode_id, "cd", arguments))
        if prompt == "paper":
            assert content.startswith(
                "Error during execution: GorillaFileSystem.cd() got an unexpected keyword argument"
            )
        else:
            assert content.startswith("Error: cd got unexpected argument(s) [")
            assert "allowed: ['folder']" in content
    report = svc.evaluate(episode_id)
    assert report["invalid_by_kind"] == {"unexpected_argument": len(attempts)}
    assert report["tool_calls"] == (len(attempts) if prompt == "paper" else 0)
    assert filesystem(svc, episode_id)._current_dir.name == "alex"  # no cd ran
    assert not absolute.exists()


def test_code_in_values_is_stored_verbatim(service, sandbox, tmp_path):
    svc = service(workers=0)
    episode_id, _ = svc.create(TASK, mode="validate")
    file_name = "__import__('os').system('touch pwned_value_1')"
    dir_name = "'); __import__('os').system('touch pwned_value_2'); ('"
    content = f"\"); __import__('os').system('touch {tmp_path}/pwned_value_3') #"
    for name, arguments in [
        ("touch", {"file_name": file_name}),
        ("mkdir", {"dir_name": dir_name}),
        ("echo", {"content": content, "file_name": file_name}),
    ]:
        assert results(svc.call(episode_id, name, arguments)) == ["None"], name
    assert set(listing(svc, episode_id)) >= {file_name, dir_name}
    [cat] = results(svc.call(episode_id, "cat", {"file_name": file_name}))
    assert json.loads(cat) == {"file_content": content}
    contents = filesystem(svc, episode_id)._current_dir.contents
    assert contents[file_name].content == content
    assert contents[dir_name].contents == {}
    # Verification replays the same calls, again as data.
    report = svc.evaluate(episode_id)
    assert report["tool_calls"] == 5 and report["invalid_calls"] == 0
    for k in (1, 2, 3):
        assert not sandbox(f"pwned_value_{k}").exists()


def test_value_types_are_not_coerced_into_code(service, sandbox):
    svc = service(workers=0)
    episode_id, _ = svc.create(TASK, mode="validate")
    for value in [{"__class__": "x"}, ["__import__('os')"], 10**30, None, True]:
        [reply] = results(svc.call(episode_id, "cd", {"folder": value}))
        assert reply.startswith("Error during execution: '"), reply
        assert "object has no attribute 'rstrip'" in reply
    report = svc.evaluate(episode_id)
    assert (report["invalid_calls"], report["tool_calls"], report["tool_errors"]) == (0, 5, 5)
    assert filesystem(svc, episode_id)._current_dir.name == "alex"


def test_the_service_never_uses_the_eval_based_executor(service, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("bfcl-eval's executor (eval of call strings) was used")

    monkeypatch.setattr(multi_turn_utils, "execute_multi_turn_func_call", forbidden)
    monkeypatch.setattr(multi_turn_checker, "execute_multi_turn_func_call", forbidden)
    svc = service()
    for task_id in ["multi_turn_base_0", "multi_turn_miss_func_0"]:
        episode_id, _ = svc.create(task_id)
        svc.step(episode_id, tool_call_text([ToolCall("ls", {"a": True})]))
        replies = svc.play(episode_id, gt_turns(task_id))
        assert replies[-1]["reward"] == 1.0
        assert replies[-1]["evaluation"]["accuracy"] == 1
    assert bfcl_globals_left() == []
