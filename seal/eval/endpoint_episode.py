"""One task of endpoint scoring: a validate-mode episode of the endpoint's chat messages.

The endpoint's replies are the chat-message turns of the one episode loop (seal.rollout.loop),
which training's token-id turns play too, under validation's context budget, so a score
here means what a validation score in training means. The budget counts the tool format's
render of the whole conversation with the model's tokenizer: docs/evaluation.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from seal.bfcl.agentic.tasks import is_agentic
from seal.eval.chat_endpoint import ChatEndpoint, Completion, ContextLengthError
from seal.formats.base import Conversation, ToolFormat
from seal.formats.registry import PAPER_QWEN, get_format
from seal.rollout import loop
from seal.rollout.env_client import EnvClient, EnvServiceError, RemoteEpisode
from seal.rollout.turn_tokens import SHIPPED_TOKENIZER, TextTokens
from seal.service_contract import EpisodeLimits, EpisodeSettings


class ContextBudgetError(RuntimeError):
    """The server's context is smaller than the budget: a setting to fix, so the run
    stops (see the module docstring)."""


@dataclass(frozen=True)
class Prompting:
    """How the endpoint is asked: a tool format, and whether the conversation is sent as
    chat messages or as the format's rendered prompt to the completions API."""

    tool_format: ToolFormat = field(default_factory=lambda: get_format(PAPER_QWEN))
    completions: bool = False

    @property
    def name(self) -> str:
        return f"{self.tool_format.name} ({'completions' if self.completions else 'chat'})"


def tokenizer_name(name: str | None, model: str) -> str:
    """The tokenizer that counts the budget: `name` (a local directory or a hub name),
    else the shipped Qwen2.5 tokenizer for a Qwen model of its vocabulary (Qwen2.5, Qwen3).
    Any other model must name its own: counting its tokens with Qwen2.5's would misjudge
    its context (Qwen3.5's vocabulary and pre-tokenizer differ)."""
    if name is not None:
        return name
    lowered = model.lower()
    if "qwen" not in lowered or "qwen3.5" in lowered:
        raise ValueError(
            f"--tokenizer is needed for model {model!r}: the budget is counted with the "
            "model's own tokenizer and chat template (the shipped Qwen2.5 tokenizer is "
            "the default for Qwen2.5 and Qwen3 models only)"
        )
    return str(SHIPPED_TOKENIZER)


def load_tokenizer(name: str | None, model: str):
    """The tokenizer `tokenizer_name` names, loaded."""
    from transformers import AutoTokenizer  # here: `seal-eval --help` and refusals skip it

    return AutoTokenizer.from_pretrained(tokenizer_name(name, model))


def tokenizer_label(tokenizer) -> str:
    """How records name the tokenizer: a directory's name, so moving it changes nothing."""
    name = str(tokenizer.name_or_path)
    return Path(name).name if Path(name).is_dir() else name


async def ask(
    chat: ChatEndpoint, prompting: Prompting, conversation: Conversation, what: str, budget: int
) -> Completion:
    """The model's next reply: to the messages (chat API), or continuing the format's
    render of them (completions API)."""
    if prompting.completions:
        prompt = prompting.tool_format.render(conversation)
        return await chat.complete_text(prompt, what, budget)
    return await chat.complete(conversation.messages, what, budget)


class MessageTurns:
    """An endpoint's chat-message turns of the one loop (seal.rollout.loop.Turns): the
    context is the format's render of the conversation so far, counted whole."""

    def __init__(
        self, episode: RemoteEpisode, chat: ChatEndpoint, tokens: TextTokens, prompting: Prompting
    ):
        self.chat, self.tokens, self.prompting = chat, tokens, prompting
        self.format, self.what = prompting.tool_format, episode.what
        self.task_id, self.limits = episode.task_id, episode.settings.limits
        # The service ends the episode at max_generations (marked truncated; an agentic
        # task's count is per turn), so this bound is only a guard.
        turns = episode.created["num_turns"] if is_agentic(episode.task_id) else 1
        self.max_replies = self.limits.max_generations * turns
        self.conversation = self.format.start(episode.created)
        self.first = list(self.conversation.messages)
        self.used = self.context = self.prompt_tokens(self.conversation)
        """`used`: the conversation's tokens; `context`: with the last reply."""
        self.unclipped = self.used
        """The conversation's tokens with every observation whole (`whole`)."""
        self.whole = list(self.first)
        self.transcript: list[dict] = []
        """The replies and the observations after them, in the format's messages."""
        self.replies = self.cut = self.clipped = 0
        self.assistant: dict = {}
        self.observation: list[dict] = []
        self.following, self.following_size = self.conversation, self.context_size
        self.following_whole = self.whole

    @property
    def context_size(self) -> loop.ContextSize:
        return loop.ContextSize(self.used, self.unclipped)

    def prompt_tokens(self, conversation: Conversation) -> int:
        # The whole prompt as the format renders it: on the completions API exactly what
        # is sent, so no format needs to say how its turns end.
        return len(self.tokens.encode(self.format.render(conversation)))

    async def reply(self, budget: int) -> str:
        if self.replies == self.max_replies:
            raise EnvServiceError(
                f"{self.what}: the service did not end the episode at max_generations "
                f"{self.limits.max_generations}"
            )
        self.replies += 1
        try:
            reply = await ask(self.chat, self.prompting, self.conversation, self.task_id, budget)
        except ContextLengthError as error:
            raise self.too_small(error, budget) from error
        # A cut reply is stepped all the same, as the driver steps a cut generation.
        self.cut += reply.finish_reason == "length"
        self.context = self.used + len(self.tokens.encode(reply.text))
        self.assistant = self.format.assistant_message(reply.text)
        self.transcript.append(self.assistant)
        return reply.text

    def observe(self, messages: list[dict], max_tokens: int) -> loop.ContextSize:
        whole = self.format.observation(messages)
        self.observation = []
        for message in whole:
            content = self.tokens.clip_as(self.format.clip, message["content"], max_tokens)
            self.clipped += content != message["content"]
            self.observation.append({**message, "content": content})
        functions = self.conversation.functions
        messages = [*self.conversation.messages, self.assistant, *self.observation]
        self.following = Conversation(messages, functions)
        self.following_whole = [*self.whole, self.assistant, *whole]
        # The reply and the observation: the render is counted whole, and again with the
        # observations unclipped once any was clipped.
        used = self.prompt_tokens(self.following)
        unclipped = (
            self.prompt_tokens(Conversation(self.following_whole, functions))
            if self.clipped
            else used
        )
        self.following_size = loop.ContextSize(used, unclipped)
        return self.following_size

    def keep(self) -> None:
        self.conversation, self.whole = self.following, self.following_whole
        self.used, self.unclipped = self.following_size.tokens, self.following_size.unclipped
        self.transcript += self.observation

    def end(self, messages: list[dict]) -> None:
        self.transcript += self.format.observation(messages)

    def too_small(self, error: ContextLengthError, budget: int) -> ContextBudgetError:
        return ContextBudgetError(
            f"{error}\nThis request fits the budget ({self.used} tokens of prompt + max_tokens "
            f"{budget} <= {self.limits.max_context_tokens}, counted with the tokenizer "
            f"{tokenizer_label(self.tokens.tokenizer)}), so the server's context is smaller "
            "than --max-context-tokens, or it counts more tokens: set --max-context-tokens to "
            "the server's context length (and --tokenizer to the model's own if it is not); "
            "results under another budget need another --out-dir"
        )


async def play_endpoint_episode(
    env: EnvClient,
    chat: ChatEndpoint,
    tokens: TextTokens,
    task_id: str,
    limits: EpisodeLimits,
    prompting: Prompting,
) -> dict:
    """One validate-mode episode under the context budget; the evaluation, the 'input'
    and 'output' messages (in the tool format's messages) and the budget's counters."""
    start, fmt = time.monotonic(), prompting.tool_format
    settings = EpisodeSettings(
        mode="validate",
        prompt=fmt.prompt,
        end_on_malformed_call=fmt.end_on_malformed_call,
        limits=limits,
    )
    async with env.episode(task_id, settings) as episode:
        turns = MessageTurns(episode, chat, tokens, prompting)
        stop = await loop.play(episode, turns, limits)
        evaluation = await episode.finish()
    if is_agentic(task_id) and evaluation["aborted"]:
        # A search that gave up, or a backend over the step's time budget: the service's
        # trouble, not the model's answer (seal/bfcl/agentic/web_search.py).
        raise EnvServiceError(
            f"{episode.what}: the service aborted the episode ({evaluation['aborted']}); "
            "not scored: run the evaluation again to retry it"
        )
    counters = {
        "stop_reason": stop,
        "length_cut": turns.cut,
        "clipped_observations": turns.clipped,
        "context_tokens": turns.context,
        "seconds": round(time.monotonic() - start, 3),
    }
    return {**evaluation, **counters, "input": turns.first, "output": turns.transcript}
