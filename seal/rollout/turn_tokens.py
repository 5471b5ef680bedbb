"""Token ids of a chat conversation built one turn at a time from the chat template.

The episode driver keeps the ids the model generated as they are and appends only the
new messages after each generation, so an episode costs one tokenization of each
message instead of a re-render of the whole conversation per turn, and the ids never
drift from what the model produced (re-tokenizing generated text can give different
ids for the same string).

The text the template puts around new messages is found by rendering probe
conversations whose contents are unique placeholders: for Qwen2.5 a user message after
an assistant turn is "\\n<|im_start|>user\\n{content}<|im_end|>\\n<|im_start|>assistant\\n",
where the leading "\\n" follows the generated "<|im_end|>". This assumes the template
inserts message contents verbatim, as Qwen2.5's does; the tests compare the result with
a full re-render of real episodes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

SHIPPED_TOKENIZER = Path(__file__).resolve().parent.parent / "assets" / "qwen2.5-tokenizer"
"""The Qwen2.5 tokenizer and chat template shipped with the package (Apache-2.0)."""

_ASSISTANT = "\x1eSEAL_ASSISTANT_TEXT\x1e"
_SLOT = "\x1eSEAL_SLOT_{}\x1e"
# The probe's earlier messages only give the template a valid context to render in.
_PROBE_HEAD = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


@dataclass
class Observation:
    ids: list[int]
    """The template text and contents after an assistant turn's end-of-turn token,
    through the next generation prompt."""
    clipped_messages: int
    """How many message contents were cut to the token limit."""
    messages: list[dict]
    """The messages as tokenized, contents clipped (what a text client sends on)."""


class TurnTokenizer:
    """Renders the first prompt and each later observation of one tokenizer's template."""

    def __init__(self, tokenizer, clip_marker: str = "\n... [truncated {dropped} tokens]"):
        self.tokenizer = tokenizer
        self.clip_marker = clip_marker
        """Appended to a clipped content; `{dropped}` is the number of tokens cut."""
        self.end_of_turn_id: int = tokenizer.eos_token_id
        """The token that closes an assistant turn; also where generation stops."""
        rendered = self._render([*_PROBE_HEAD, {"role": "assistant", "content": _ASSISTANT}])
        if _ASSISTANT + tokenizer.eos_token not in rendered:
            raise ValueError(
                f"the chat template does not close an assistant turn with the eos token "
                f"{tokenizer.eos_token!r}; incremental rendering needs it to"
            )
        self._suffix_pieces = functools.lru_cache(maxsize=64)(self._derive_pieces)
        # The n rollouts of a task share their prompt, 20-30 KB of tool signatures whose
        # tokenization was half of the driver's CPU time per episode; 64 covers a step's
        # tasks (the paper's 32).
        self._prompt_ids = functools.lru_cache(maxsize=64)(lambda text: tuple(self.encode(text)))

    def _render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=False
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        """Text of ids with the special tokens kept, as the model saw or wrote them (no
        clean-up of spaces, which would change what the model wrote)."""
        return self.tokenizer.decode(
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def prompt(self, messages: list[dict]) -> tuple[list[int], str]:
        """The first messages rendered with the generation prompt: (ids, text). No
        `tools=`: the service's system message already carries the tool signatures."""
        text = self._render(messages, add_generation_prompt=True)
        return list(self._prompt_ids(text)), text

    def _derive_pieces(self, roles: tuple[str, ...]) -> tuple[str, ...]:
        """The template text between the end-of-turn token and the contents of new
        messages with these roles: len(roles) + 1 pieces to interleave with them."""
        probe = [{"role": r, "content": _SLOT.format(i)} for i, r in enumerate(roles)]
        text = self._render(
            [*_PROBE_HEAD, {"role": "assistant", "content": _ASSISTANT}, *probe],
            add_generation_prompt=True,
        )
        rest = text.split(_ASSISTANT + self.tokenizer.eos_token, 1)[1]
        pieces = []
        for i in range(len(roles)):
            piece, found, rest = rest.partition(_SLOT.format(i))
            if not found or _SLOT.format(i) in rest:
                raise ValueError(f"the chat template does not render a {roles[i]} message verbatim")
            pieces.append(piece)
        return (*pieces, rest)

    def observation_text(self, messages: list[dict]) -> str:
        """What follows a closed assistant turn: `messages`, then the generation prompt."""
        pieces = self._suffix_pieces(tuple(m["role"] for m in messages))
        parts = [pieces[0]]
        for message, piece in zip(messages, pieces[1:], strict=True):
            parts += [message["content"], piece]
        return "".join(parts)

    def observation(self, messages: list[dict], max_content_tokens: int) -> Observation:
        """Ids of the new messages, each content clipped to `max_content_tokens`.

        Tokenized as one string that starts right after a special token, so its ids are
        those a full re-render gives at this place (the tokenizer splits at special
        tokens before merging)."""
        clipped, count = [], 0
        for message in messages:
            content = self.clip(message["content"], max_content_tokens)
            count += content is not message["content"]
            clipped.append({**message, "content": content})
        return Observation(self.encode(self.observation_text(clipped)), count, clipped)

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


@functools.lru_cache(maxsize=8)
def turn_tokenizer(tokenizer) -> TurnTokenizer:
    """One TurnTokenizer per tokenizer object, so the probe renders run once."""
    return TurnTokenizer(tokenizer)
