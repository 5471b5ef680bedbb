"""The multi-turn episode driver: one BFCL episode as one training sample.

`run_episode` plays the one loop (seal.rollout.loop) with token-id turns through the
service's episode lifecycle (seal.rollout.env_client.RemoteEpisode), and returns the token
sequence the model was conditioned on, its loss mask and the evaluation. Both trainers
call it; only the `Generator` differs. Generated ids are kept as returned (never
re-tokenized): the token rules are in docs/design.md, "Loss mask".
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tqdm.asyncio import tqdm_asyncio

from seal.formats.base import Conversation, ToolFormat
from seal.rollout import loop
from seal.rollout.env_client import EnvClient
from seal.rollout.generation import Generation, GenerationError, Generator, SamplingParams
from seal.rollout.loop import ContextSize, StopReason
from seal.rollout.turn_tokens import TurnTokenizer, turn_tokenizer
from seal.service_contract import EpisodeSettings

log = logging.getLogger(__name__)


@dataclass
class EpisodeSample:
    """One finished episode: the token sequence, its mask and the service's verdict."""

    task_id: str
    category: str
    prompt_ids: list[int]
    """The first messages (system with tool signatures, first question) rendered with
    the generation prompt."""
    response_ids: list[int]
    """Everything after the prompt: generations and observations, in order."""
    response_mask: list[int]
    """1 on generated ids, 0 on observations and template tokens; len = response_ids."""
    response_logprobs: list[float] | None
    """The generator's log-probability of each generated id, 0.0 elsewhere; None when
    the generator returns none."""
    reward: float
    accuracy: int
    progress: float
    failure_tags: list[str]
    """One diagnosis tag per ground-truth turn."""
    paper_label: str | None
    """The failed episode's label in the paper's Table 5 (None when passed; see
    seal.service_contract.Evaluation)."""
    interface: dict
    """The training-time interface the episode was given (the create reply's
    `interface`: layers on, guidelines shown; seal.service_contract.EpisodeInterface)."""
    num_generations: int
    stop_reason: StopReason
    evaluation: dict
    """The service's full evaluation of the episode."""
    input_text: str
    """The rendered prompt, i.e. prompt_ids decoded with special tokens (for logs and
    validation records)."""
    output_text: str
    """response_ids decoded, special tokens kept."""


class EpisodeError(RuntimeError):
    """An episode failed (environment or generator); the cause is chained. There is
    no partial sample: a failed episode must not be trained on."""


class PromptTooLong(ValueError):
    """The first prompt exceeds the caller's prompt limit (verl's prompt tensor). Found
    before the first generation, and not retried: the same task gives the same prompt."""


class TooManyFailedEpisodes(RuntimeError):
    """More of a batch's episodes failed than the run tolerates."""


async def retry_once(
    play: Callable[..., Awaitable[EpisodeSample]], *args, **kwargs
) -> EpisodeSample:
    """`play(*args, **kwargs)`, and once more if it raises EpisodeError (a service
    restart, a generation error); the second EpisodeError is raised. Both trainers retry
    an episode so."""
    try:
        return await play(*args, **kwargs)
    except EpisodeError as first:
        log.warning("%s; retrying the episode once", first)
    return await play(*args, **kwargs)


async def play_batch(
    play: Callable[[str], Awaitable[EpisodeSample]],
    task_ids: list[str],
    *,
    max_failed_share: float,
    what: str,
    progress: bool = True,
) -> tuple[list[EpisodeSample], list[str]]:
    """Play one episode per entry of `task_ids` concurrently; returns the samples and
    the errors of the episodes that failed twice (each is retried once).

    One flaky episode (a service restart, a generation error) must not end a run that
    has trained for hours, so failed episodes are left out and reported; a failure
    share above `max_failed_share` is not flakiness, and raises `TooManyFailedEpisodes`
    with the first errors.
    """

    async def once_more(task_id: str) -> EpisodeSample | EpisodeError:
        try:
            return await retry_once(play, task_id)
        except EpisodeError as second:
            return second

    episodes = [asyncio.ensure_future(once_more(t)) for t in task_ids]
    try:
        # On a terminal the bar goes when done; in a log its last line must show the total.
        leave = not sys.stderr.isatty()
        results = await tqdm_asyncio.gather(
            *episodes, desc=what, unit="episode", leave=leave, disable=not progress
        )
    except BaseException:
        # Cancelled (Ctrl-C): stop the episodes too, so that each closes its episode and
        # the client closes its connections before the loop ends, quietly.
        for episode in episodes:
            episode.cancel()
        await asyncio.gather(*episodes, return_exceptions=True)
        raise
    samples = [r for r in results if isinstance(r, EpisodeSample)]
    errors = [str(r) for r in results if isinstance(r, EpisodeError)]
    if len(errors) > max_failed_share * len(task_ids):
        shown = "\n  ".join(errors[:3])
        raise TooManyFailedEpisodes(
            f"{what}: {len(errors)} of {len(task_ids)} episodes failed twice (tolerated: "
            f"{max_failed_share:.0%}); first errors:\n  {shown}"
        )
    for error in errors:
        log.warning("%s: left out after two failures: %s", what, error)
    return samples, errors


async def run_episode(
    env: EnvClient,
    generator: Generator,
    tokenizer,
    task_id: str,
    settings: EpisodeSettings,
    *,
    tool_format: ToolFormat,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_prompt_tokens: int | None = None,
) -> EpisodeSample:
    """Play one episode of `task_id` (the rules: docs/design.md, "Loss mask"). A first
    prompt longer than `max_prompt_tokens` raises PromptTooLong before any generation."""
    turns = TokenTurns(turn_tokenizer(tokenizer, tool_format), generator, temperature, top_p)
    what = f"task {task_id}"
    try:
        async with env.episode(task_id, settings) as episode:
            what = episode.what
            turns.start(tool_format.start(episode.created))
            if max_prompt_tokens is not None and turns.prompt_length > max_prompt_tokens:
                raise PromptTooLong(
                    f"{what}: the first prompt has {turns.prompt_length} tokens, more than "
                    f"the {max_prompt_tokens} allowed (verl: rollout.prompt_length)"
                )
            turns.stop_reason = await loop.play(episode, turns, settings.limits)
            evaluation = await episode.finish()
            interface = episode.created["interface"]
    except PromptTooLong:
        raise  # the episode was closed on the way out; retrying cannot help
    except Exception as e:  # the episode was closed on the way out (env_client.RemoteEpisode)
        raise EpisodeError(
            f"{what} after {turns.num_generations} generations: {type(e).__name__}: {e}"
        ) from e
    return turns.sample(task_id, evaluation, interface)


class TokenTurns:
    """The growing token sequence of one episode and its bookkeeping: the token-id turns
    of the one loop (seal.rollout.loop.Turns)."""

    def __init__(self, chat: TurnTokenizer, generator: Generator, temperature: float, top_p: float):
        self.chat, self.format, self.generator = chat, chat.format, generator
        self.temperature, self.top_p = temperature, top_p
        self.ids: list[int] = []
        self.prompt_length = 0
        self.prompt_text = ""
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.has_logprobs = False
        self.num_generations = 0
        self.closed = False
        """Whether the last generation closed its turn (ended with the end-of-turn id)."""
        self.observation: list[int] = []
        """The ids `observe` made ready: the turn's closing id if it lacked one, then the
        observation."""
        self.unclipped_extra = self.pending_extra = 0
        """Tokens the kept observations' clips left out (and the ready one's): what the
        unclipped context counts beyond `ids`."""
        self.stop_reason: StopReason | None = None

    def start(self, conversation: Conversation) -> None:
        self.ids, self.prompt_text = self.chat.prompt(conversation)
        self.prompt_length = len(self.ids)

    @property
    def context_size(self) -> ContextSize:
        return ContextSize(len(self.ids), len(self.ids) + self.unclipped_extra)

    async def reply(self, budget: int) -> str:
        sampling = SamplingParams(
            max_new_tokens=budget, temperature=self.temperature, top_p=self.top_p
        )
        generation = await self.generator.generate(self.ids, sampling)
        self.closed = self.append_generation(generation, sampling.max_new_tokens)
        return self.chat.decode(generation.token_ids[:-1] if self.closed else generation.token_ids)

    def observe(self, messages: list[dict], max_tokens: int) -> ContextSize:
        observation = self.chat.observation(self.format.observation(messages), max_tokens)
        closing = [] if self.closed else [self.chat.end_of_turn_id]
        self.observation = closing + observation.ids
        self.pending_extra = observation.unclipped_length - len(observation.ids)
        now = self.context_size
        added = len(self.observation)
        return ContextSize(now.tokens + added, now.unclipped + added + self.pending_extra)

    def keep(self) -> None:
        self.append_unmasked(self.observation)
        self.unclipped_extra += self.pending_extra

    def end(self, messages: list[dict]) -> None:
        """The last observation conditioned nothing: the sample ends with the last reply."""

    def append_generation(self, generation: Generation, max_new_tokens: int) -> bool:
        """Append the generated ids as they are; returns whether they closed the turn."""
        self.check(generation, max_new_tokens)
        self.num_generations += 1
        if self.num_generations == 1:
            self.has_logprobs = generation.logprobs is not None
        elif self.has_logprobs != (generation.logprobs is not None):
            raise GenerationError(
                "the generator returned log-probabilities for some generations only"
            )
        self.ids += generation.token_ids
        self.mask += [1] * len(generation.token_ids)
        self.logprobs += generation.logprobs or [0.0] * len(generation.token_ids)
        return generation.token_ids[-1] == self.chat.end_of_turn_id

    def append_unmasked(self, ids: list[int]) -> None:
        self.ids += ids
        self.mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def check(self, generation: Generation, max_new_tokens: int) -> None:
        """A generation that breaks the Generator contract is an error, not output."""
        ids = generation.token_ids
        if generation.finish_reason not in ("stop", "length"):
            raise GenerationError(f"unknown finish_reason {generation.finish_reason!r}")
        if not ids:
            raise GenerationError("empty generation")
        if len(ids) > max_new_tokens:
            raise GenerationError(
                f"{len(ids)} generated ids exceed max_new_tokens {max_new_tokens}"
            )
        if self.chat.end_of_turn_id in ids[:-1]:
            raise GenerationError("generated ids continue after the end-of-turn token")
        if generation.logprobs is not None and len(generation.logprobs) != len(ids):
            raise GenerationError(
                f"{len(generation.logprobs)} log-probabilities for {len(ids)} generated ids"
            )

    def sample(self, task_id: str, evaluation: dict, interface: dict) -> EpisodeSample:
        prompt, response = self.ids[: self.prompt_length], self.ids[self.prompt_length :]
        return EpisodeSample(
            task_id=task_id,
            category=evaluation["category"],
            prompt_ids=prompt,
            response_ids=response,
            response_mask=self.mask,
            response_logprobs=self.logprobs if self.has_logprobs else None,
            reward=evaluation["reward"],
            accuracy=evaluation["accuracy"],
            progress=evaluation["progress"],
            failure_tags=evaluation["failure_tags"],
            paper_label=evaluation["paper_label"],
            interface=interface,
            num_generations=self.num_generations,
            stop_reason=self.stop_reason,
            evaluation=evaluation,
            input_text=self.prompt_text,
            output_text=self.chat.decode(response),
        )
