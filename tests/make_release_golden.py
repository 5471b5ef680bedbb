"""Record what the original SEAL release shows the model: the golden file of the paper prompt.

    python tests/make_release_golden.py --release PATH [--out tests/data/release_prompts.json.gz]

PATH is a checkout of github.com/yihaohu0118/SEAL, whose environment produced the paper's
numbers. Its own `BfclEnv` (mode `bfcl_qwen_fc`) plays every BFCL multi-turn task with the
ground-truth policy (seal.bfcl.ground_truth.ground_truth_texts: each turn's calls in one
message, then "Done.") in three settings, SETTINGS below; every message the model would see
is recorded as a hash, and in full for a sample. Its ToolACE mode (`toolace`, TOOLACE below:
the ToolACE-2-Llama-3.1-8B runs) plays them too, the calls written as call lists, with its
own probes and its parser's readings of PARSER_TEXTS. tests/seal/bfcl/test_paper_prompt.py holds the
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

from release_protocol_client import SEAL_YAML_BFCL, TOOLACE_YAML_BFCL
from tqdm import tqdm

from seal.bfcl.official_executor import fresh_backends

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests/data/release_prompts.json.gz"

# The release's exp/SEAL.yaml `env_service.bfcl` block (SEAL_YAML_BFCL: observation_lite
# as its paper-era bfcl_seal_04_full_seal.yaml sets it), and the two optional layers of
# Appendix D.3/D.4 on top of it (this project's exp/SEAL_full_interface.yaml).
COMMON = {k: v for k, v in SEAL_YAML_BFCL.items() if k != "observation_lite"}
OBSERVATION_LITE = SEAL_YAML_BFCL["observation_lite"]
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

# The paper's clip of an observation (its trainer's, not its environment's): contents over
# this many tokens are cut by the release's context manager before the model sees them.
MAX_ENV_TOKENS = 4096

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

# The release's ToolACE mode, as its ToolACE-2-Llama-3.1-8B configs set it (commit
# TOOLACE_CONFIGS; its bfcl_env.py and env_handler.py there are the files of the checkout,
# checked in main()): validation, and training with observation_lite (the SEAL run; the
# vanilla run's training prompt is the validation one).
TOOLACE_CONFIGS = "2fe7844"
TOOLACE_CODE = (
    "env_service/environments/bfcl/bfcl_env.py",
    "env_service/environments/bfcl/env_handler.py",
)
TOOLACE_COMMON = {k: v for k, v in TOOLACE_YAML_BFCL.items() if k != "observation_lite"}
TOOLACE_SETTINGS = {
    "validate": {"rollout_mode": "validate", "observation_lite": OBSERVATION_LITE},
    "train": {"rollout_mode": "sample", "observation_lite": OBSERVATION_LITE},
}
# Messages played first in an episode of a few tasks (`toolace.probes`, setting `train`),
# each in its own episode followed by the ground truth: malformed ones end the episode,
# the others are answered and it plays on. `{tool}` is the task's first tool.
TOOLACE_PROBES = (
    "[{tool}(a=)]",  # a malformed list
    "[{tool}(a=1",  # an unclosed one (read as JSON, which fails)
    "Let me look. [{tool}()]",  # text beside the call list
    '<tool_call>\n{{"name": "{tool}", "arguments": {{}}}}\n</tool_call>',
    '{{"name": "{tool}", "arguments": {{}}}}',  # a JSON-style call: it runs
    "[{tool}('x')]",  # positional arguments
    "[{tool}(**{{'a': 1}})]",
    "[no_such_tool(a=1)]",  # an unknown tool: the env's error, the episode plays on
    "[os.{tool}()]",  # a dotted name: not a tool
    "{tool}()",  # a bare call: it runs
    "[{tool}(bogus_argument=some_name)]",  # a name as a value: its text; the backend's error
    "Sorry (I cannot do that)",  # read as a bare call, which does not parse
)
# Played after the first turn's ground truth, and in place of the last turn's closing
# message (the episode then ends with every turn answered).
TOOLACE_LATE_PROBE = "[{tool}(a=)]"
TOOLACE_PROBES_PER_CATEGORY = 1

# Messages the release's ToolACE parser reads (`toolace.parser`: its calls, each argument
# dict as Python's repr, and its error), beyond those the episodes play.
PARSER_TEXTS = (
    "Done.",
    "[]",
    "{}",
    "[cd(folder='x')]",
    "cd(folder='x')",
    "Sorry (I can't)",
    "I can't [do (this)]",
    "[cd(folder='x')] [ls(a=True)]",
    "[cd(a=x)]",
    "[cd(a=1+2, b=-1, c=None, d=[1, (2, 3)])]",
    "[f().g(a=1)]",
    "[cd(a=1, a=2)]",
    "[cd(folder='x'",
    "[1 (2)]",
    "[x for x in f(y)]",
    "[(x)]",
    "[f(a=1)] and [(x)]",
    "[f(a=1), 3]",
    "[f(*a)]",
    "[f(a=1); g(b=2)]",
    "[[f(a=1)]]",
    "['[', f(a=1)]",
    "f(a=1) g(b=2)",
    "text ]",
    '"x"',
    "[f(a='x\\'y')]",
    "a\n[f(a=1)]\n\nb",
    "[f(a=1)]\n\n",
    "```\n[cd(folder='x')]\n```",
    '[{"name": "cd", "arguments": {"folder": "x"}}]',
    '[{"name": "cd", "arguments": {"q": "a (b)"}}]',
    '{"name": cd, "arguments": {"a": true, "b": null}}',
    '{"name": "a"}; {"name": "b", "parameters": null}',
    '```json\n[{"name": "cd", "parameters": "{\\"a\\": 1}"}]\n```',
    '{"function": "cd", "parameters": {"a": false}}',
    '{"name": "  ", "arguments": {}}',
    '[{"name": "x", "arguments": 5}]',
    '{"name": "x", "arguments": "nope"}',
    '{"name": 5}',
    "[1, 2]",
)


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
    from agentevolver.module.context_manager.cmt_base import ExtendedMessage
    from env_service.environments.bfcl import bfcl_dataprocess, bfcl_env

    if not bfcl_env.__file__.startswith(str(release)):
        raise SystemExit(f"imported {bfcl_env.__file__}, not the release's module under {release}")
    return bfcl_env, bfcl_dataprocess, ExtendedMessage


def release_clip(extended_message, tokenizer, content: str) -> str:
    """What the release's trainer shows of an observation (its context manager's clip)."""
    message = extended_message(
        author="env",
        role="user",
        content=content,
        clip=True,
        clip_token_limit=MAX_ENV_TOKENS,
        tokenizer=tokenizer,
        token_generator="manual",
    )
    return message.content_for_future


def play(bfcl_env, task, params: dict, texts: list[str], ends_early: bool = False) -> list[dict]:
    """The messages the release's environment shows while `texts` are the model's turns,
    in a namespace of bfcl-eval's executor of its own, as the release's one process per
    episode had, up to the step that ends the episode (the last unless `ends_early`).
    The release prints every decoded call, and a traceback when its reward (not needed
    here) cannot import an API model's SDK: both silenced."""
    model_name = f"golden_{uuid.uuid4().hex}"
    env = bfcl_env.BfclEnv(
        task_id=task.task_id,
        instance_id=uuid.uuid4().hex,
        params={**params, "model_name": model_name},
    )
    with (
        fresh_backends([model_name], task.involved_classes),
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        messages = env.get_init_state()["state"]
        for text in texts:
            reply = env.step({"role": "assistant", "content": text})
            state = reply["state"][0]
            messages.append({"role": state["role"], "content": state["content"]})
            if reply["is_terminated"]:
                break
    if not reply["is_terminated"] or (not ends_early and len(messages) != 2 + len(texts)):
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


def hashed(messages: list[dict]) -> list[list[str]]:
    return [[m["role"], digest(m["content"])] for m in messages]


def toolace_section(
    bfcl_env, base: dict, ids: list[str], by_category: dict[str, list[str]]
) -> dict:
    """What the release's ToolACE mode shows: every task in each of TOOLACE_SETTINGS (the
    calls written as call lists), a sample in full and as the release's chat template
    renders it, the probes, and its parser's readings of PARSER_TEXTS."""
    from seal.bfcl.calls import call_list_text
    from seal.bfcl.ground_truth import ground_truth_texts
    from seal.bfcl.tasks import load_task

    settings = {name: {**base, **TOOLACE_COMMON, **s} for name, s in TOOLACE_SETTINGS.items()}
    template = release_llama_template()
    sample = {ids[0] for ids in by_category.values()} | {"multi_turn_miss_func_49"}
    tasks, full_text, rendered = {}, {}, {}
    for task_id in tqdm(ids, desc="toolace", unit="task"):
        task = load_task(task_id)
        texts = ground_truth_texts(task, call_list_text)
        record = {}
        for name, params in settings.items():
            messages = play(bfcl_env, task, params, texts)
            record[name] = hashed(messages)
            if task_id in sample:
                rendered.setdefault(task_id, {})[name] = digest(
                    render_last_prompt(template, messages, texts)
                )
                if name == "validate":
                    full_text[task_id] = messages
        tasks[task_id] = record

    probes = {}
    for task_id in toolace_probe_tasks(by_category):
        task = load_task(task_id)
        played = []
        for texts in toolace_probe_texts(task, ground_truth_texts(task, call_list_text)):
            messages = play(bfcl_env, task, settings["train"], texts, ends_early=True)
            played.append(
                {"texts": texts, "system": digest(messages[0]["content"]), "messages": messages[1:]}
            )
        probes[task_id] = played

    parser = []
    for text in PARSER_TEXTS:
        read = bfcl_env.parse_toolace_content_to_tool_calls(
            text, strict=True, reject_tool_call_with_content=True
        )
        calls = [
            [c["function"]["name"], repr(c["function"]["arguments"])] for c in read["tool_calls"]
        ]
        error = read.get("_bfcl_parse_error")
        if error and " at 0x" in error:  # an object's address: not reproducible
            raise SystemExit(f"PARSER_TEXTS: {text!r} reads as an error naming an address")
        parser.append({"text": text, "calls": calls, "error": error})
    return {
        "settings": {name: {**TOOLACE_COMMON, **s} for name, s in TOOLACE_SETTINGS.items()},
        "code_as_of": TOOLACE_CONFIGS,
        "policy": "per turn: the ground-truth calls as one call list, then 'Done.'",
        "tasks": tasks,
        "full_text": {"setting": "validate", "by_task": full_text},
        "rendered": {
            "what": "the last prompt (system through the last observation, then the "
            "generation prompt) through the release's Llama 3 fallback chat template",
            "by_task": rendered,
        },
        "probes": probes,
        "parser": parser,
    }


def toolace_probe_texts(task, ground_truth: list[str]) -> list[list[str]]:
    """The model's messages of each probe episode: a probe first, then the ground truth;
    for a miss_func task also a call of its held-out tool before it is revealed; the late
    probe after the first turn and in place of the last turn's closing message."""
    from seal.bfcl.ground_truth import END_OF_TURN_TEXT

    tool = task.tools[0]["name"]
    plays = [[p.format(tool=tool), *ground_truth] for p in TOOLACE_PROBES]
    for docs in task.held_out.values():
        plays.append([f"[{docs[0]['name']}()]", *ground_truth])
    late = TOOLACE_LATE_PROBE.format(tool=tool)
    first_turn = ground_truth.index(END_OF_TURN_TEXT) + 1
    plays.append([*ground_truth[:first_turn], late, *ground_truth[first_turn:]])
    plays.append([*ground_truth[:-1], late])
    return plays


def toolace_probe_tasks(by_category: dict[str, list[str]]) -> list[str]:
    """The first eval-split task of each category whose probe episodes fit in the paper's
    20 generations."""
    from seal.bfcl.calls import call_list_text
    from seal.bfcl.ground_truth import ground_truth_texts
    from seal.bfcl.tasks import load_task

    def fits(task_id: str) -> bool:
        return len(ground_truth_texts(load_task(task_id), call_list_text)) + 1 <= 20

    return [
        t
        for ids in by_category.values()
        for t in [t for t in ids if fits(t)][:TOOLACE_PROBES_PER_CATEGORY]
    ]


def release_llama_template() -> str:
    """The chat template the release gives a Llama checkpoint that has none
    (agentevolver/utils/model_compat.py), from the checkout import_release put first."""
    from agentevolver.utils.model_compat import LLAMA3_CHAT_TEMPLATE

    return LLAMA3_CHAT_TEMPLATE


def render_last_prompt(template: str, messages: list[dict], texts: list[str]) -> str:
    """The last prompt of an episode (its messages up to the last observation, the model's
    messages between them) as `template` renders it, with Llama 3's begin-of-text token."""
    from transformers.utils.chat_template_utils import render_jinja_template

    chat = messages[:2]
    for text, observation in zip(texts, messages[2:-1], strict=False):
        chat += [{"role": "assistant", "content": text}, observation]
    rendered, _ = render_jinja_template(
        [chat], chat_template=template, add_generation_prompt=True, bos_token=BEGIN_OF_TEXT
    )
    return rendered[0]


BEGIN_OF_TEXT = "<|begin_of_text|>"


def check_toolace_code(release: Path) -> None:
    """The checkout's ToolACE code is the code of the ToolACE runs' configs (the golden
    must come from the code the paper's ToolACE numbers came from)."""
    import subprocess

    def blob(rev_path: str) -> str:
        cmd = ["git", "-C", str(release), "rev-parse", rev_path]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    for path in TOOLACE_CODE:
        here = subprocess.run(
            ["git", "-C", str(release), "hash-object", path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if here != blob(f"{TOOLACE_CONFIGS}:{path}"):
            raise SystemExit(f"{path} of {release} is not the file of commit {TOOLACE_CONFIGS}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--release", type=Path, required=True, help="a checkout of yihaohu0118/SEAL")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    p.add_argument("--limit", type=int, help="only the first N tasks (a quick look)")
    args = p.parse_args(argv)
    release = args.release.resolve()
    check_toolace_code(release)
    bfcl_env, bfcl_dataprocess, extended_message = import_release(release)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "seal/assets/qwen2.5-tokenizer")

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

        tasks, full_text, probes, clips = {}, {}, {}, {}
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
                record[name] = hashed(messages)
                for k, m in enumerate(messages[1:], start=1):  # observations (and questions)
                    if name == "validate" and len(m["content"].encode()) > MAX_ENV_TOKENS:
                        clipped = release_clip(extended_message, tokenizer, m["content"])
                        if clipped != m["content"]:
                            clips.setdefault(task_id, {})[str(k)] = digest(clipped)
                if task_id in sample:
                    full_text.setdefault(task_id, {})[name] = messages
            tasks[task_id] = record
        toolace = toolace_section(bfcl_env, base, task_ids()[: args.limit], by_category)

    out = {
        "about": (
            "What the original SEAL release (github.com/yihaohu0118/SEAL, BfclEnv, mode "
            "bfcl_qwen_fc; `toolace`: its ToolACE mode) shows the model on each BFCL "
            "multi-turn task played by the ground-truth policy; made by "
            "tests/make_release_golden.py; see docs/paper_prompt.md."
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
        "clips": {
            "max_tokens": MAX_ENV_TOKENS,
            "tokenizer": "seal/assets/qwen2.5-tokenizer",
            "by_task": clips,
        },
        "toolace": toolace,
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
