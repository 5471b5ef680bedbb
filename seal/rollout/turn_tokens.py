"""Token ids of a chat conversation built one turn at a time from a tool format's rendering.

The episode driver keeps the ids the model generated as they are and appends only the new
messages: one tokenization per message instead of a re-render per turn, and ids that never
drift from what the model produced (re-tokenizing generated text can give other ids). The
first prompt is the format's render of the first messages; what follows a closed assistant
turn is its render of the new messages cut out of a probe conversation
(`ToolFormat.observation_text`). The tokenizer must know the format's end-of-turn token as
one token. The tests compare the result with a full re-render of real episodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from seal.formats.base import Conversation, ToolFormat

SHIPPED_TOKENIZER = Path(__file__).resolve().parent.parent / "assets" / "qwen2.5-tokenizer"
"""The Qwen2.5 tokenizer and chat template shipped with the package (Apache-2.0)."""
CLIP_MARKER = "\n... [truncated {dropped} tokens]"
"""Appended to a clipped content; `{dropped}` is the number of tokens cut."""
RELEASE_CLIP_MARKER = "... truncate ..."
RELEASE_CLIP_MARGIN = 100
"""The paper's clip (its release's trainer): tokens left for the marker and the cut's error."""


@dataclass
class Observation:
    ids: list[int]
    """The format's text and contents after an assistant turn's end-of-turn token,
    through the next generation prompt."""
    clipped_messages: int
    """How many message contents were cut to the token limit."""
    unclipped_length: int
    """Tokens of the same observation with no content cut (the release's `raw` context
    counts them): len(ids) when none was."""


class TextTokens:
    """One tokenizer's text and ids, as the model saw or wrote them, and clipping; the
    endpoint evaluator counts and clips with it in any format (seal/eval/endpoint_episode.py)."""

    def __init__(self, tokenizer, clip_marker: str = CLIP_MARKER):
        self.tokenizer = tokenizer
        self.clip_marker = clip_marker

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Text of ids with the special tokens kept, as the model saw or wrote them (no
        clean-up of spaces, which would change what the model wrote)."""
        return self.tokenizer.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def clip(self, content: str, max_tokens: int) -> str:
        """`content` itself if it has at most `max_tokens` tokens, else its first tokens
        plus the clip marker, at most `max_tokens` tokens in all (counted alone)."""
        # Each token is at least one UTF-8 byte, so short texts need no tokenization.
        if len(content.encode()) <= max_tokens:
            return content
        ids = self.encode(content)
        if len(ids) <= max_tokens:
            return content
        keep = max_tokens - len(self.encode(self.clip_marker.format(dropped=len(ids))))
        while keep > 0:
            # Decoding a prefix and encoding it again may merge differently at the cut,
            # so the count is checked on the final text.
            text = self.decode(ids[:keep]) + self.clip_marker.format(dropped=len(ids) - keep)
            if len(self.encode(text)) <= max_tokens:
                return text
            keep -= 1
        raise ValueError(f"max_tokens {max_tokens} leaves no room for the clip marker")

    def clip_as(self, rule: str, content: str, max_tokens: int) -> str:
        """`content` clipped by a format's rule (ToolFormat.clip)."""
        if rule == "release":
            return self.clip_like_the_release(content, max_tokens)
        return self.clip(content, max_tokens)

    def clip_like_the_release(self, content: str, max_tokens: int) -> str:
        """The paper's clip: a content of more than `max_tokens` tokens keeps the share
        (max_tokens - 100) / its tokens of its characters, then "... truncate ..." (close
        to `max_tokens - 100` tokens; the release cuts characters, not tokens)."""
        if len(content.encode()) <= max_tokens:
            return content
        n_tokens = len(self.encode(content))
        if n_tokens <= max_tokens:
            return content
        keep = int(len(content) * max(0, max_tokens - RELEASE_CLIP_MARGIN) / n_tokens)
        return content[:keep] + RELEASE_CLIP_MARKER


class TurnTokenizer(TextTokens):
    """Renders the first prompt and each later observation of one tool format as ids."""

    def __init__(self, tokenizer, tool_format: ToolFormat, clip_marker: str = CLIP_MARKER):
        super().__init__(tokenizer, clip_marker)
        self.format = tool_format
        end = self.encode(tool_format.end_of_turn)
        if len(end) != 1:
            raise ValueError(
                f"tool format {tool_format.name} closes an assistant turn with "
                f"{tool_format.end_of_turn!r}, which this tokenizer does not have as one token"
            )
        self.end_of_turn_id: int = end[0]
        """The token that closes an assistant turn; also where generation stops."""
        tool_format.observation_text([])  # fails early if the format cannot be cut so
        # The n rollouts of a task share their prompt, 20-30 KB of tool signatures whose
        # tokenization was half of the driver's CPU time per episode; 64 covers a step's
        # tasks (the paper's 32).
        self._prompt_ids = functools.lru_cache(maxsize=64)(lambda text: tuple(self.encode(text)))

    def prompt(self, conversation: Conversation) -> tuple[list[int], str]:
        """The first prompt, through the generation prompt: (ids, text)."""
        text = self.format.render(conversation)
        return list(self._prompt_ids(text)), text

    def observation(self, messages: list[dict], max_content_tokens: int) -> Observation:
        """Ids of the new messages (the format's chat messages), each content clipped to
        `max_content_tokens`.

        Tokenized as one string that starts right after a special token, so its ids are
        those a full re-render gives at this place (the tokenizer splits at special
        tokens before merging)."""
        clipped, count = [], 0
        for message in messages:
            content = self.clip_as(self.format.clip, message["content"], max_content_tokens)
            count += content is not message["content"]
            clipped.append({**message, "content": content})
        ids = self.encode(self.format.observation_text(clipped))
        whole = len(self.encode(self.format.observation_text(messages))) if count else len(ids)
        return Observation(ids, count, whole)


@functools.lru_cache(maxsize=8)
def turn_tokenizer(tokenizer, tool_format: ToolFormat) -> TurnTokenizer:
    """One TurnTokenizer per tokenizer and format, so its prompt cache is shared."""
    return TurnTokenizer(tokenizer, tool_format)
