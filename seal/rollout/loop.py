"""The one episode loop: reply, step, observe, until the service or the context stops it.

Training's token-id turns (seal.rollout.driver), endpoint scoring's chat-message turns
(seal.eval.endpoint_episode) and scripted policies (seal.rollout.scripted) differ in how a reply is
made and how the context is counted; they share this loop and its stop rule
(`EpisodeLimits.context_stop`), which is here in code once (the rules and why:
docs/design.md, "Loss mask").
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from seal.formats.base import ParsedCalls, ToolFormat
from seal.rollout.env_client import RemoteEpisode
from seal.service_contract import EpisodeLimits

StopReason = Literal["terminated", "max_generations", "context_limit"]
"""Why a model's episode stopped: the service ended it (at max_generations it marks it
truncated), or the context stop rule gave the next reply no room."""


PARSE_IN_THREAD_CHARS = 16_384
"""A longer reply is parsed in a thread. A parse is linear in the reply but some are slow
per character (Python's own parser under ToolACE's and bfcl-eval's: up to a second for
262,144 characters, docs/benchmarks.md, "Parsers"), and other episodes share this event
loop: a thread hands it back between the parse's Python steps (not inside one long C
call). A reply of a few thousand characters parses in a millisecond or less."""


async def parse_reply(fmt: ToolFormat, text: str, tools: Sequence[dict]) -> ParsedCalls:
    """`fmt.parse(text, tools)`, in a thread for a reply over PARSE_IN_THREAD_CHARS."""
    if len(text) <= PARSE_IN_THREAD_CHARS:
        return fmt.parse(text, tools)
    return await asyncio.to_thread(fmt.parse, text, tools)


@dataclass(frozen=True)
class ContextSize:
    """Tokens of the context a reply is conditioned on, counted two ways."""

    tokens: int
    """As the model sees it: every observation clipped to `max_observation_tokens`."""
    unclipped: int
    """The same with every observation whole: the original release's `raw` context, which
    its stop rule counts."""


def generation_budget(limits: EpisodeLimits, context: ContextSize) -> int:
    """`max_new_tokens` of the next reply after `context`; 0 when the episode stops there
    (`context_limit`). `release`: none once the unclipped context reaches max_context_tokens
    - max_new_tokens, else a whole max_new_tokens. `fill`: the room left up to
    max_context_tokens, at most max_new_tokens."""
    reserve = limits.max_context_tokens - limits.max_new_tokens
    if limits.context_stop == "release" and context.unclipped >= reserve:
        return 0
    return max(0, min(limits.max_new_tokens, limits.max_context_tokens - context.tokens))


class Turns(Protocol):
    """One episode's context as a policy sees it, grown one reply and one observation at
    a time (token ids, chat messages or a script)."""

    format: ToolFormat
    """Parses the replies into the calls the service is sent."""

    @property
    def context_size(self) -> ContextSize:
        """The context the next reply is conditioned on."""
        ...

    async def reply(self, budget: int) -> str | None:
        """The policy's next reply, at most `budget` tokens, as the text the service is
        sent; None when a script has no more (a model always replies)."""
        ...

    def observe(self, messages: list[dict], max_tokens: int) -> ContextSize:
        """Make ready the observation of the service's `messages` after the last reply,
        each content clipped to `max_tokens`; returns the context the next reply would
        have after it (the last reply included)."""
        ...

    def keep(self) -> None:
        """Append the observation made ready: the next reply follows it."""
        ...

    def end(self, messages: list[dict]) -> None:
        """The service ended the episode with `messages` (they condition no reply)."""
        ...


async def play(episode: RemoteEpisode, turns: Turns, limits: EpisodeLimits) -> StopReason | None:
    """Play `episode` until it stops; None when a script ran out of replies first."""
    while True:
        budget = generation_budget(limits, turns.context_size)
        if budget < 1:
            return "context_limit"
        text = await turns.reply(budget)
        if text is None:
            return None
        step = await episode.step(text, await parse_reply(turns.format, text, episode.tools))
        if step.terminated:
            turns.end(step.messages)
            return "max_generations" if step.truncated else "terminated"
        following = turns.observe(step.messages, limits.max_observation_tokens)
        # An observation no reply would follow conditions nothing: the episode ends without
        # it (the release keeps it, stops, and drops it again before training).
        if generation_budget(limits, following) < 1:
            return "context_limit"
        turns.keep()
