"""`seal-eval-bfcl`, bfcl-eval's own multi-turn harness (seal/eval/bfcl_harness.py), against
the scripted endpoint (tests/fake_chat_server.py): its table, its agreement with `seal-eval`
on the same scripted replies where the two paths' rules are the same (the same handler's
prompt and decoder: `seal-eval --leaderboard-format`), the rule where they differ (bfcl's
step counter restarts at every user turn), its per-task check against bfcl-eval's own
runner, the calls it keeps from Python's eval, and its fast start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bfcl_official import bfcl_entry_evaluator
from conftest import gt_texts, gt_turns, shipped_tokenizer
from fake_chat_server import MODEL, TASKS, served_fake_chat_server
from transformers import Qwen2Config

from seal.bfcl.calls import ToolCall
from seal.bfcl.ground_truth import END_OF_TURN_TEXT
from seal.bfcl.official_executor import backend_methods, fresh_backends, unsafe_call
from seal.eval import bfcl_harness as H
from seal.eval import harness_cli
from seal.eval import score_endpoint as seal_eval
from seal.formats.registry import get_format
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER
from seal.runs.records import read_val_dir

BFCL_MODEL = "Qwen/Qwen3-4B-Instruct-2507-FC"
"""bfcl-eval's Qwen function-calling handler; `qwen3` writes its calls."""
FORMAT = get_format("qwen3")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """The shipped tokenizer with a Qwen2 config: what bfcl's handler reads of a model."""
    path = tmp_path_factory.mktemp("tokenizer")
    shipped_tokenizer().save_pretrained(path)
    Qwen2Config().save_pretrained(path)
    return path


def split_file(tmp_path: Path, tasks=TASKS) -> Path:
    path = tmp_path / "split.json"
    path.write_text(json.dumps({"eval": list(tasks), "train": []}))
    return path


def harness(scripts, tmp_path, tokenizer_dir, tasks=TASKS, extra=()) -> tuple[dict, dict]:
    """Run seal-eval-bfcl on `tasks` with `scripts` served: ({task id: record}, {task id:
    the prompts it sent})."""
    out = tmp_path / "harness"
    with served_fake_chat_server() as (server, url):
        server.scripts = scripts
        args = ["--base-url", url, "--model", MODEL, "--tokenizer-dir", str(tokenizer_dir)]
        args += ["--bfcl-model", BFCL_MODEL, "--split-file", str(split_file(tmp_path, tasks))]
        assert harness_cli.main([*args, "--out-dir", str(out), "--quiet", *extra]) == 0
        prompts = {t: [b["prompt"] for b in server.requests_of(t)] for t in tasks}
    return {r.task_id: r for r in read_val_dir(out / "validation")[0]}, prompts


def seal_eval_run(scripts, tmp_path, env_url, tasks=TASKS) -> tuple[dict, dict]:
    """seal-eval with bfcl-eval's prompt and decoder for BFCL_MODEL: (records, prompts) as
    `harness`'s."""
    out = tmp_path / "seal_eval"
    with served_fake_chat_server() as (server, url):
        server.scripts = scripts
        args = ["--base-url", url, "--model", MODEL, "--leaderboard-format", BFCL_MODEL]
        args += ["--split-file", str(split_file(tmp_path, tasks)), "--env-url", env_url]
        args += ["--out-dir", str(out), "--tokenizer", str(SHIPPED_TOKENIZER), "--quiet"]
        assert seal_eval.main(args) == 0
        prompts = {t: [b["prompt"] for b in server.requests_of(t)] for t in tasks}
    return {r.task_id: r for r in read_val_dir(out / "validation")[0]}, prompts


def test_the_harness_writes_seal_eval_s_table(tmp_path, tokenizer_dir, capsys):
    records, _ = harness({t: gt_texts(t, FORMAT) for t in TASKS}, tmp_path, tokenizer_dir)
    printed = capsys.readouterr().out
    [row] = [line for line in printed.splitlines() if line.startswith("| 0 ")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # step, the paper's average, the four categories, overall, the best step's star
    assert cells == ["0", "100.00", *["100.00 (1/1)"] * 4, "100.00 (4/4)", "*"]
    assert f"handler {BFCL_MODEL}, temperature 0.001" in printed
    assert sorted(records) == sorted(TASKS)
    for task_id, record in records.items():
        assert record.score == 1 and record.extra["harness"] == H.HARNESS
        assert record.turns == len(gt_texts(task_id, FORMAT))  # one generation per reply
        assert record.input.startswith("<|im_start|>system\n# Tools")
    assert not (tmp_path / "harness" / "bfcl_harness_partial.jsonl").exists()
    assert "Empty response from the model" in (tmp_path / "harness/bfcl_harness.log").read_text()


def scripts_of_every_kind() -> dict[str, list[str]]:
    """Per task: the ground truth; the ground truth with its first call dropped; a reply
    with no call; an unknown tool first, then the ground truth."""
    base, miss_func, miss_param, long_context = TASKS
    dropped = gt_turns(miss_param, FORMAT)
    dropped[0] = dropped[0][1:]
    unknown = FORMAT.call_text([ToolCall("no_such_tool", {"x": 1})])
    return {
        base: gt_texts(base, FORMAT),
        miss_param: [text for turn in dropped for text in turn],
        miss_func: ["I will not call any tool."],
        long_context: [unknown, *gt_texts(long_context, FORMAT)],
    }


def test_both_paths_give_the_same_verdicts_where_their_rules_agree(
    tmp_path, tokenizer_dir, live_service
):
    """The same scripted replies, decoded by the same handler: seal-eval's episode loop and
    checker (through the service) and bfcl-eval's give the same verdict on every task,
    passes and failures, from the same first prompt."""
    scripts = scripts_of_every_kind()
    ours, our_prompts = seal_eval_run(scripts, tmp_path, live_service[0])
    theirs, their_prompts = harness(scripts, tmp_path, tokenizer_dir)
    verdicts = {t: (ours[t].score, theirs[t].score) for t in TASKS}
    assert verdicts == {
        "multi_turn_base_4": (1, 1),
        "multi_turn_miss_func_9": (0, 0),
        "multi_turn_miss_param_21": (0, 0),
        "multi_turn_long_context_29": (1, 1),
    }
    for t in TASKS:
        assert our_prompts[t][0] == their_prompts[t][0], t


def test_bfcl_s_step_counter_restarts_at_every_user_turn(tmp_path, tokenizer_dir, live_service):
    """Nine harmless calls before each turn's answer: 11 replies a turn, 33 in all. bfcl
    counts steps per turn (at most 21 with calls) and passes the task; seal-eval counts
    generations per episode (20, the paper's training limit) and cuts it in turn 2."""
    task = TASKS[0]  # 3 turns of one call each
    padding = FORMAT.call_text([ToolCall("pwd", {})])
    texts = [text for turn in gt_turns(task, FORMAT) for text in [padding] * 9 + turn]
    ours = seal_eval_run({task: texts}, tmp_path, live_service[0], [task])[0][task]
    theirs = harness({task: texts}, tmp_path, tokenizer_dir, [task])[0][task]
    assert (theirs.score, theirs.turns) == (1, 33)
    assert (ours.score, ours.turns, ours.extra["stop_reason"]) == (0, 20, "max_generations")


def test_calls_python_would_run_are_refused_not_evaluated(tmp_path, tokenizer_dir):
    """bfcl's executor evals the call string its decoder builds: a builtin as the tool
    name, or an argument key carrying code, would run. The harness refuses them as
    replies it cannot decode (the turn ends), and counts them."""
    marker = tmp_path / "ran"
    task = TASKS[0]
    builtin = (
        '<tool_call>\n{"name": "open", "arguments": {"file": "%s", "mode": "w"}}\n</tool_call>'
    )
    injected = (
        '<tool_call>\n{"name": "ls", "arguments": {"a=True,b=__import__(\'pathlib\').Path('
        f"'{marker}').touch()#\": 1}}}}\n</tool_call>"
    )
    scripts = {task: [builtin % marker, injected, *gt_texts(task, FORMAT)]}
    record = harness(scripts, tmp_path, tokenizer_dir, [task])[0][task]
    assert not marker.exists()
    assert len(record.extra["refused_calls"]) == 2
    assert record.extra["refused_calls"][0] == f"open(file='{marker}',mode='w')"
    assert unsafe_call("cd(folder='x')", frozenset({"cd"})) is None
    assert unsafe_call("no_such_tool(x=1)", frozenset({"cd"})) is None  # bfcl: NameError
    assert "eval would run" in unsafe_call("exec(source='1')", frozenset({"cd"}))


def test_the_per_task_check_is_bfcl_eval_s_runner(tmp_path, tokenizer_dir):
    """`check_entry` against bfcl-eval's own `_evaluate_single_multi_turn_entry` on results
    of every kind: passing, failing, forced to quit (fewer turns), an inference error (no
    list), replies that do not decode, and an empty reply."""
    official = bfcl_entry_evaluator()
    endpoint = H.Endpoint("http://127.0.0.1:1/v1", MODEL, tokenizer_dir)
    handler = H.served_handler(BFCL_MODEL, endpoint, H.RELEASE_TEMPERATURE)
    entries = H.load_entries(TASKS)
    cases = 0
    for task_id, (entry, ground_truth) in entries.items():
        handler.methods = backend_methods(entry["involved_classes"])
        turns = gt_turns(task_id, FORMAT)
        results = [
            turns,
            [turn[1:] for turn in turns],
            turns[:-1],
            "Error during inference: boom",
            [["not json <tool_call>{</tool_call>", *turn] for turn in turns],
            [[END_OF_TURN_TEXT] for _ in turns],
        ]
        for result in results:
            with fresh_backends([H.CHECK, "official"], entry["involved_classes"]):
                ours = H.check_entry(handler, result, ground_truth, dict(entry))
                theirs = official(
                    handler, task_id, result, ground_truth, dict(entry), "official",
                    task_id.rsplit("_", 1)[0],
                )  # fmt: skip
            expected = theirs.get("error", {}).get("error_type") if not theirs["valid"] else None
            assert ours == (theirs["valid"], expected), (task_id, result)
            cases += 1
    assert cases == 24


def test_help_starts_without_the_heavy_imports():
    code = (
        "import sys, seal.eval.harness_cli as cli\n"
        "heavy = [m for m in ('bfcl_eval', 'transformers', 'openai', 'torch') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "[]", done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "seal.eval.harness_cli", "--help"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert shown.returncode == 0 and "example" in shown.stdout and "--bfcl-model" in shown.stdout
