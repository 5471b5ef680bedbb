"""The paper configs show the model the paper's prompt: byte for byte what the original
release's environment showed it (tests/data/release_prompts.json.gz, made from the
release's own code by tests/make_release_golden.py), through the native API with the
`bfcl_qwen_fc` format and through the release protocol, at validation, at training (schema
cues) and with every layer on (SEAL_full_interface.yaml); and the ToolACE configs the
release's ToolACE mode (the `toolace_official_prompt` format), at validation and training,
its probes and its parser's readings. The first prompt docs/paper_prompt.md quotes is
today's rendering."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from release_protocol_client import SEAL_YAML_BFCL, TOOLACE_YAML_BFCL, ReleaseProtocolClient

from env_service import release_capability_file
from seal.bfcl.calls import CallParseError, ToolCall
from seal.bfcl.ground_truth import ground_truth_texts, ground_truth_trajectory
from seal.bfcl.tasks import load_task, task_ids
from seal.formats.base import Conversation, ToolFormat
from seal.formats.registry import get_format
from seal.rollout.env_client import call_body
from seal.service_contract import EpisodeSettings, InterfaceSettings

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests/data/release_prompts.json.gz"
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402

PAPER = get_format("bfcl_qwen_fc")
TOOLACE = get_format("toolace_official_prompt")

# The golden file's settings as this project's episode settings (their release blocks are
# in the file: `settings`).
SETTINGS = {
    "validate": EpisodeSettings(mode="validate"),
    "train": EpisodeSettings(mode="sample", interface=InterfaceSettings(schema_cues=True)),
    "full": EpisodeSettings(
        mode="sample",
        interface=InterfaceSettings(schema_cues=True, recovery_feedback=True, guidelines=True),
    ),
}
# Every paper config on Qwen2.5 and the golden setting its training episodes must show
# (validation always shows `validate`).
PAPER_CONFIGS = {
    "SEAL": "train",
    "SEAL_no_reweighting": "train",
    "SEAL_no_closed_loop": "train",
    "SEAL_qwen2.5_3b": "train",
    "SEAL_no_env_adaptation": "validate",
    "GRPO": "validate",
    "GRPO_qwen2.5_3b": "validate",
    "SEAL_full_interface": "full",
}
# The ToolACE section's settings (the release's ToolACE mode: a malformed call ends the
# episode), and the ToolACE configs' training settings.
TOOLACE_SETTINGS = {
    "validate": EpisodeSettings(mode="validate", end_on_malformed_call=True),
    "train": EpisodeSettings(
        mode="sample", end_on_malformed_call=True, interface=InterfaceSettings(schema_cues=True)
    ),
}
TOOLACE_CONFIGS = {"SEAL_toolace2_8b": "train", "GRPO_toolace2_8b": "validate"}
# A fast sample: the golden file's fully stored tasks (two eval tasks per category and the
# miss_func task whose tool is needed before it is revealed) and a spread of the rest.
FAST_SAMPLE = 40
COMPLETED = "[CONVERSATION_COMPLETED]"


@cache
def golden() -> dict:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


@dataclass(frozen=True)
class Mode:
    """One of the release's modes the golden file holds, and how this project plays it."""

    fmt: ToolFormat
    settings: dict[str, EpisodeSettings]
    """The golden file's settings as this project's episode settings."""
    release_params: dict
    """The release's env_service.bfcl block its client sends."""
    section: Callable[[], dict]
    """The mode's part of the golden file (tasks, settings)."""
    stored: Callable[[str, str], list[dict] | None]
    """The messages the file holds in full for a task and setting, or None."""

    def texts(self, task_id: str) -> list[str]:
        return ground_truth_texts(load_task(task_id), self.fmt.call_text)


def _toolace_stored(task_id: str, setting: str) -> list[dict] | None:
    full = golden()["toolace"]["full_text"]
    return full["by_task"].get(task_id) if setting == full["setting"] else None


QWEN_MODE = Mode(
    PAPER,
    SETTINGS,
    SEAL_YAML_BFCL,
    golden,
    lambda task_id, setting: golden()["full_text"].get(task_id, {}).get(setting),
)
TOOLACE_MODE = Mode(
    TOOLACE, TOOLACE_SETTINGS, TOOLACE_YAML_BFCL, lambda: golden()["toolace"], _toolace_stored
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[: len(next(iter(_hashes())))]


@cache
def _hashes() -> tuple[str, ...]:
    first = next(iter(golden()["tasks"].values()))["validate"]
    return tuple(h for _, h in first)


def fast_ids() -> list[str]:
    stored = sorted(golden()["full_text"])
    rest = [t for t in task_ids() if t not in stored]
    step = len(rest) // (FAST_SAMPLE - len(stored))
    return stored + rest[::step][: FAST_SAMPLE - len(stored)]


def hashed(messages: list[dict]) -> list[list[str]]:
    return [[m["role"], digest(m["content"])] for m in messages]


def mismatch(task_id: str, setting: str, got: list[dict], mode: Mode = QWEN_MODE) -> str | None:
    """None when `got` equals the golden messages; else where they first differ (with the
    release's text when the file stores it)."""
    want = mode.section()["tasks"][task_id][setting]
    if hashed(got) == want:
        return None
    at = next(
        (i for i, (g, w) in enumerate(zip(hashed(got), want, strict=False)) if g != w),
        min(len(got), len(want)),
    )
    text = mode.stored(task_id, setting)
    expected = text[at] if text and at < len(text) else want[at] if at < len(want) else None
    shown = got[at] if at < len(got) else None
    return f"{task_id} [{setting}] message {at}: got {shown!r:.600}\nwant {expected!r:.600}"


@pytest.fixture(scope="module")
def paper_service(tmp_path_factory, request):
    """A service whose profile selects the golden file's guidelines: the release's state,
    given by the operator (--capability-state), which both protocols read."""
    from fastapi.testclient import TestClient

    from env_service.app import create_app
    from env_service.service_config import ServiceConfig

    path = tmp_path_factory.mktemp("state") / "capability_state.json"
    path.write_text(json.dumps(golden()["guideline_state"]))
    app = create_app(ServiceConfig(capability_state_path=path))
    with TestClient(app) as http:
        yield http


def native_messages(
    http,
    task_id: str,
    setting: str,
    texts: list[str] | None = None,
    mode: Mode = QWEN_MODE,
    evaluation: dict | None = None,
) -> list[dict]:
    """What the mode's format shows the model for `texts` (default: the ground-truth
    policy's) up to the end of the episode; its evaluation goes into `evaluation`."""
    fmt = mode.fmt
    body = {"task_id": task_id, "settings": json.loads(_dump(mode.settings[setting]))}
    created = http.post("/v1/episodes", json=body)
    assert created.status_code == 201, created.text
    reply = created.json()
    episode_id = reply["episode_id"]
    messages = list(fmt.start(reply).messages)
    for text in texts or mode.texts(task_id):
        calls = [call_body(c) for c in fmt.parse(text)]
        step = http.post(
            f"/v1/episodes/{episode_id}/steps", json={"content": text, "tool_calls": calls}
        )
        assert step.status_code == 200, step.text
        messages += fmt.observation(step.json()["messages"])
        if step.json()["terminated"]:
            # The release's last message says the conversation is over (the model never
            # sees it, the episode ends); the native API ends with no message.
            messages.append({"role": "user", "content": COMPLETED})
            if evaluation is not None:
                evaluation.update(step.json()["evaluation"])
            break
    return messages


def release_messages(
    http,
    task_id: str,
    setting: str,
    texts: list[str] | None = None,
    mode: Mode = QWEN_MODE,
    evaluation: dict | None = None,
) -> list[dict]:
    """What the release protocol answers the release's own client with, up to the end of the
    episode; its evaluation goes into `evaluation`."""
    client = ReleaseProtocolClient(http)
    params = {**mode.release_params, **mode.section()["settings"][setting]}
    instance_id, data = client.create(task_id, **params)
    messages = [{"role": m["role"], "content": m["content"]} for m in data["state"]]
    for text in texts or mode.texts(task_id):
        reply = client.step(instance_id, text)
        messages += [{"role": m["role"], "content": m["content"]} for m in reply["state"]]
        if reply["is_terminated"]:
            break
    if evaluation is not None:
        evaluation.update(client.post("/evaluate", instance_id=instance_id)["data"])
    client.post("/release", instance_id=instance_id)
    return messages


def _dump(settings: EpisodeSettings) -> str:
    from pydantic import TypeAdapter

    return TypeAdapter(EpisodeSettings).dump_json(settings).decode()


def check(http, ids: list[str], protocol, mode: Mode = QWEN_MODE) -> list[str]:
    return [
        problem
        for task_id in ids
        for setting in mode.settings
        if (
            problem := mismatch(task_id, setting, protocol(http, task_id, setting, mode=mode), mode)
        )
    ]


@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_a_sample_of_tasks_shows_the_releases_prompt(paper_service, protocol):
    problems = check(paper_service, fast_ids(), protocol)
    assert not problems, f"{len(problems)} episodes differ; first:\n" + problems[0]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_all_800_tasks_show_the_releases_prompt(paper_service, protocol):
    problems = check(paper_service, task_ids(), protocol)
    assert not problems, f"{len(problems)} of 2400 episodes differ; first:\n" + problems[0]


@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_calls_the_release_would_not_run_are_answered_as_it_answers_them(paper_service, protocol):
    """Malformed blocks, tools not available, calls without a name, argument names that do
    not fit, a backend's JSON error: the release's answers, with and without D.3's hints."""
    probes = golden()["probes"]
    assert len(probes) == 8
    for task_id, by_setting in probes.items():
        for setting, played in by_setting.items():
            got = protocol(paper_service, task_id, setting, played["texts"])
            want = [{"role": m["role"], "content": m["content"]} for m in played["messages"]]
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                assert g == w, (task_id, setting, k)


@pytest.mark.parametrize("name,setting", sorted(PAPER_CONFIGS.items()))
def test_every_paper_config_asks_for_a_golden_setting(name, setting):
    trainer = OmegaConf.to_object(launcher.compose(REPO / f"exp/{name}.yaml", []).trainer)
    assert trainer.model.resolved_tool_format().name == "bfcl_qwen_fc"
    assert trainer.episode_settings("validate") == SETTINGS["validate"]
    training = trainer.episode_settings("sample")
    want = SETTINGS[setting]
    assert (training.prompt, training.interface) == (want.prompt, want.interface)


def test_the_guideline_state_selects_three_guidelines():
    """The `full` setting's state selects three tags, so the golden file holds D.4's block
    with several lines (not an empty selection that any texts would match)."""
    profile = release_capability_file.release_profile(
        golden()["guideline_state"], "multi_turn_base"
    )
    assert [e["tag"] for e in profile["tags"]] == [
        "state_mismatch",
        "empty_turn_model_response",
        "spurious_tool_call",
    ]
    system = golden()["full_text"]["multi_turn_miss_func_49"]["full"][0]["content"]
    assert "# Behavioral guidelines (env-evolved from recent failures):\n- [State-aware]" in system


def test_the_trainers_profile_selects_the_guidelines_the_release_selects():
    """The failure profile the trainer pushes (seal.tocf.state) picks and orders tags as the
    release's environment did from its state file, for the same statistics."""
    from seal.tocf.state import Tally, build_failure_profile

    stats = {  # tag: (count, reward sum)
        "pass": (300, 270.0),
        "correct_abstention": (50, 40.0),
        "state_mismatch": (40, 20.0),
        "spurious_tool_call": (30, 0.0),
        "empty_turn_model_response": (20, 14.0),
        "response_mismatch": (5, 0.0),
        "instance_mismatch": (9, 0.9),
    }
    tallies = {tag: Tally(count=n, reward_sum=r) for tag, (n, r) in stats.items()}
    ours = build_failure_profile(
        tallies, step=1, epoch=0, min_share=0.10, min_count=8, max_mean_reward=0.6, top_k=5
    )
    release = {"window_tags": {t: {"count": n, "reward_sum": r} for t, (n, r) in stats.items()}}
    theirs = release_capability_file.release_profile(release, "multi_turn_base")
    assert [e["tag"] for e in ours["tags"]] == [e["tag"] for e in theirs["tags"]]
    assert [e["tag"] for e in ours["tags"]] == [
        "spurious_tool_call",  # less prevalent than state_mismatch, never solved
        "state_mismatch",
    ]  # empty turns: solved enough (mean 0.7); response and instance: too rare
    assert [e["share"] for e in ours["tags"]] == pytest.approx([e["share"] for e in theirs["tags"]])


def test_long_observations_are_clipped_as_the_releases_trainer_clips_them(paper_service, tokenizer):
    """The paper's tool-response clip (4096 tokens), as the bfcl_qwen_fc format's driver
    applies it, equals the release's context manager's on every observation it clips."""
    from seal.rollout.turn_tokens import turn_tokenizer

    clips = golden()["clips"]
    tokens = turn_tokenizer(tokenizer, PAPER)
    assert PAPER.clip == "release" and len(clips["by_task"]) >= 40
    for task_id, by_index in clips["by_task"].items():
        messages = native_messages(paper_service, task_id, "validate")
        for index, want in by_index.items():
            content = messages[int(index)]["content"]
            clipped = tokens.clip_like_the_release(content, clips["max_tokens"])
            assert clipped != content and digest(clipped) == want, (task_id, index)


DOC = REPO / "docs/paper_prompt.md"
DOC_PROMPT = re.compile(
    r"## The untrained model's first prompt \((?P<task>\w+), validation\).*?"
    r"<summary>the whole prompt \((?P<chars>[\d,]+) characters\)</summary>\n\n"
    r"```\n(?P<prompt>.*?)\n```\n",
    re.S,
)


def test_the_prompt_quoted_in_the_docs_is_todays_rendering(paper_service):
    """docs/paper_prompt.md quotes the untrained model's whole first prompt for one task:
    it is the `bfcl_qwen_fc` rendering of that task at validation today, and its count."""
    quoted = DOC_PROMPT.search(DOC.read_text(encoding="utf-8"))
    assert quoted is not None, f"{DOC} no longer quotes a first prompt where this test looks"
    body = {"task_id": quoted["task"], "settings": json.loads(_dump(SETTINGS["validate"]))}
    created = paper_service.post("/v1/episodes", json=body)
    assert created.status_code == 201, created.text
    rendered = PAPER.render(PAPER.start(created.json()))
    assert quoted["prompt"] == rendered
    assert int(quoted["chars"].replace(",", "")) == len(rendered)


# --- the release's ToolACE mode (the ToolACE-2-Llama-3.1-8B configs) ------------------------


@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_a_sample_of_tasks_shows_the_releases_toolace_prompt(paper_service, protocol):
    problems = check(paper_service, fast_ids(), protocol, TOOLACE_MODE)
    assert not problems, f"{len(problems)} episodes differ; first:\n" + problems[0]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_all_800_tasks_show_the_releases_toolace_prompt(paper_service, protocol):
    problems = check(paper_service, task_ids(), protocol, TOOLACE_MODE)
    assert not problems, f"{len(problems)} of 1600 episodes differ; first:\n" + problems[0]


@pytest.mark.parametrize("protocol", [native_messages, release_messages])
def test_toolace_messages_are_answered_or_end_the_episode_as_the_release_does(
    paper_service, protocol
):
    """Each probe episode (a malformed list, text beside a call, <tool_call> tags, a
    JSON-style call, positional arguments, **kwargs, an unknown or dotted or held-out
    tool, a bare call, a name as a value; a malformed message after the first turn and in
    place of the last turn's closing message): the release's messages up to its
    "[CONVERSATION_COMPLETED]", and an evaluation that says whether a malformed call
    ended it."""
    probes = golden()["toolace"]["probes"]
    assert len(probes) == 4
    ended = 0
    for task_id, plays in probes.items():
        for played in plays:
            texts, evaluation = played["texts"], {}
            got = protocol(paper_service, task_id, "train", texts, TOOLACE_MODE, evaluation)
            assert digest(got[0]["content"]) == played["system"], task_id
            assert got[1:] == played["messages"], (task_id, texts[0])
            last = texts[len(got) - 3]  # the message that ended the episode
            malformed = any(isinstance(c, CallParseError) for c in TOOLACE.parse(last))
            assert evaluation["ended_on_malformed_call"] is malformed, (task_id, last)
            if protocol is release_messages:  # the release's `completed`
                assert evaluation["completed"] is not malformed
            if malformed and len(got) - 2 < len(texts):  # turns were left: a failure
                assert evaluation["accuracy"] == 0
            ended += malformed
    assert ended == 4 * 9  # 7 probes, the late one twice


def test_a_malformed_closing_message_ends_the_episode_with_the_checkers_verdict(paper_service):
    """A malformed message in place of the last turn's closing one ends the episode after
    every turn's calls ran: the release's evaluation is the checker's verdict on them (its
    zero step reward is not what its trainer reads), so the ground truth passes."""
    task_id = next(iter(golden()["toolace"]["probes"]))
    texts = [*TOOLACE_MODE.texts(task_id)[:-1], "[cd(folder=)]"]
    for protocol in (native_messages, release_messages):
        evaluation = {}
        protocol(paper_service, task_id, "train", texts, TOOLACE_MODE, evaluation)
        assert evaluation["ended_on_malformed_call"] and evaluation["accuracy"] == 1
        assert evaluation["turns_reached"] == evaluation["num_turns"]


def test_the_toolace_parser_reads_messages_as_the_release_reads_them():
    """Calls (names, arguments as Python's repr) and errors (the release's words, in its
    order) of every message the golden file has the release's parser read."""
    readings = golden()["toolace"]["parser"]
    assert len(readings) >= 40
    for reading in readings:
        parsed = TOOLACE.parse(reading["text"])
        calls = [[c.name, repr(c.kwargs)] for c in parsed if isinstance(c, ToolCall)]
        errors = "; ".join(c.reason for c in parsed if isinstance(c, CallParseError))
        assert (calls, errors or None) == (reading["calls"], reading["error"]), reading["text"]


@pytest.mark.parametrize("text", ["[f(a={1, 2})]", "[f(a=b'x')]", "[f(a=1e999)]", "[f(a={1: 2})]"])
def test_toolace_arguments_that_are_not_json_values_are_malformed(text):
    """The one departure from the release's reading (docs/paper_prompt.md): it ran these
    with a set, bytes, an infinity or an integer key; the native API carries JSON."""
    assert [type(c) for c in TOOLACE.parse(text)] == [CallParseError]


def test_every_ground_truth_round_trips_through_the_toolace_format():
    for task_id in task_ids():
        for turn in ground_truth_trajectory(load_task(task_id)):
            for calls in turn:
                assert TOOLACE.parse(TOOLACE.call_text(calls)) == calls, task_id
    assert TOOLACE.parse("Done.") == []


def test_the_toolace_prompt_renders_as_the_releases_llama_template(paper_service):
    """The whole last prompt of the fully stored tasks, in the format's layout (bfcl-eval's
    LlamaHandler), equals the release's Llama 3 fallback chat template's rendering."""
    rendered = golden()["toolace"]["rendered"]["by_task"]
    assert len(rendered) == 5
    for task_id, by_setting in rendered.items():
        texts = TOOLACE_MODE.texts(task_id)
        for setting, want in by_setting.items():
            messages = native_messages(paper_service, task_id, setting, texts, TOOLACE_MODE)
            chat = messages[:2]
            for text, observation in zip(texts, messages[2:-1], strict=False):
                chat += [TOOLACE.assistant_message(text), observation]
            assert digest(TOOLACE.render(Conversation(chat))) == want, (task_id, setting)


@pytest.mark.parametrize("name,setting", sorted(TOOLACE_CONFIGS.items()))
def test_the_toolace_configs_ask_for_a_golden_toolace_setting(name, setting):
    trainer = OmegaConf.to_object(launcher.compose(REPO / f"exp/{name}.yaml", []).trainer)
    assert trainer.model.resolved_tool_format() is TOOLACE
    assert trainer.episode_settings("validate") == TOOLACE_SETTINGS["validate"]
    training, want = trainer.episode_settings("sample"), TOOLACE_SETTINGS[setting]
    assert (training.prompt, training.end_on_malformed_call, training.interface) == (
        want.prompt,
        want.end_on_malformed_call,
        want.interface,
    )
