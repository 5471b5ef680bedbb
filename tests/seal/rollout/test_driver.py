"""The episode driver on real episodes: the real service over a socket, each tool format's
own rendering, scripted generators in place of a model (tests/driver_episodes.py). What
the model saw is each format's full render, token ids are kept as generated, a reply cut
at its length or malformed is handled, log-probabilities sit on generated ids.

Only the Qwen2.5 tokenizer ships; the Llama-layout formats are tested with it plus their
special tokens (the ids differ from Llama's, the token bookkeeping is the same)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import gt_texts
from driver_episodes import (
    assert_sequence_is_what_the_model_saw,
    full_render_ids,
    play,
    tokenizer_for,
)

from seal.bfcl.tasks import load_task
from seal.formats.qwen35 import EMPTY_THINKING, Qwen35Template
from seal.formats.registry import FORMATS, PAPER_QWEN, get_format
from seal.rollout.generation import Generation
from seal.rollout.scripted import ScriptedGenerator, text_generation
from seal.rollout.turn_tokens import turn_tokenizer
from seal.service_contract import EpisodeLimits


@pytest.mark.parametrize("name", list(FORMATS))
@pytest.mark.parametrize(
    "task_id",
    [
        "multi_turn_base_0",
        "multi_turn_miss_func_0",  # a held-out tool is revealed in a later turn
        "multi_turn_miss_param_0",
    ],
)
def test_every_prompt_the_model_saw_is_the_format_s_full_render(
    live_service, request, name, task_id
):
    """Token in, token out in every format: each generation continued exactly the ids of
    a full render of the conversation so far in the format's own rendering (observation
    tokens from the format; generated ids appended as returned, masked 1). Qwen3.5's
    texts reason in a line: an empty think block renders as one "\n\n" token where the
    model wrote two "\n" (tests/seal/formats/test_qwen35.py)."""
    fmt, base_url = get_format(name), live_service[0]
    tokenizer = tokenizer_for(name, request)
    end = turn_tokenizer(tokenizer, fmt).end_of_turn_id
    texts = gt_texts(task_id, fmt)
    if isinstance(fmt, Qwen35Template):
        texts = [t.replace(EMPTY_THINKING, "Next.\n" + EMPTY_THINKING[1:], 1) for t in texts]
    generator = ScriptedGenerator.from_texts(tokenizer, texts, end, record_prompts=True)
    sample, env = play(base_url, tokenizer, task_id, generator, tool_format=fmt)

    assert (sample.accuracy, sample.stop_reason, sample.num_generations) == (
        1,
        "terminated",
        len(texts),
    )
    assert env.texts == texts  # the service got the texts, the calls parsed from them
    assert_sequence_is_what_the_model_saw(generator, sample)
    for k, prompt in enumerate(generator.prompts):
        assert prompt == full_render_ids(tokenizer, fmt, env, k), f"generation {k}"
    assert sample.response_ids[-1] == end and sample.response_mask[-1] == 1
    assert sample.input_text == fmt.render(fmt.start(env.created))
    assert live_service[1].stats()["live_episodes"] == 0


@pytest.mark.parametrize(
    "task_id",
    [
        "multi_turn_base_0",
        "multi_turn_miss_func_0",  # a held-out tool is revealed in a later turn
        "multi_turn_miss_param_0",
        "multi_turn_long_context_0",
    ],
)
def test_ground_truth_episode_scores_1_and_equals_a_full_rerender(live_service, tokenizer, task_id):
    base_url, engine = live_service
    texts = gt_texts(task_id)
    generator = ScriptedGenerator.from_texts(tokenizer, texts, record_prompts=True)
    sample, env = play(base_url, tokenizer, task_id, generator)

    assert (sample.accuracy, sample.reward, sample.stop_reason) == (1, 1.0, "terminated")
    assert sample.num_generations == len(texts) == generator.calls
    assert sample.category == load_task(task_id).category and sample.task_id == task_id
    assert sample.failure_tags == sample.evaluation["failure_tags"]
    assert env.texts == texts  # the service got the texts
    assert_sequence_is_what_the_model_saw(generator, sample)
    # Canonical tokenization: the incremental ids are the full template render's.
    fmt = get_format(PAPER_QWEN)
    for k, prompt in enumerate(generator.prompts):
        assert prompt == full_render_ids(tokenizer, fmt, env, k)
    assert sample.input_text == tokenizer.decode(sample.prompt_ids)
    assert sample.output_text == tokenizer.decode(sample.response_ids)
    assert sample.output_text.endswith("Done.<|im_end|>")
    assert sample.response_logprobs is None
    assert engine.stats()["live_episodes"] == 0
    assert env.http.requests == len(texts) + 1  # create + one per step: the last evaluates


def test_non_canonical_generated_ids_are_kept_not_retokenized(live_service, tokenizer):
    """A model may write "Done." one character per token. Re-tokenizing the conversation
    would turn that into other ids than the model produced; the driver keeps its ids."""
    task_id = "multi_turn_miss_param_0"
    texts = gt_texts(task_id)
    spelled = [tokenizer.convert_tokens_to_ids(c) for c in "Done."]
    assert spelled != tokenizer.encode("Done.")
    generations = [
        Generation(spelled + [tokenizer.eos_token_id], None, "stop")
        if text == "Done."
        else text_generation(tokenizer, text)
        for text in texts
    ]
    generator = ScriptedGenerator(generations, record_prompts=True)
    sample, env = play(
        base_url=live_service[0], tokenizer=tokenizer, task_id=task_id, generator=generator
    )

    assert sample.accuracy == 1  # the service got the same text
    assert_sequence_is_what_the_model_saw(generator, sample)
    full = sample.prompt_ids + sample.response_ids
    retokenized = full_render_ids(tokenizer, get_format(PAPER_QWEN), env, len(texts))
    assert tokenizer.decode(retokenized) == tokenizer.decode(full) + "\n<|im_start|>assistant\n"
    assert retokenized[: len(full)] != full  # a re-render would have drifted


def test_length_stopped_generation_is_sent_and_its_turn_closed_unmasked(live_service, tokenizer):
    task_id = "multi_turn_miss_param_0"
    texts = gt_texts(task_id)
    cut = text_generation(tokenizer, texts[0], closed=False)  # no eos: hit max_new_tokens
    generations = [cut] + [text_generation(tokenizer, t) for t in texts[1:]]
    generator = ScriptedGenerator(generations, record_prompts=True)
    limits = EpisodeLimits(max_new_tokens=len(cut.token_ids) + 200)
    sample, env = play(live_service[0], tokenizer, task_id, generator, limits)

    assert sample.accuracy == 1  # the cut text still ran its calls
    assert env.texts[0] == texts[0]
    assert_sequence_is_what_the_model_saw(generator, sample)
    end = len(cut.token_ids)
    assert sample.response_ids[end] == tokenizer.eos_token_id  # closed by the driver
    assert sample.response_mask[end] == 0  # ... which the model did not generate
    for k, prompt in enumerate(generator.prompts):
        assert prompt == full_render_ids(tokenizer, get_format(PAPER_QWEN), env, k)


SENTINEL = Path("/tmp/seal_format_test_code_ran")
_QWEN_MALFORMED = {
    '<tool_call>\n{"name": "ls", "arguments": {"a": tru}}\n</tool_call>': "parse",
    '<tool_call>\n{"name": "ls", "arguments": {}}': "parse",  # never closed
    '<tool_call>\n{"name": "format_disk", "arguments": {}}\n</tool_call>': "unknown_tool",
    '<tool_call>\n{"name": "cd", "arguments": {}}\n</tool_call>': "missing_argument",
}
MALFORMED = {
    "bfcl_qwen_fc": {
        **_QWEN_MALFORMED,
        '<tool_call>\n{"name": "__import__(\'os\')", "arguments": {}}\n</tool_call>': "unknown_tool",
    },
    "qwen2.5": _QWEN_MALFORMED,
    "qwen3": {
        **_QWEN_MALFORMED,
        '<tool_call>{"name": "ls", "arguments": {}}</tool_call>': "parse",  # BFCL needs \n
    },
    "llama3.1": {
        '{"name": "ls", "parameters": {"a": tru}}': "parse",
        'I listed them. {"name": "ls", "parameters": {}}': "parse",  # calls after the answer
        '{"name": "format_disk", "parameters": {}}': "unknown_tool",
        '{"name": "cd", "parameters": {}}': "missing_argument",
        f'{{"name": "ls", "parameters": {{"a": __import__("pathlib").Path("{SENTINEL}").touch()}}}}': "parse",
    },
    "bfcl_qwen_fc_qwen3.5": {
        **_QWEN_MALFORMED,
        # Reasoning, then a call it never closes: the content after </think> is parsed.
        'I will list.\n</think>\n\n<tool_call>\n{"name": "ls", "arguments": {}}': "parse",
    },
    "qwen3.5": {
        "<tool_call>\n<function=ls>\n<parameter=a>\ntrue\n</parameter>\n</function>": "parse",
        "<tool_call>\n<function=ls\n<parameter=a>\ntrue\n</parameter>\n</function>\n</tool_call>": (
            "parse"  # a function header without its '>' (verl 0.9.1's parser skips it)
        ),
        "<function=ls>\n</function>": "parse",  # no <tool_call> around it
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>': "parse",  # Qwen3's JSON
        "<tool_call>\n<function=format_disk>\n</function>\n</tool_call>": "unknown_tool",
        "\n</think>\n\n<tool_call>\n<function=cd>\n</function>\n</tool_call>": "missing_argument",
    },
    # A malformed message ends the episode in this format: it comes last.
    "toolace_official_prompt": {
        "[format_disk()]": "unknown_tool",
        "[cd()]": "missing_argument",
        f"[ls(__import__('pathlib').Path('{SENTINEL}').touch())]": "parse",
    },
    "bfcl_prompt": {
        "[ls(a=True]": "parse",
        "Sure, here they are. [ls(a=True)]": "parse",  # calls after the answer
        "[format_disk()]": "unknown_tool",
        "[cd()]": "missing_argument",
        f"[ls(a=1 + __import__('pathlib').Path('{SENTINEL}').touch())]": "parse",
    },
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_malformed_output_is_a_scored_tagged_failure_and_the_episode_is_closed(
    live_service, request, name
):
    """Bad JSON or syntax, unknown tools, missing arguments, calls after the answer and
    code in the arguments: each is answered with an error, counted by kind, the episode
    plays on, is scored 0 with its tags, and is closed; nothing runs as code. Under the
    paper's rules (every format but qwen2.5) a message that would not run is answered
    with one error, and a call missing an argument runs for the backend's own error. In
    a format whose rule ends the episode at a malformed call (toolace_official_prompt),
    that message ends it, with nothing more to answer."""
    fmt, (base_url, engine) = get_format(name), live_service
    tokenizer = tokenizer_for(name, request)
    end = turn_tokenizer(tokenizer, fmt).end_of_turn_id
    task_id = "multi_turn_base_0"
    num_turns = load_task(task_id).num_turns
    ends = fmt.end_on_malformed_call
    answers = [] if ends else ["Done."] * num_turns
    texts = [*MALFORMED[name], *answers]
    generator = ScriptedGenerator.from_texts(tokenizer, texts, end, record_prompts=True)
    SENTINEL.unlink(missing_ok=True)
    sample, env = play(base_url, tokenizer, task_id, generator, tool_format=fmt)

    assert (sample.stop_reason, sample.num_generations) == ("terminated", len(texts))
    assert (sample.accuracy, sample.reward) == (0, 0.0)
    paper = fmt.prompt == "paper"
    ran = sum(k == "missing_argument" for k in MALFORMED[name].values()) if paper else 0
    # A call that ran in turn 0 makes it a turn with calls: its state is compared.
    first = "state_mismatch" if ran else "empty_turn_model_response"
    assert sample.failure_tags == [first] + ["empty_turn_model_response"] * (num_turns - 1)
    assert sample.evaluation["ended_on_malformed_call"] is ends
    expected: dict[str, int] = {}
    for kind in MALFORMED[name].values():
        expected[kind] = expected.get(kind, 0) + 1
    assert sample.evaluation["invalid_by_kind"] == expected
    assert sample.evaluation["tool_calls"] == ran
    for observation, kind in zip(env.observations, MALFORMED[name].values(), strict=False):
        if ends and kind == "parse":
            assert observation == []  # the episode ended
        elif paper and kind == "missing_argument":
            assert [m["role"] for m in observation] == ["tool"]
            assert observation[0]["content"].startswith("Error during execution: ")
        elif paper:
            assert [m["role"] for m in observation] == ["env"]
            assert observation[0]["content"].startswith("[ERROR] Invalid tool call format: ")
        else:
            assert [m["role"] for m in observation] == ["tool"]
            assert observation[0]["content"].startswith("Error: ")
    assert_sequence_is_what_the_model_saw(generator, sample)
    assert engine.stats()["live_episodes"] == 0
    assert not SENTINEL.exists()


def test_logprobs_sit_on_generated_ids_and_zero_elsewhere(live_service, tokenizer):
    task_id = "multi_turn_miss_param_0"
    generations = [text_generation(tokenizer, t) for t in gt_texts(task_id)]
    for k, g in enumerate(generations):
        g.logprobs = [-0.001 * (k + 1)] * len(g.token_ids)
    sample, _ = play(live_service[0], tokenizer, task_id, ScriptedGenerator(generations))
    assert len(sample.response_logprobs) == len(sample.response_ids)
    for lp, m in zip(sample.response_logprobs, sample.response_mask, strict=True):
        assert (lp < 0) == (m == 1)
    assert sum(lp for lp in sample.response_logprobs) == pytest.approx(
        sum(sum(g.logprobs) for g in generations)
    )
