"""What a tool format is: how one model family sees a BFCL episode and writes tool calls.

The environment service speaks structured data (seal.service_contract); a `ToolFormat`
is the client's half: `start`, `observation` and `render` turn it into the family's
prompt text, `parse` reads the calls in a generated message, `call_text`/`answer_text`
write one. `observation_text` is cut out of a probe render, so it is exactly the format's
own rendering. Each method's contract: docs/tool_formats.md, "The code".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from seal.bfcl.calls import CallParseError, ToolCall

ParsedCalls = list[ToolCall | CallParseError]

_ASSISTANT = "⟦SEAL assistant text⟧"  # no whitespace at its ends: templates may strip
_PROBE_HEAD = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


@dataclass
class Conversation:
    """A chat in one format's own message shapes, and the tool docs that format lays
    out itself (empty when the messages already carry them)."""

    messages: list[dict]
    functions: list[dict] = field(default_factory=list)


class ToolFormat(ABC):
    name: str
    """The value of `trainer.model.tool_format` (and seal-eval's --tool-format)."""
    end_of_turn: str
    """The token that closes an assistant turn (where generation stops)."""
    prompt: str = "paper"
    """The service texts this format's prompt is made for (EpisodeSettings.prompt)."""
    clip: str = "tokens"
    """How a long observation is cut to `max_observation_tokens`: `tokens` (exactly, with
    a marker saying how many were cut) or `release` (the paper's: by characters, in
    proportion; seal.rollout.turn_tokens)."""
    end_on_malformed_call: bool = False
    """A message with a malformed call ends the episode (EpisodeSettings
    .end_on_malformed_call): the service rule this format's prompt was run with."""

    @abstractmethod
    def start(self, created: dict) -> Conversation:
        """The first prompt of an episode from the service's creation reply."""

    @abstractmethod
    def observation(self, messages: list[dict]) -> list[dict]:
        """The service's observation messages as this format's chat messages."""

    @abstractmethod
    def render(self, conversation: Conversation) -> str:
        """The prompt text of `conversation`, ending with the generation prompt."""

    @abstractmethod
    def parse(self, text: str, tools: Sequence[dict] = ()) -> ParsedCalls:
        """The tool calls of one generated message ([]: the message answers); `tools`: the
        BFCL docs shown so far (docs/tool_formats.md, "The code")."""

    @abstractmethod
    def call_text(self, calls: list[ToolCall]) -> str:
        """How this family writes `calls` as one assistant message."""

    def answer_text(self, text: str) -> str:
        """How this family writes a message that answers with `text` (a thinking family
        closes its reasoning first)."""
        return text

    def assistant_message(self, text: str) -> dict:
        """A generated message as a chat message, for a full re-render (evaluation)."""
        return {"role": "assistant", "content": text}

    def observation_text(self, messages: list[dict]) -> str:
        """What follows a closed assistant turn: `messages` (this format's chat messages),
        then the generation prompt."""
        probe = Conversation([*_PROBE_HEAD, self.assistant_message(_ASSISTANT), *messages])
        head, found, rest = self.render(probe).partition(_ASSISTANT + self.end_of_turn)
        if not found or _ASSISTANT in rest:
            raise ValueError(
                f"format {self.name}: an assistant turn does not render as its text "
                f"followed by {self.end_of_turn!r}"
            )
        return rest

    def __repr__(self) -> str:
        return f"<tool format {self.name}>"
