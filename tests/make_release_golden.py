"""Record what the original SEAL release shows the model: the golden file of the paper prompt.

    python tests/make_release_golden.py --release PATH [--out tests/data/release_prompts.json.gz]

PATH is a checkout of github.com/yihaohu0118/SEAL, whose environment produced the paper's
numbers. Its own `BfclEnv` (mode `bfcl_qwen_fc`) plays every BFCL multi-turn task with the
ground-truth policy (seal.bfcl.ground_truth.ground_truth_texts: each turn's calls in one
message, then "Done.") in three settings, SETTINGS below; every message the model would see
is recorded as a hash, and in full for a sample. tests/test_paper_prompt.py holds the
paper configs to this file through both of the service's protocols. The release's code is
imported from PATH and run here; none of it is copied into this repository. It lives with
the tests: it makes test data, with the test oracle's isolation of bfcl-eval's executor
(tests/bfcl_official.py); run as a file, this folder is on its import path.

bfcl-eval's API-model handlers are imported by two of the release's modules but only used to
score runs, which this script does not do; they are replaced by empty modules (their SDKs are
not installed here). docs/paper_prompt.md says what the file holds.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import os
import sys
import tempfile
import types
import uuid
from pathlib import Path

from bfcl_official import fresh_backends
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests/data/release_prompts.json.gz"

# The release's exp/SEAL.yaml `env_service.bfcl` block (observation_lite as its paper-era
# bfcl_seal_04_full_seal.yaml sets it), and the two optional layers of Appendix D.3/D.4 on
# top of it (this project's exp/SEAL_full_interface.yaml).
OBSERVATION_LITE = {
    "enable": True,
    "apply_to_validation": False,
    "add_required_hint": True,
    "add_type_hint": False,
    "add_enum_hint": True,
    "hide_optional": False,
}
COMMON = {
    "strict_tool_parser": True,
    "enforce_available_tools": True,
    "tool_prompt_mode": "bfcl_qwen_fc",
    "tool_result_mode": "bfcl_tool_response",
}
SETTINGS = {
    "validate": {"rollout_mode": "validate", "observation_lite": OBSERVATION_LITE},
    "train": {"rollout_mode": "sample", "observation_lite": OBSERVATION_LITE},
    "full": {
        "rollout_mode": "sample",
        "observation_lite": OBSERVATION_LITE,
        "tool_feedback_evolution": {"enable": True},
        "diagnostic_evolution": {"enable": True},  # state_path added in main()
    },
}

# The capability state the `full` setting selects guidelines from (the release's file shape:
# window tag statistics). Three tags pass the release's default thresholds (share >= 0.10,
# count >= 8, mean reward < 0.6) in a known order of pressure; the others each miss one.
GUIDELINE_STATE = {
    "window_tags": {
        "pass": {"count": 120, "reward_mean": 1.0},
        "state_mismatch": {"count": 40, "reward_mean": 0.10},
        "empty_turn_model_response": {"count": 24, "reward_mean": 0.20},
        "spurious_tool_call": {"count": 12, "reward_mean": 0.0},
        "response_mismatch": {"count": 6, "reward_mean": 0.0},
        "instance_mismatch": {"count": 30, "reward_mean": 0.7},
    }
}

# Tasks whose messages are stored in full (the rest as hashes): the first two eval-split
# tasks of each category, and the miss_func task whose tool is needed before it is revealed.
SAMPLE_PER_CATEGORY = 2
HASH_CHARS = 16

# Messages that break the release's rules, played before the ground truth of a few tasks
# (`probes` in the file, in full, with and without the D.3 feedback): each is answered
# without changing the backends' state. `{tool}` is the task's first tool.
PROBES = (
    '<tool_call>\n{{"name": "{tool}", "arguments": {{"a": }}}}\n</tool_call>',
    '<tool_call>\n{{"name": "{tool}"}}\n</tool_call>',
    '<tool_call>\n{{"name": "{tool}", "arguments": "not json"}}\n</tool_call>',
    '<tool_call>\n{{"name": "{tool}", "arguments": [1]}}\n</tool_call>',
    "I will call <tool_call> once I know more.",
    '<tool_call>\n{{"name": "no_such_tool", "arguments": {{}}}}\n</tool_call>',
    '<tool_call>\n{{"name": "", "arguments": {{}}}}\n</tool_call>',
    '<tool_call>\n{{"name": "{tool}", "arguments": {{"bogus_argument": 1}}}}\n</tool_call>\n'
    '<tool_call>\n{{"name": "{tool}", "arguments": {{"a": }}}}\n</tool_call>',
    '<tool_call>\n{{"name": "{tool}", "arguments": {{"bogus_argument": 1}}}}\n</tool_call>',
)
# A call whose backend answers with a JSON error, for the tasks whose tools include it.
ERROR_RESULT_CALL = (
    '<tool_call>\n{"name": "cd", "arguments": {"folder": "no_such_folder"}}\n</tool_call>'
)
PROBE_SETTINGS = ("train", "full")
PROBES_PER_CATEGORY = 2


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def import_release(release: Path):
    """The release's BfclEnv and data preparation, with the scoring-only imports stubbed."""
    for name, attrs in {
        "bfcl_eval.eval_checker.eval_runner": (
            "relevance_file_runner",
            "multi_turn_runner",
            "get_handler",
            "ast_file_runner",
        ),
        "bfcl_eval.eval_checker.eval_runner_helper": ("record_result", "record_cost_latency"),
    }.items():
        stub = types.ModuleType(name)
        for attr in attrs:
            setattr(stub, attr, None)
        sys.modules[name] = stub
    # The one helper the release's data preparation takes from there (bfcl-eval re-exports it).
    from bfcl_eval.utils import load_file

    sys.modules["bfcl_eval.eval_checker.eval_runner_helper"].load_file = load_file
    # The release's top-level `env_service` package must win over this project's.
    sys.path.insert(0, str(release))
    from env_service.environments.bfcl import bfcl_dataprocess, bfcl_env

    if not bfcl_env.__file__.startswith(str(release)):
        raise SystemExit(f"imported {bfcl_env.__file__}, not the release's module under {release}")
    return bfcl_env, bfcl_dataprocess


def play(bfcl_env, task, params: dict, texts: list[str]) -> list[dict]:
    """The messages the release's environment shows while `texts` are the model's turns,
    in a namespace of bfcl-eval's executor of its own, as the release's one process per
    episode had. The release prints every decoded call, and a traceback when its reward
    (not needed here) cannot import an API model's SDK: both silenced."""
    model_name = f"golden_{uuid.uuid4().hex}"
    env = bfcl_env.BfclEnv(
        task_id=task.task_id,
        instance_id=uuid.uuid4().hex,
        params={**params, "model_name": model_name},
    )
    with (
        fresh_backends(model_name, task.involved_classes),
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        messages = env.get_init_state()["state"]
        for text in texts:
            reply = env.step({"role": "assistant", "content": text})
            state = reply["state"][0]
            messages.append({"role": state["role"], "content": state["content"]})
    if not reply["is_terminated"] or len(messages) != 2 + len(texts):
        raise RuntimeError(f"{task.task_id}: the release did not play the ground truth through")
    return messages


def probe_texts(task) -> list[str]:
    texts = [p.format(tool=task.tools[0]["name"]) for p in PROBES]
    if any(d["name"] == "cd" for d in task.tools):
        texts.append(ERROR_RESULT_CALL)
    return texts


def probe_tasks(by_category: dict[str, list[str]]) -> list[str]:
    """The first eval-split tasks of each category whose ground truth leaves room for the
    probes within the paper's 20 generations."""
    from seal.bfcl.ground_truth import ground_truth_texts
    from seal.bfcl.tasks import load_task

    chosen = []
    for ids in by_category.values():
        fits = [
            t
            for t in ids
            if len(probe_texts(load_task(t)) + ground_truth_texts(load_task(t))) <= 20
        ]
        chosen += fits[:PROBES_PER_CATEGORY]
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--release", type=Path, required=True, help="a checkout of yihaohu0118/SEAL")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    p.add_argument("--limit", type=int, help="only the first N tasks (a quick look)")
    args = p.parse_args(argv)
    release = args.release.resolve()
    bfcl_env, bfcl_dataprocess = import_release(release)

    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH

    from seal.bfcl.ground_truth import END_OF_TURN_TEXT, ground_truth_texts
    from seal.bfcl.tasks import CATEGORIES, load_task, task_ids

    split = json.loads((ROOT / "data/seal_split.json").read_text())
    by_category = {c: [t for t in split["eval"] if t.rsplit("_", 1)[0] == c] for c in CATEGORIES}
    sample = {t for ids in by_category.values() for t in ids[:SAMPLE_PER_CATEGORY]}
    sample.add("multi_turn_miss_func_49")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        bfcl_dataprocess.bfcl_task_preprocess(
            test_categories=list(CATEGORIES),
            train_ratio=0.5,
            output_dir=str(tmp),
            output_prefix="multi_turn",
        )
        state_file = tmp / "capability_state.json"
        state_file.write_text(json.dumps(GUIDELINE_STATE))
        base = {
            **COMMON,
            "data_path": str(tmp / "multi_turn_processed.jsonl"),
            "answer_path": str(POSSIBLE_ANSWER_PATH),
        }
        settings = {name: {**base, **s} for name, s in SETTINGS.items()}
        settings["full"]["diagnostic_evolution"] = {"enable": True, "state_path": str(state_file)}

        tasks, full_text, probes = {}, {}, {}
        for task_id in probe_tasks(by_category):
            task = load_task(task_id)
            texts = probe_texts(task) + ground_truth_texts(task)
            probes[task_id] = {
                name: {"texts": texts, "messages": play(bfcl_env, task, settings[name], texts)}
                for name in PROBE_SETTINGS
            }
        for task_id in tqdm(task_ids()[: args.limit], desc="tasks", unit="task"):
            task = load_task(task_id)
            texts = ground_truth_texts(task)
            record = {}
            for name, params in settings.items():
                messages = play(bfcl_env, task, params, texts)
                record[name] = [[m["role"], digest(m["content"])] for m in messages]
                if task_id in sample:
                    full_text.setdefault(task_id, {})[name] = messages
            tasks[task_id] = record

    out = {
        "about": (
            "What the original SEAL release (github.com/yihaohu0118/SEAL, BfclEnv, mode "
            "bfcl_qwen_fc) shows the model on each BFCL multi-turn task played by the "
            "ground-truth policy; made by scripts/release_golden.py; see docs/paper_prompt.md."
        ),
        "release_commit": _release_commit(release),
        "bfcl_eval": _version("bfcl-eval"),
        "hash": f"sha256 of the UTF-8 content, first {HASH_CHARS} hex digits",
        "policy": f"per turn: the ground-truth calls in one message, then {END_OF_TURN_TEXT!r}",
        "settings": SETTINGS,
        "guideline_state": GUIDELINE_STATE,
        "tasks": tasks,
        "full_text": full_text,
        "probes": probes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, sort_keys=True)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB, {len(tasks)} tasks)")
    return 0


def _release_commit(release: Path) -> str | None:
    import subprocess

    head = subprocess.run(
        ["git", "-C", str(release), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return head.stdout.strip() or None


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    raise SystemExit(main())
