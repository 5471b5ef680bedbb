"""The episode driver's limits on real episodes: the generation count, the context under
each stop rule (fill: an observation that would fill it, a generation cut to the room
left; release: the history counted with the observations unclipped; a prompt too long for
one generation), and long observations clipped and marked as each format marks them."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import gt_texts
from driver_episodes import GREP_TASK, LONG_TASK, assert_sequence_is_what_the_model_saw, play

from seal.formats.registry import get_format
from seal.rollout.scripted import ScriptedGenerator
from seal.service_contract import EpisodeLimits


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
    assert sample.accuracy == 0 and sample.evaluation["steps"] == 3
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
    limits = EpisodeLimits(max_context_tokens=probe.prompt_lengths[2], context_stop="fill")
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
    limits = EpisodeLimits(max_context_tokens=probe.prompt_lengths[2] + room, context_stop="fill")
    generator = ScriptedGenerator.from_texts(tokenizer, texts, record_prompts=True)
    sample, env = play(base_url, tokenizer, GREP_TASK, generator, limits)

    assert (sample.stop_reason, sample.num_generations) == ("context_limit", 3)
    full_third = tokenizer.encode(texts[2])
    assert sample.response_ids[-room:] == full_third[:room]
    assert sample.response_mask[-room:] == [1] * room
    assert env.texts[-1] == tokenizer.decode(full_third[:room])  # sent, cut
    assert len(sample.prompt_ids) + len(sample.response_ids) == limits.max_context_tokens


@pytest.mark.parametrize(
    "limits",
    [  # its prompt has about 4950 tokens
        EpisodeLimits(max_context_tokens=4000, context_stop="fill"),
        EpisodeLimits(max_context_tokens=4000 + 4096, context_stop="release"),
    ],
)
def test_a_prompt_too_long_for_one_generation_gives_an_empty_response(
    live_service, tokenizer, limits
):
    base_url, engine = live_service
    generator = ScriptedGenerator([])
    sample, _ = play(base_url, tokenizer, GREP_TASK, generator, limits)
    assert (sample.stop_reason, sample.num_generations, generator.calls) == ("context_limit", 0, 0)
    assert sample.response_ids == sample.response_mask == [] and sample.accuracy == 0
    assert engine.stats()["live_episodes"] == 0


WHOLE = EpisodeLimits(max_observation_tokens=10**6, max_context_tokens=10**7)
"""Limits under which no observation is clipped and no context stop is near."""


def test_release_rule_stops_on_the_history_with_the_observations_unclipped(live_service, tokenizer):
    base_url = live_service[0]
    texts = gt_texts(LONG_TASK)
    whole = ScriptedGenerator.from_texts(tokenizer, texts)  # the release's raw history
    play(base_url, tokenizer, LONG_TASK, whole, WHOLE)
    clip = 300
    clipped = ScriptedGenerator.from_texts(tokenizer, texts)
    play(base_url, tokenizer, LONG_TASK, clipped, EpisodeLimits(max_observation_tokens=clip))
    # The first generation after an observation the clip shortened.
    k = next(
        i
        for i, (a, b) in enumerate(zip(whole.prompt_lengths, clipped.prompt_lengths, strict=True))
        if a != b
    )
    assert clipped.prompt_lengths[k] < whole.prompt_lengths[k]
    # Its raw history is exactly the reserve: the episode stops before it, although the
    # history the model saw is shorter.
    limits = EpisodeLimits(
        max_observation_tokens=clip, max_context_tokens=whole.prompt_lengths[k] + 4096
    )
    generator = ScriptedGenerator.from_texts(tokenizer, texts, record_prompts=True)
    sample, _ = play(base_url, tokenizer, LONG_TASK, generator, limits)
    assert (sample.stop_reason, sample.num_generations) == ("context_limit", k)
    assert generator.prompt_lengths == clipped.prompt_lengths[:k]
    assert sample.response_mask[-1] == 1  # the observation after the last reply is left out
    assert_sequence_is_what_the_model_saw(generator, sample)
    # One token more of room, and generation k is made with a whole max_new_tokens.
    limits = dataclasses.replace(limits, max_context_tokens=limits.max_context_tokens + 1)
    generator = ScriptedGenerator.from_texts(tokenizer, texts)
    sample, _ = play(base_url, tokenizer, LONG_TASK, generator, limits)
    assert sample.num_generations > k


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
