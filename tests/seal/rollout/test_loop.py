"""The one episode loop and its stop rule: a fake episode drives the loop itself, and the
real service drives training's, endpoint scoring's and a script's entry points, which must
all play through the loop and stop for the same reasons after the same steps."""

from __future__ import annotations

import asyncio

import pytest
from conftest import gt_texts

from seal.eval.chat_endpoint import Completion
from seal.eval.endpoint_episode import Prompting
from seal.eval.endpoint_episode import play_endpoint_episode as score_episode
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout import loop
from seal.rollout.driver import run_episode as train_episode
from seal.rollout.env_client import EnvClient, StepReply
from seal.rollout.scripted import ScriptedGenerator, run_scripted_episode
from seal.rollout.turn_tokens import TextTokens
from seal.service_contract import EpisodeLimits, EpisodeSettings

# --- the loop itself, driven by a fake episode and fake turns -----------------------------


class FakeEpisode:
    """Answers each step with the next of `replies`."""

    tools: list[dict] = []

    def __init__(self, replies: list[StepReply]):
        self.replies, self.texts = list(replies), []

    async def step(self, content, calls):
        self.texts.append(content)
        return self.replies.pop(0)


class FakeTurns:
    """Each reply adds `reply_tokens` to the context, each observation `observation_tokens`
    (`clipped_out` more when counted unclipped)."""

    format = get_format(PAPER_QWEN)

    def __init__(
        self,
        used: int,
        reply_tokens: int,
        observation_tokens: int,
        replies: int = 99,
        clipped_out: int = 0,
    ):
        self.used, self.reply_tokens, self.observation_tokens = (
            used,
            reply_tokens,
            observation_tokens,
        )
        self.unclipped, self.clipped_out = used, clipped_out
        self.left, self.budgets, self.kept, self.ended = replies, [], 0, None

    @property
    def context_size(self):
        return loop.ContextSize(self.used, self.unclipped)

    async def reply(self, budget):
        if not self.left:
            return None
        self.left -= 1
        self.budgets.append(budget)
        self.used += self.reply_tokens
        self.unclipped += self.reply_tokens
        return "a reply"

    def observe(self, messages, max_tokens):
        added = self.observation_tokens
        return loop.ContextSize(self.used + added, self.unclipped + added + self.clipped_out)

    def keep(self):
        self.used += self.observation_tokens
        self.unclipped += self.observation_tokens + self.clipped_out
        self.kept += 1

    def end(self, messages):
        self.ended = messages


GO_ON = StepReply([{"role": "tool", "content": "x"}], terminated=False, truncated=False)
LIMITS = EpisodeLimits(max_context_tokens=100, max_new_tokens=30, context_stop="fill")
RELEASE = EpisodeLimits(max_context_tokens=100, max_new_tokens=30, context_stop="release")


def run(turns, replies, limits=LIMITS):
    episode = FakeEpisode(replies)
    return asyncio.run(loop.play(episode, turns, limits)), episode


def test_the_service_ending_the_episode_stops_it_and_its_last_messages_are_handed_over():
    last = [{"role": "user", "content": "bye"}]
    turns = FakeTurns(used=10, reply_tokens=5, observation_tokens=5)
    stop, episode = run(turns, [GO_ON, StepReply(last, terminated=True, truncated=False)])
    assert (stop, len(episode.texts), turns.kept, turns.ended) == ("terminated", 2, 1, last)
    turns = FakeTurns(used=10, reply_tokens=5, observation_tokens=5)
    stop, _ = run(turns, [GO_ON, StepReply([], terminated=True, truncated=True)])
    assert stop == "max_generations"


def test_each_reply_gets_the_room_left_at_most_max_new_tokens():
    turns = FakeTurns(used=10, reply_tokens=20, observation_tokens=20)
    # 10 -> reply 30 -> obs 50 -> reply 70 -> obs 90 -> reply (budget 10) 110: no obs room.
    stop, episode = run(turns, [GO_ON] * 5)
    assert turns.budgets == [30, 30, 10] and turns.kept == 2
    assert (stop, len(episode.texts)) == ("context_limit", 3)


def test_an_observation_that_leaves_no_room_is_not_kept():
    # 10 + 40 reply + 49 observation = 99 < 100: kept; one token more is not.
    turns = FakeTurns(used=10, reply_tokens=40, observation_tokens=49)
    _, episode = run(turns, [GO_ON, StepReply([], terminated=True, truncated=False)])
    assert turns.kept == 1
    turns = FakeTurns(used=10, reply_tokens=40, observation_tokens=50)
    stop, episode = run(turns, [GO_ON] * 3)
    assert (stop, len(episode.texts), turns.kept) == ("context_limit", 1, 0)


def test_a_full_context_stops_before_any_reply_and_a_script_s_end_stops_it():
    turns = FakeTurns(used=100, reply_tokens=1, observation_tokens=1)
    stop, episode = run(turns, [GO_ON])
    assert (stop, episode.texts, turns.budgets) == ("context_limit", [], [])
    turns = FakeTurns(used=0, reply_tokens=0, observation_tokens=0, replies=2)
    stop, episode = run(turns, [GO_ON] * 3)
    assert (stop, len(episode.texts)) == (None, 2)


def test_release_rule_stops_before_a_reply_once_the_history_reaches_the_reserve():
    # reserve 100 - 30 = 70; every reply may use 30. 10 -> reply 30 -> obs 50 -> reply 70
    # -> obs 90: no reply would follow it, so it is not kept (the fill rule went on above).
    turns = FakeTurns(used=10, reply_tokens=20, observation_tokens=20)
    stop, episode = run(turns, [GO_ON] * 5, RELEASE)
    assert turns.budgets == [30, 30] and turns.kept == 1
    assert (stop, len(episode.texts)) == ("context_limit", 2)
    # Exactly at the reserve stops; one token under it does not.
    turns = FakeTurns(used=39, reply_tokens=30, observation_tokens=1)
    stop, episode = run(turns, [GO_ON] * 3, RELEASE)
    assert (stop, len(episode.texts), turns.kept) == ("context_limit", 1, 0)
    turns = FakeTurns(used=39, reply_tokens=30, observation_tokens=0)
    _, episode = run(turns, [GO_ON, StepReply([], terminated=True, truncated=False)], RELEASE)
    assert turns.kept == 1 and turns.budgets == [30, 30]
    # A prompt at the reserve gets no reply; the fill rule gives it the room left.
    stop, episode = run(FakeTurns(used=70, reply_tokens=1, observation_tokens=1), [], RELEASE)
    assert (stop, episode.texts) == ("context_limit", [])
    turns = FakeTurns(used=70, reply_tokens=1, observation_tokens=1, replies=1)
    assert run(turns, [GO_ON])[0] is None and turns.budgets == [30]


def test_release_rule_counts_the_observations_unclipped():
    # Each observation keeps 5 tokens of 35: unclipped 10 -> 15 -> obs 50 -> 55 -> obs 90.
    turns = FakeTurns(used=10, reply_tokens=5, observation_tokens=5, clipped_out=30)
    stop, episode = run(turns, [GO_ON] * 3, RELEASE)
    assert (stop, len(episode.texts), turns.kept) == ("context_limit", 2, 1)
    assert turns.used == 25  # what the model saw was far from the reserve
    # Counted clipped, or under the fill rule, the episode runs to its end.
    done = StepReply([], terminated=True, truncated=False)
    for limits, clipped_out in ((RELEASE, 0), (LIMITS, 30)):
        turns = FakeTurns(used=10, reply_tokens=5, observation_tokens=5, clipped_out=clipped_out)
        stop, episode = run(turns, [GO_ON] * 4 + [done], limits)
        assert (stop, len(episode.texts), turns.kept) == ("terminated", 5, 4)


# --- the three entry points through the real service --------------------------------------

TASK = "multi_turn_base_0"
LONG_TASK = "multi_turn_long_context_0"  # a grep answer of several hundred tokens
FORMAT = get_format(PAPER_QWEN)


class ScriptedChat:
    """A chat endpoint that answers with `texts` in order."""

    def __init__(self, texts: list[str]):
        self.texts = list(texts)

    async def complete(self, messages, what, budget):
        return Completion(self.texts.pop(0), "stop")


@pytest.fixture
def plays(monkeypatch):
    """(turn kind, stop reason, steps sent) of each episode played through `loop.play`."""
    seen: list[tuple[str, str | None, int]] = []
    real = loop.play

    async def spy(episode, turns, limits):
        stop = await real(episode, turns, limits)
        seen.append((type(turns).__name__, stop, episode.steps))
        return stop

    monkeypatch.setattr(loop, "play", spy)
    return seen


def scoring_settings(limits: EpisodeLimits) -> EpisodeSettings:
    """Endpoint scoring's settings (seal.eval.endpoint_episode.play_endpoint_episode), for all."""
    return EpisodeSettings(
        mode="validate",
        prompt=FORMAT.prompt,
        end_on_malformed_call=FORMAT.end_on_malformed_call,
        limits=limits,
    )


def play_each_kind(
    base_url, tokenizer, limits: EpisodeLimits, scripted: bool, task: str = TASK
) -> tuple:
    """The ground truth of `task` played as training, as endpoint scoring and (if
    `scripted`) as a script, under `limits`; what each entry point reports."""
    texts, settings = gt_texts(task), scoring_settings(limits)

    async def main():
        async with EnvClient(base_url) as env:
            generator = ScriptedGenerator.from_texts(tokenizer, texts)
            sample = await train_episode(
                env, generator, tokenizer, task, settings, tool_format=FORMAT
            )
            chat = ScriptedChat(texts)
            prompting = Prompting(FORMAT)
            report = await score_episode(env, chat, TextTokens(tokenizer), task, limits, prompting)
            if scripted:
                await run_scripted_episode(env, task, [texts], settings, tool_format=FORMAT)
        return sample, report

    return asyncio.run(main())


def test_every_entry_point_plays_the_one_loop_and_stops_alike(live_service, tokenizer, plays):
    base_url = live_service[0]
    probe = ScriptedGenerator.from_texts(tokenizer, gt_texts(TASK))
    asyncio.run(_probe(base_url, tokenizer, probe))  # where each reply starts, unlimited
    cases = [
        (EpisodeLimits(), True, "terminated"),
        (EpisodeLimits(max_generations=3), True, "max_generations"),
        # The third reply would start one token short of the context: its observation
        # before it does not fit.
        (EpisodeLimits(max_context_tokens=probe.prompt_lengths[2], context_stop="fill"),
         False, "context_limit"),
        (EpisodeLimits(max_context_tokens=probe.prompt_lengths[0], context_stop="fill"),
         False, "context_limit"),
        # The release's rule: the third reply's history is the reserve.
        (EpisodeLimits(max_context_tokens=probe.prompt_lengths[2] + 4096), False,
         "context_limit"),
        (EpisodeLimits(max_context_tokens=probe.prompt_lengths[0] + 4096), False,
         "context_limit"),
    ]  # fmt: skip
    for limits, scripted, reason in cases:
        plays.clear()
        sample, report = play_each_kind(base_url, tokenizer, limits, scripted)
        kinds = ["TokenTurns", "MessageTurns"] + ["ScriptedTurns"] * scripted
        assert [kind for kind, _, _ in plays] == kinds, limits
        assert {(stop, steps) for _, stop, steps in plays} == {(reason, sample.num_generations)}
        assert sample.stop_reason == report["stop_reason"] == reason
        assert sample.evaluation["steps"] == report["steps"] == sample.num_generations
        # Both count the same context: the driver's sequence at the stop is the scored
        # conversation's tokens with the last reply, plus the end-of-turn id that closed it.
        closing = 1 if sample.num_generations else 0
        assert len(sample.prompt_ids) + len(sample.response_ids) == (
            report["context_tokens"] + closing
        )
    assert sample.num_generations == 0  # the last case: no room for a first reply


def test_both_model_turns_stop_on_the_same_unclipped_history(live_service, tokenizer, plays):
    """The release's rule through training's and endpoint scoring's turns, where a clip
    made what the model saw shorter than the history the rule counts."""
    base_url, clip = live_service[0], 300
    whole, clipped = (ScriptedGenerator.from_texts(tokenizer, gt_texts(LONG_TASK)) for _ in "ab")
    unlimited = EpisodeLimits(max_observation_tokens=10**6, max_context_tokens=10**7)
    asyncio.run(_probe(base_url, tokenizer, whole, LONG_TASK, unlimited))
    asyncio.run(
        _probe(base_url, tokenizer, clipped, LONG_TASK, EpisodeLimits(max_observation_tokens=clip))
    )
    pairs = list(zip(whole.prompt_lengths, clipped.prompt_lengths, strict=True))
    k = next(i for i, (a, b) in enumerate(pairs) if a != b)
    limits = EpisodeLimits(max_observation_tokens=clip, max_context_tokens=pairs[k][0] + 4096)
    plays.clear()
    sample, report = play_each_kind(base_url, tokenizer, limits, False, LONG_TASK)
    assert [(kind, stop, steps) for kind, stop, steps in plays] == [
        ("TokenTurns", "context_limit", k),
        ("MessageTurns", "context_limit", k),
    ]
    assert report["clipped_observations"] > 0


async def _probe(base_url, tokenizer, probe, task=TASK, limits=None):
    async with EnvClient(base_url) as env:
        settings = scoring_settings(limits or EpisodeLimits())
        await train_episode(env, probe, tokenizer, task, settings, tool_format=FORMAT)


# --- a long reply's parse leaves the loop to the other episodes -----------------------------


async def _worst_tick_while(parse) -> tuple[float, float]:
    """(the parse's seconds, the longest a 1 ms sleep of another coroutine took meanwhile)."""
    done, ticks = asyncio.Event(), []

    async def other_episode():
        while not done.is_set():
            started = asyncio.get_running_loop().time()
            await asyncio.sleep(0.001)
            ticks.append(asyncio.get_running_loop().time() - started)

    task = asyncio.create_task(other_episode())
    await asyncio.sleep(0.01)
    started = asyncio.get_running_loop().time()
    calls = await parse()
    took = asyncio.get_running_loop().time() - started
    done.set()
    await task
    assert len(calls) == 29_127
    return took, max(ticks)


def test_a_long_reply_is_parsed_beside_the_other_episodes():
    """ToolACE's parse of 262,144 characters of call lists takes a second or more; in
    a thread the loop's other coroutines run between its steps (without: not once)."""
    fmt = get_format("toolace_official_prompt")
    text = "[f(a=1)] " * (262_144 // 9)
    assert len(text) > loop.PARSE_IN_THREAD_CHARS
    took, worst = asyncio.run(_worst_tick_while(lambda: loop.parse_reply(fmt, text, [])))
    assert worst < took / 4, (worst, took)
    short = "[f(a=1)]"
    assert asyncio.run(loop.parse_reply(fmt, short, [])) == fmt.parse(short)
