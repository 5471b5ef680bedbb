"""The paper configs show the model the paper's prompt: byte for byte what the original
release's environment showed it (tests/data/release_prompts.json.gz, made from the
release's own code by tests/make_release_golden.py), through the native API with the
`bfcl_qwen_fc` format and through the wire protocol, at validation, at training (schema
cues) and with every layer on (SEAL_full_interface.yaml)."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from functools import cache
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from wire_client import WireClient

from env_service.release import state
from seal.bfcl.ground_truth import ground_truth_texts
from seal.bfcl.tasks import load_task, task_ids
from seal.formats.registry import get_format
from seal.rollout.env_client import call_body
from seal.rollout.protocol import EpisodeSettings, EvolutionSettings

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/data/release_prompts.json.gz"
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402

PAPER = get_format("bfcl_qwen_fc")

# The golden file's settings as this project's episode settings (their release blocks are
# in the file: `settings`).
SETTINGS = {
    "validate": EpisodeSettings(mode="validate"),
    "train": EpisodeSettings(mode="sample", evolution=EvolutionSettings(schema_cues=True)),
    "full": EpisodeSettings(
        mode="sample",
        evolution=EvolutionSettings(schema_cues=True, recovery_feedback=True, guidelines=True),
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
# A fast sample: the golden file's fully stored tasks (two eval tasks per category and the
# miss_func task whose tool is needed before it is revealed) and a spread of the rest.
FAST_SAMPLE = 40


@cache
def golden() -> dict:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return json.load(f)


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


def mismatch(task_id: str, setting: str, got: list[dict]) -> str | None:
    """None when `got` equals the golden messages; else where they first differ (with the
    release's text when the file stores it)."""
    want = golden()["tasks"][task_id][setting]
    if hashed(got) == want:
        return None
    at = next(
        (i for i, (g, w) in enumerate(zip(hashed(got), want, strict=False)) if g != w),
        min(len(got), len(want)),
    )
    text = golden()["full_text"].get(task_id, {}).get(setting)
    expected = text[at] if text and at < len(text) else want[at] if at < len(want) else None
    shown = got[at] if at < len(got) else None
    return f"{task_id} [{setting}] message {at}: got {shown!r:.600}\nwant {expected!r:.600}"


@pytest.fixture(scope="module")
def paper_service(tmp_path_factory, request):
    """A service whose profile selects the golden file's guidelines: the release's state,
    given by the operator (--capability-state), which both protocols read."""
    from fastapi.testclient import TestClient

    from env_service.app import create_app
    from env_service.config import ServiceConfig

    path = tmp_path_factory.mktemp("state") / "capability_state.json"
    path.write_text(json.dumps(golden()["guideline_state"]))
    app = create_app(ServiceConfig(capability_state_path=path))
    with TestClient(app) as http:
        yield http


def native_messages(http, task_id: str, setting: str, texts: list[str] | None = None) -> list[dict]:
    """What the `bfcl_qwen_fc` format shows the model for `texts` (default: the ground-truth
    policy's)."""
    settings = SETTINGS[setting]
    body = {"task_id": task_id, "settings": json.loads(_dump(settings))}
    created = http.post("/v1/episodes", json=body)
    assert created.status_code == 201, created.text
    reply = created.json()
    episode_id = reply["episode_id"]
    messages = list(PAPER.start(reply).messages)
    for text in texts or ground_truth_texts(load_task(task_id)):
        calls = [call_body(c) for c in PAPER.parse(text)]
        step = http.post(
            f"/v1/episodes/{episode_id}/steps", json={"content": text, "tool_calls": calls}
        )
        assert step.status_code == 200, step.text
        messages += PAPER.observation(step.json()["messages"])
        if step.json()["terminated"]:
            # The release's last message says the conversation is over (the model never
            # sees it, the episode ends); the native API ends with no message.
            messages.append({"role": "user", "content": "[CONVERSATION_COMPLETED]"})
    return messages


def wire_messages(http, task_id: str, setting: str, texts: list[str] | None = None) -> list[dict]:
    """What the wire protocol answers the release's own client with."""
    wire = WireClient(http)
    params = dict(golden()["settings"][setting])
    params.update(
        strict_tool_parser=True,
        enforce_available_tools=True,
        tool_prompt_mode="bfcl_qwen_fc",
        tool_result_mode="bfcl_tool_response",
    )
    instance_id, data = wire.create(task_id, **params)
    messages = [{"role": m["role"], "content": m["content"]} for m in data["state"]]
    for text in texts or ground_truth_texts(load_task(task_id)):
        state_ = wire.step(instance_id, text)["state"]
        messages += [{"role": m["role"], "content": m["content"]} for m in state_]
    wire.wire("/release", instance_id=instance_id)
    return messages


def _dump(settings: EpisodeSettings) -> str:
    from pydantic import TypeAdapter

    return TypeAdapter(EpisodeSettings).dump_json(settings).decode()


def check(http, ids: list[str], protocol) -> list[str]:
    return [
        problem
        for task_id in ids
        for setting in SETTINGS
        if (problem := mismatch(task_id, setting, protocol(http, task_id, setting)))
    ]


@pytest.mark.parametrize("protocol", [native_messages, wire_messages])
def test_a_sample_of_tasks_shows_the_releases_prompt(paper_service, protocol):
    problems = check(paper_service, fast_ids(), protocol)
    assert not problems, f"{len(problems)} episodes differ; first:\n" + problems[0]


@pytest.mark.slow
@pytest.mark.parametrize("protocol", [native_messages, wire_messages])
def test_all_800_tasks_show_the_releases_prompt(paper_service, protocol):
    problems = check(paper_service, task_ids(), protocol)
    assert not problems, f"{len(problems)} of 2400 episodes differ; first:\n" + problems[0]


@pytest.mark.parametrize("protocol", [native_messages, wire_messages])
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
    assert (training.prompt, training.evolution) == (want.prompt, want.evolution)


def test_the_guideline_state_selects_three_guidelines():
    """The `full` setting's state selects three tags, so the golden file holds D.4's block
    with several lines (not an empty selection that any texts would match)."""
    profile = state.release_profile(golden()["guideline_state"], "multi_turn_base")
    assert [e["tag"] for e in profile["tags"]] == [
        "state_mismatch",
        "empty_turn_model_response",
        "spurious_tool_call",
    ]
    system = golden()["full_text"]["multi_turn_miss_func_49"]["full"][0]["content"]
    assert "# Behavioral guidelines (env-evolved from recent failures):\n- [State-aware]" in system
