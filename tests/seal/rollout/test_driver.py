"""The episode driver on real episodes: the real service over a socket, each tool format's
own rendering, scripted generators in place of a model.

Only the Qwen2.5 tokenizer ships; the Llama-layout formats are tested with it plus their
special tokens (the ids differ from Llama's, the token bookkeeping is the same)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from conftest import full_render, gt_texts

from seal.bfcl.tasks import load_task
from seal.formats.base import Conversation
from seal.formats.qwen35 import EMPTY_THINKING, Qwen35Template
from seal.formats.registry import FORMATS, PAPER_QWEN, get_format
from seal.rollout.driver import (
    EpisodeError,
    EpisodeSample,
    TooManyFailedEpisodes,
    play_batch,
    run_episode,
)
from seal.rollout.env_client import EnvClient, Episode
from seal.rollout.generation import Generation, GenerationError
from seal.rollout.protocol import EpisodeLimits, EpisodeSettings, EvolutionSettings
from seal.rollout.scripted import ScriptedGenerator, text_generation
from seal.rollout.turn_tokens import turn_tokenizer

LAYERS = EvolutionSettings(schema_cues=True)


def settings(limits: EpisodeLimits | None = None) -> EpisodeSettings:
    return EpisodeSettings(mode="sample", evolution=LAYERS, limits=limits or EpisodeLimits())


GREP_TASK = "multi_turn_base_0"
LONG_TASK = "multi_turn_long_context_0"  # a grep answer of several hundred tokens


def tokenizer_for(name: str, request) -> object:
    """The shared tokenizer fixture a format needs: `llama_tokenizer` for Llama's layout,
    `qwen35_tokenizer` for Qwen3.5's template."""
    fmt = get_format(name)
    if isinstance(fmt, Qwen35Template):
        return request.getfixturevalue("qwen35_tokenizer")
    uses_llama = fmt.end_of_turn == "<|eot_id|>"
    return request.getfixturevalue("llama_tokenizer" if uses_llama else "tokenizer")


class RecordingEnv(EnvClient):
    """EnvClient whose episodes keep what the service sent and got."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.created: dict = {}
        self.texts: list[str] = []
        self.observations: list[list[dict]] = []

    def episode(self, task_id, settings=None):
        return RecordingEpisode(self, task_id, settings or EpisodeSettings())


class RecordingEpisode(Episode):
    async def __aenter__(self):
        await super().__aenter__()
        self.env.created = self.created
        return self

    async def step(self, content, calls):
        reply = await super().step(content, calls)
        self.env.texts.append(content)
        self.env.observations.append(reply.messages)
        return reply


def play(base_url, tokenizer, task_id, generator, limits=None, tool_format=None):
    tool_format = tool_format or get_format(PAPER_QWEN)

    async def main():
        async with RecordingEnv(base_url) as env:
            episode_settings = dataclasses.replace(
                settings(limits),
                prompt=tool_format.prompt,
                end_on_malformed_call=tool_format.end_on_malformed_call,
            )
            sample = await run_episode(
                env, generator, tokenizer, task_id, episode_settings, tool_format=tool_format
            )
            return sample, env

    return asyncio.run(main())


def conversation_before(fmt, env: RecordingEnv, k: int) -> Conversation:
    """The conversation generation k (0-based) continued: the first messages, then each
    earlier generation and the observation that followed it."""
    conversation = fmt.start(env.created)
    for text, observation in zip(env.texts[:k], env.observations[:k], strict=True):
        conversation.messages += [fmt.assistant_message(text), *fmt.observation(observation)]
    return conversation


def full_render_ids(tokenizer, fmt, env, k) -> list[int]:
    conversation = conversation_before(fmt, env, k)
    return tokenizer.encode(full_render(fmt, conversation), add_special_tokens=False)


def generated_spans(generator: ScriptedGenerator, sample: EpisodeSample):
    """(start, ids) of each generation inside the response."""
    offset = len(sample.prompt_ids)
    return [
        (start - offset, generator.generations[k].token_ids)
        for k, start in enumerate(generator.prompt_lengths)
    ]


def assert_sequence_is_what_the_model_saw(generator, sample):
    full = sample.prompt_ids + sample.response_ids
    assert len(sample.response_mask) == len(sample.response_ids)
    expected_mask = [0] * len(sample.response_ids)
    for k, (start, ids) in enumerate(generated_spans(generator, sample)):
        assert sample.response_ids[start : start + len(ids)] == ids  # kept as returned
        assert generator.prompts[k] == full[: len(sample.prompt_ids) + start]  # a prefix
        expected_mask[start : start + len(ids)] = [1] * len(ids)
    assert sample.response_mask == expected_mask
    last_start, last_ids = generated_spans(generator, sample)[-1]
    assert last_start + len(last_ids) == len(sample.response_ids)  # ends with the last generation


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
    assert sample.failure_tags == sample.report["failure_tags"]
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


def test_max_generations_stops_after_the_last_generation(live_service, tokenizer):
    generator = ScriptedGenerator.from_texts(tokenizer, gt_texts(GREP_TASK), record_prompts=True)
    sample, env = play(
        live_service[0], tokenizer, GREP_TASK, generator, EpisodeLimits(max_generations=3)
    )
    assert (sample.stop_reason, sample.num_generations, generator.calls) == (
        "max_generations",
        3,
        3,
    )
    assert len(env.texts) == 3  # the third text still reached the service
    assert sample.accuracy == 0 and sample.report["steps"] == 3
    assert_sequence_is_what_the_model_saw(generator, sample)
    assert sample.response_ids[-1] == tokenizer.eos_token_id and sample.response_mask[-1] == 1


def context_probe(base_url, tokenizer) -> ScriptedGenerator:
    """The ground truth of GREP_TASK played without limits: where each generation starts."""
    probe = ScriptedGenerator.from_texts(tokenizer, gt_texts(GREP_TASK))
    play(base_url, tokenizer, GREP_TASK, probe)
    return probe


def test_an_observation_that_would_fill_the_context_is_not_appended(live_service, tokenizer):
    base_url, engine = live_service
    probe = context_probe(base_url, tokenizer)
    # The third generation would start at probe.prompt_lengths[2]: one token short.
    limits = EpisodeLimits(max_context_tokens=probe.prompt_lengths[2])
    generator = ScriptedGenerator.from_texts(tokenizer, gt_texts(GREP_TASK), record_prompts=True)
    sample, env = play(base_url, tokenizer, GREP_TASK, generator, limits)

    assert (sample.stop_reason, sample.num_generations) == ("context_limit", 2)
    assert len(env.texts) == 2  # both generations reached the service
    assert_sequence_is_what_the_model_saw(generator, sample)
    assert generator.prompt_lengths == probe.prompt_lengths[:2]
    assert sample.response_mask[-1] == 1  # ends with the second generation
    assert engine.stats()["live_episodes"] == 0


def test_a_generation_is_cut_to_the_room_left_in_the_context(live_service, tokenizer):
    base_url, _ = live_service
    probe = context_probe(base_url, tokenizer)
    texts = gt_texts(GREP_TASK)
    room = 5  # for the third generation, a tool call of about 30 tokens
    limits = EpisodeLimits(max_context_tokens=probe.prompt_lengths[2] + room)
    generator = ScriptedGenerator.from_texts(tokenizer, texts, record_prompts=True)
    sample, env = play(base_url, tokenizer, GREP_TASK, generator, limits)

    assert (sample.stop_reason, sample.num_generations) == ("context_limit", 3)
    full_third = tokenizer.encode(texts[2])
    assert sample.response_ids[-room:] == full_third[:room]
    assert sample.response_mask[-room:] == [1] * room
    assert env.texts[-1] == tokenizer.decode(full_third[:room])  # sent, cut
    assert len(sample.prompt_ids) + len(sample.response_ids) == limits.max_context_tokens


def test_a_prompt_too_long_for_one_generation_gives_an_empty_response(live_service, tokenizer):
    base_url, engine = live_service
    generator = ScriptedGenerator([])
    limits = EpisodeLimits(max_context_tokens=4000)  # its prompt has about 4950 tokens
    sample, _ = play(base_url, tokenizer, GREP_TASK, generator, limits)
    assert (sample.stop_reason, sample.num_generations, generator.calls) == ("context_limit", 0, 0)
    assert sample.response_ids == sample.response_mask == [] and sample.accuracy == 0
    assert engine.stats()["live_episodes"] == 0


# Each format's clip: the rich prompt's exact token clip, and the paper's (its release's
# trainer's: a share of the characters; it keeps nothing under 100 tokens, so a wider limit).
CLIPS = {"qwen2.5": (60, "\n... [truncated"), "bfcl_qwen_fc": (300, "... truncate ...")}


@pytest.mark.parametrize("name", list(CLIPS))
def test_long_observations_are_clipped_and_marked(live_service, tokenizer, name):
    (task_id, (limit, marker)), fmt = (LONG_TASK, CLIPS[name]), get_format(name)
    texts = gt_texts(task_id, fmt)
    generator = ScriptedGenerator.from_texts(tokenizer, texts, record_prompts=True)
    limits = EpisodeLimits(max_observation_tokens=limit)
    sample, env = play(live_service[0], tokenizer, task_id, generator, limits, tool_format=fmt)
    assert sample.accuracy == 1
    assert_sequence_is_what_the_model_saw(generator, sample)
    observations = [fmt.observation(obs) for obs in env.observations]
    grep_answer = next(
        m["content"] for obs in observations for m in obs if "matching_lines" in m["content"]
    )
    assert len(tokenizer.encode(grep_answer)) > 500
    assert grep_answer not in sample.output_text
    clipped = [
        part.split("<|im_end|>")[0]
        for part in sample.output_text.split("<|im_start|>user\n")[1:]
        if marker in part
    ]
    assert len(clipped) >= 1
    for content in clipped:
        assert len(tokenizer.encode(content)) <= limit
        kept = content.split(marker)[0]
        assert any(m["content"].startswith(kept) for obs in observations for m in obs)
    seen = [m["content"] for obs in observations[: sample.num_generations - 1] for m in obs]
    short = [c for c in seen if len(tokenizer.encode(c)) <= limit]
    assert short and all(c in sample.output_text for c in short)  # not clipped


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
def test_malformed_output_is_a_scored_tagged_failure_and_the_episode_is_released(
    live_service, request, name
):
    """Bad JSON or syntax, unknown tools, missing arguments, calls after the answer and
    code in the arguments: each is answered with an error, counted by kind, the episode
    plays on, is scored 0 with its tags, and is released; nothing runs as code. Under the
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
    assert sample.report["ended_on_malformed_call"] is ends
    expected: dict[str, int] = {}
    for kind in MALFORMED[name].values():
        expected[kind] = expected.get(kind, 0) + 1
    assert sample.report["invalid_by_kind"] == expected
    assert sample.report["tool_calls"] == ran
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


class FailingGenerator(ScriptedGenerator):
    """Fails on call number `fail_at` (1-based) with `error`."""

    def __init__(self, generations, fail_at, error):
        super().__init__(generations)
        self.fail_at, self.error = fail_at, error

    async def generate(self, prompt_ids, sampling):
        if self.calls + 1 == self.fail_at:
            raise self.error
        return await super().generate(prompt_ids, sampling)


@pytest.mark.parametrize(
    "make_generator, cause",
    [
        (
            lambda gens: FailingGenerator(gens, 2, GenerationError("CUDA out of memory")),
            "out of memory",
        ),
        (
            lambda gens: ScriptedGenerator([gens[0], Generation([], None, "stop")]),
            "empty generation",
        ),
        (
            lambda gens: ScriptedGenerator([gens[0], Generation(gens[1].token_ids, [0.0], "stop")]),
            "log-probabilities for",
        ),
    ],
    ids=["raises", "empty", "logprob-count"],
)
def test_generator_failure_names_the_task_and_releases_the_episode(
    live_service, tokenizer, make_generator, cause
):
    base_url, engine = live_service
    generator = make_generator([text_generation(tokenizer, t) for t in gt_texts(GREP_TASK)])
    with pytest.raises(
        EpisodeError, match=rf"task {GREP_TASK} .* after 1 generations: .*{cause}"
    ) as info:
        play(base_url, tokenizer, GREP_TASK, generator)
    assert isinstance(info.value.__cause__, GenerationError)
    assert engine.stats()["live_episodes"] == 0
    assert engine.stats()["released"] == 1


def test_unknown_task_is_an_error_naming_it(live_service, tokenizer):
    with pytest.raises(EpisodeError, match="multi_turn_base_999"):
        play(live_service[0], tokenizer, "multi_turn_base_999", ScriptedGenerator([]))


class Stuck(ScriptedGenerator):
    async def generate(self, prompt_ids, sampling):
        await asyncio.sleep(3600)


class LostCreateReply(EnvClient):
    """The service creates the episode but its reply never arrives."""

    async def call(self, method, path, *args, **kwargs):
        reply = await super().call(method, path, *args, **kwargs)
        if (method, path) == ("POST", "/v1/episodes"):
            await asyncio.sleep(3600)
        return reply


@pytest.mark.parametrize(
    "env_cls, generator", [(EnvClient, Stuck([])), (LostCreateReply, ScriptedGenerator([]))]
)
def test_a_cancelled_episode_is_released(live_service, tokenizer, env_cls, generator):
    base_url, engine = live_service

    async def main():
        async with env_cls(base_url) as env:
            episode = run_episode(
                env, generator, tokenizer, GREP_TASK, settings(), tool_format=get_format(PAPER_QWEN)
            )
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(episode, timeout=0.5)

    asyncio.run(main())
    assert engine.stats()["created"] == 1 and engine.stats()["live_episodes"] == 0


def test_concurrent_episodes_share_one_client(live_service, tokenizer):
    task_ids = [f"multi_turn_base_{i}" for i in range(8)]

    async def main():
        async with EnvClient(live_service[0]) as env:
            return await asyncio.gather(
                *(
                    run_episode(
                        env,
                        ScriptedGenerator.from_texts(tokenizer, gt_texts(tid)),
                        tokenizer,
                        tid,
                        settings(),
                        tool_format=get_format(PAPER_QWEN),
                    )
                    for tid in task_ids
                )
            )

    samples = asyncio.run(main())
    assert [s.task_id for s in samples] == task_ids
    assert [s.accuracy for s in samples] == [1] * 8


def fake_sample(task_id: str) -> EpisodeSample:
    return EpisodeSample(
        task_id, "multi_turn_base", [1], [2], [1], None, 1.0, 1, 1.0, ["pass"], None, {}, 1,
        "terminated", {}, "", "",
    )  # fmt: skip


def test_a_batch_retries_each_failed_episode_once_and_tolerates_a_small_share():
    calls: dict[str, int] = {}
    fail_times = {"flaky": 1, "broken": 2}  # how often each task fails before succeeding

    async def play(task_id):
        calls[task_id] = calls.get(task_id, 0) + 1
        if calls[task_id] <= fail_times.get(task_id, 0):
            raise EpisodeError(f"task {task_id}: service gone")
        return fake_sample(task_id)

    tasks = ["flaky", "broken"] + [f"ok{i}" for i in range(18)]
    samples, errors = asyncio.run(
        play_batch(play, tasks, max_failed_share=0.05, what="sample", progress=False)
    )
    assert sorted(s.task_id for s in samples) == sorted(set(tasks) - {"broken"})
    assert errors == ["task broken: service gone"]
    assert calls["flaky"] == 2 and calls["broken"] == 2 and calls["ok0"] == 1

    calls.clear()
    with pytest.raises(TooManyFailedEpisodes, match="1 of 10 episodes failed twice"):
        asyncio.run(
            play_batch(play, tasks[1:11], max_failed_share=0.05, what="sample", progress=False)
        )


def test_a_batch_s_progress_bar_in_a_log_ends_at_its_total(capsys):
    """Written to a file (a run's log), the bar's last line shows every episode done;
    it used to be cleared at the end, so a log stopped at whatever it showed last."""

    async def play(task_id):
        await asyncio.sleep(0.01 * int(task_id[-1]))
        return fake_sample(task_id)

    tasks = [f"ok{i % 10}" for i in range(16)]
    asyncio.run(play_batch(play, tasks, max_failed_share=0.05, what="sample"))
    err = capsys.readouterr().err  # not a terminal, as a log file
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("sample: 100%") and "16/16" in last, err
