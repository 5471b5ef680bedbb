"""What a tool format is: how one model family sees a BFCL episode and writes tool calls.

The environment service speaks structured data (seal.rollout.protocol): at creation the
tool docs (BFCL's bare docs, with the training-time schema cues when on), the
system-prompt sections (the layers' note and guidelines when on; the `rich` prompt's
instructions first) and the first question; after each step the observation, as tool results (`role: tool`, one
per call, in order) or user messages (the next question; on a miss_func holdout turn an
empty one carrying the revealed tools). A `ToolFormat` is the client's half:

- `start(created)`: the first prompt as a `Conversation` in the family's own layout;
- `observation(messages)`: an observation as the family's chat messages;
- `render(conversation)`: the prompt text through the generation prompt, special
  tokens written out (the tokenizer only maps text to ids);
- `parse(text)`: the calls in one generated message (`ToolCall` or, for a call the
  text attempts but gets wrong, `CallParseError`); an empty list means the message
  answers, which ends the user turn;
- `call_text(calls)`: the message the family writes for these calls (ground-truth
  replay, tests).

`observation_text` is what the episode driver appends after a closed assistant turn.
It is cut out of a render of a small probe conversation, so it is exactly the format's
own rendering of the new messages, whatever that rendering does to their contents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
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
    def parse(self, text: str) -> ParsedCalls:
        """The tool calls of one generated message ([]: the message answers)."""

    @abstractmethod
    def call_text(self, calls: list[ToolCall]) -> str:
        """How this family writes `calls` as one assistant message."""

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
