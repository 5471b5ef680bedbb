"""The episode contract between trainers and the environment service, as data.

One definition of each idea, used on both sides of the native API (`/v1`): the limits,
the observation layers, the reward, the create settings, the request and reply bodies and
the token's variable. The bodies carry no model's text format (the client renders and
parses in its model's format, seal.formats). The settings are plain dataclasses, so they
are also the trainers' YAML sections, and pydantic validates them in bodies. Each piece:
docs/design.md, "The episode contract". Imports nothing heavy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from seal.bfcl.tags import FAILURE_TAGS
from seal.renamed_keys import rename_old_keys

_STRICT = ConfigDict(extra="forbid")
"""pydantic reads this off a stdlib dataclass: unknown keys in a request are a 422."""

ROLLOUT_MODES = ("sample", "validate")
PROMPTS = ("paper", "rich")

TOKEN_ENV = "SEAL_ENV_TOKEN"
"""Environment variable holding the service's bearer token: the service reads it when
`--token` is not given (prefer it to `--token`, which other users of the machine can read
in the process list), and so does every client made without an explicit token (the
launcher sets it for its run)."""


MAX_GENERATIONS = 1024
"""The most assistant messages an episode may be given (`EpisodeLimits.max_generations`).
BFCL's episodes have at most 8 user turns and the paper allows 20 generations; an
episode's record (and what a rebuild of it replays) grows with its steps, so a client
may not ask for an unbounded number."""
CONTEXT_STOPS = ("release", "fill")
"""The context stop rules (`EpisodeLimits.context_stop`)."""
MAX_COUNT = 2**31 - 1
"""Upper bound of the other limits (token counts no model's context reaches)."""


def _require_in_range(obj: object, highest: dict[str, int]) -> None:
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            top = highest.get(f.name, MAX_COUNT)
            if not 1 <= value <= top:
                got = repr(value) if abs(value) < 1e15 else f"{value:.3g}"
                raise ValueError(f"{type(obj).__name__}.{f.name} must be in [1, {top}], got {got}")


@dataclass
class EpisodeLimits:
    """Where an episode stops and how its parts are cut (the paper's values)."""

    __pydantic_config__ = _STRICT

    max_generations: int = 20
    """Assistant messages per episode (at most MAX_GENERATIONS, 1024). The service ends
    the episode (truncated) at this many steps and the driver stops generating, so the
    two agree. BFCL V4 agentic tasks count them per turn, as bfcl-eval does (its
    force-quit; seal/bfcl/agentic/tasks.py)."""
    max_context_tokens: int = 16384
    """Tokens of prompt + response the model may see (its context; the paper's model
    length). Where it stops an episode (`context_limit`): `context_stop`."""
    max_new_tokens: int = 4096
    """Tokens one generation may produce (the paper's response length)."""
    max_observation_tokens: int = 4096
    """Each observation (tool results, next question) is clipped to this many tokens,
    clip marker included (the paper's tool-response clip)."""
    context_stop: str = "release"
    """When the context ends an episode (`context_limit`; seal/rollout/loop.py):
    `release` (the paper's: its release's trainer): before each generation, stop once the
    history, counted with every observation unclipped, reaches max_context_tokens -
    max_new_tokens (16,384 - 4,096 = 12,288); each generation may use max_new_tokens.
    `fill` (beyond the paper): a generation may use whatever room is left up to
    max_context_tokens (at most max_new_tokens), counted on the clipped observations, and
    an observation that leaves no room ends the episode; an episode then may use the
    whole context, so long-context tasks the release's rule stops can finish (the counts
    over the 800 ground truths: docs/paper_configs.md)."""

    def __post_init__(self):
        _require_in_range(self, {"max_generations": MAX_GENERATIONS})
        if self.context_stop not in CONTEXT_STOPS:
            raise ValueError(
                f"EpisodeLimits.context_stop must be one of {CONTEXT_STOPS}, "
                f"not {self.context_stop!r}"
            )
        if self.context_stop == "release" and self.max_new_tokens >= self.max_context_tokens:
            raise ValueError(
                f"EpisodeLimits: max_new_tokens {self.max_new_tokens} leaves no history "
                f"under max_context_tokens {self.max_context_tokens} (context_stop release)"
            )


@dataclass
class InterfaceSettings:
    """Observation layers of an episode (the environment half of SEAL). Every layer is
    off unless switched on; validation episodes never get them unless
    `EpisodeSettings.evolve_in_validation` says so."""

    __pydantic_config__ = _STRICT

    schema_cues: bool = False
    """"observation_lite", the paper's headline layer: mark required parameters, surface
    allowed values as enums, add one constraint note to the system prompt."""
    type_hints: bool = False
    """With schema_cues: also state each parameter's expected type in its description."""
    recovery_feedback: bool = False
    """Append a short recovery hint to invalid-call and tool-error observations."""
    guidelines: bool = False
    """Add system-prompt guidelines for the prevalent, unsolved failure tags of the
    current failure profile (the closed loop; the trainer pushes the profile)."""
    max_guidelines: int = 3
    """At most this many guidelines (the profile's top tags by share)."""

    def __post_init__(self):
        if not 0 <= self.max_guidelines <= len(FAILURE_TAGS):
            raise ValueError(f"max_guidelines must be in [0, {len(FAILURE_TAGS)}]")

    @property
    def any(self) -> bool:
        return self.schema_cues or self.recovery_feedback or self.guidelines


@dataclass
class RewardSettings:
    """How an episode's verification becomes its reward."""

    __pydantic_config__ = _STRICT

    partial_credit_cap: float = 0.0
    """0 (the paper): reward = accuracy, 0 or 1. Above 0: a failed episode earns
    min(cap, partial_credit_weight * progress), progress = passed / scorable turns (the
    turns with a non-empty ground truth, as the release's grader counts them)."""
    partial_credit_weight: float = 1.0
    """Weight of progress under the cap."""

    def __post_init__(self):
        if not 0.0 <= self.partial_credit_cap <= 1.0:
            raise ValueError("partial_credit_cap must be in [0, 1]")
        if self.partial_credit_weight < 0:
            raise ValueError("partial_credit_weight must be >= 0")

    def reward(self, accuracy: int, progress: float) -> float:
        if accuracy or self.partial_credit_cap <= 0:
            return float(accuracy)
        return min(self.partial_credit_cap, self.partial_credit_weight * progress)


RENAMED_SETTINGS = {"evolution": "interface"}
"""Old `EpisodeSettings` field -> its new name: still read in a create's `settings`
(deprecated, a FutureWarning once per process; docs/design.md, "Glossary")."""


@dataclass
class EpisodeSettings:
    """Everything a client chooses when it creates an episode."""

    __pydantic_config__ = _STRICT

    mode: str = "sample"
    """`sample` (training: interface layers allowed) or `validate` (the plain benchmark)."""
    prompt: str = "paper"
    """Whose texts the service writes (env_service/interface_layers.py TEXTS): `paper`, the
    original release's (Appendix D: no instructions, ` [required]` on required parameters,
    its D.2 note, D.4 guidelines), or `rich`, this project's (instructions before the
    tools, [required]/[optional] markers, allowed values read from BFCL's prose, its own
    note and guidelines; beyond the paper). A client's tool format asks for the one its
    prompt is made for (seal.formats.base.ToolFormat.prompt)."""
    end_on_malformed_call: bool = False
    """A message with a malformed call (one the format's parser cannot read, or text the
    format forbids beside its calls) ends the episode instead of being answered with an
    error: the release's `terminate_on_parse_error`, which its ToolACE runs set. Nothing
    of the message runs; the evaluation is the checker's verdict on what ran (the turns
    not reached fail: accuracy 0 unless the message closed the last turn, as the
    release's evaluation gives) and says so (`Evaluation.ended_on_malformed_call`). A
    client's tool format asks for it (seal.formats.base.ToolFormat.end_on_malformed_call);
    off: the paper's Qwen2.5 rule, one error message and the episode plays on."""
    interface: InterfaceSettings = field(default_factory=InterfaceSettings)
    """The interface's layers (`evolution` before: a create's `settings` may still say so,
    read with a warning; RENAMED_SETTINGS)."""
    evolve_in_validation: bool = False
    """Apply the interface layers in validate mode too (off: validation is the benchmark)."""
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    reward: RewardSettings = field(default_factory=RewardSettings)

    def __post_init__(self):
        if self.mode not in ROLLOUT_MODES:
            raise ValueError(f"mode must be one of {ROLLOUT_MODES}, not {self.mode!r}")
        if self.prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {PROMPTS}, not {self.prompt!r}")

    @property
    def effective_interface(self) -> InterfaceSettings:
        if self.mode == "validate" and not self.evolve_in_validation:
            return InterfaceSettings()
        return self.interface


# --- request and reply bodies of the native API ------------------------------------------


class ObservationMessage(BaseModel):
    """One message the episode shows the model, in no model's format."""

    role: Literal["user", "tool", "env"]
    content: str = ""
    """A question, a tool's result (an error text for a call that could not run), or the
    environment's own answer (`env`: under the paper's prompt, the one error that answers
    a message none of whose calls may run; formats show it as a user message)."""
    name: str | None = None
    """`tool`: the tool the call named (None when the call could not be parsed)."""
    hint: str | None = None
    """`tool`, under the paper's prompt with recovery feedback: its hint on this result
    (the paper's D.3), which the format shows after it; None: no hint."""
    tools: list[dict] | None = None
    """`user` on a miss_func holdout turn: the tool docs revealed now (content empty)."""


class AssistantCall(BaseModel):
    """One tool call of an assistant turn, as the client parsed it from the model's text:
    a tool name with JSON arguments, or the reason the text's attempt at a call could
    not be parsed (answered with that error and counted as an invalid call)."""

    model_config = _STRICT

    name: str | None = None
    arguments: dict = Field(default_factory=dict)
    error: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> AssistantCall:
        if (self.name is None) == (self.error is None):
            raise ValueError("a call has either a 'name' (with 'arguments') or an 'error'")
        return self


class CreateEpisode(BaseModel):
    model_config = _STRICT

    task_id: str
    episode_id: str | None = Field(
        None,
        description="Client-chosen id (lets a client close an episode whose creation "
        "reply it never got, and makes a retried create safe); generated if absent.",
    )
    settings: EpisodeSettings = Field(default_factory=EpisodeSettings)

    @field_validator("settings", mode="before")
    @classmethod
    def _read_old_setting_names(cls, settings):
        """A create from a client older than a rename is read, with a warning."""
        return rename_old_keys(settings, RENAMED_SETTINGS, "episode setting")


class GuidelineShown(BaseModel):
    """One diagnostic guideline an episode's system prompt carries."""

    tag: str
    """The failure tag it addresses (seal.bfcl.tags.FAILURE_TAGS)."""
    text: str


class EpisodeInterface(BaseModel):
    """The training-time interface an episode was given (the paper's interface state,
    logged per round: its Appendix C.4): the layers on, and the guidelines shown."""

    schema_cues: bool = False
    type_hints: bool = False
    recovery_feedback: bool = False
    guidelines: bool = False
    """The guideline layer is on (it shows guidelines only when the profile asks)."""
    shown: list[GuidelineShown] = Field(default_factory=list)
    """The guidelines in the system prompt, in order."""


class EpisodeCreated(BaseModel):
    episode_id: str
    task_id: str
    category: str
    num_turns: int
    system: list[str]
    """The system prompt's sections in order: the `rich` prompt's instructions (the paper's
    has none), then the training layers' note and guidelines when they are on. The
    client's format lays them out with the tools."""
    tools: list[dict]
    """BFCL's docs of the tools available from the first turn, bare (no language hint:
    the format adds it where its prompt has it), with the schema cues when they are on."""
    messages: list[ObservationMessage]
    """The first turn's user messages."""
    interface: EpisodeInterface = Field(default_factory=EpisodeInterface)
    """The layers and guidelines this episode shows (all off in validation)."""
    system_from_task: bool = False
    """The sections are the task's own system message (BFCL V4 agentic tasks: the answer
    format, and for memory the memory so far), which every format shows, bfcl-eval's
    leaderboard prompt included; otherwise they are the service's instructions."""


MAX_CALLS_IN_A_STEP = 8192
"""More calls than a model's message can hold (262,144 characters, 36 a call at least):
a longer list is refused (422) before its calls are validated one by one, which for the
300,000 calls a 4 MiB body can list held the service's event loop for a second."""


class StepRequest(BaseModel):
    model_config = _STRICT

    content: str = Field(description="The model's text, as generated (kept for the record).")
    tool_calls: list[AssistantCall] = Field(
        max_length=MAX_CALLS_IN_A_STEP,
        description="The calls the client parsed from the text, in order; empty: the text "
        "answers, which ends the user turn.",
    )
    seq: int | None = Field(
        None,
        ge=1,
        le=MAX_GENERATIONS,
        description="1 for the episode's first step, 2 for the next, ... A step whose seq "
        "repeats the last one is answered with the first answer and not run again (a "
        "retried request); any other gap is a 409. Omitted: no such check.",
    )


class Evaluation(BaseModel):
    """The verification and diagnosis of an episode."""

    accuracy: int
    """1 when bfcl-eval's official checker passes the whole episode, else 0."""
    reward: float
    progress: float
    """Turns tagged pass over the turns with a non-empty ground truth, as the release's
    grader counts them (seal.bfcl.diagnosis.progress_counts); 0 when there are none."""
    failure_tags: list[str]
    """One diagnosis tag per ground-truth turn (seal.bfcl.tags)."""
    tag_notes: list[str]
    paper_label: str | None = None
    """A failed episode's label in the paper's Table 5 (seal.bfcl.tags.PAPER_LABELS, by
    seal.bfcl.diagnosis.paper_label); None for a passed episode, one the service ended
    (`aborted`), or one whose failing turn's check raised."""
    num_turns: int
    turns_reached: int
    terminated: bool
    truncated: bool
    """The service ended the episode at `limits.max_generations`."""
    aborted: str | None = None
    """Why the service ended the episode or its verification as a failure, or None:
    `step_time_budget` (a step's calls ran over the service's time budget; accuracy and
    reward 0), `rebuild_time_budget` (the service lost the process holding the episode's
    tools and could not rebuild them in time; accuracy and reward 0) or
    `evaluation_time_budget` (verification did; every turn `checker_error`)."""
    ended_on_malformed_call: bool = False
    """The episode ended at a message with a malformed call
    (EpisodeSettings.end_on_malformed_call), before its last turn was answered."""
    steps: int
    tool_calls: int
    invalid_calls: int
    invalid_by_kind: dict[str, int]
    tool_errors: int
    task_id: str
    category: str
    scored: bool = True
    """False for a BFCL V4 memory task's prerequisite conversation (it fills the memory;
    bfcl-eval scores only the questions asked after it). Its accuracy is then 0."""
    answer: str | None = None
    """BFCL V4 agentic tasks: the last message that made no tool call, which bfcl-eval's
    agentic checker reads as the model's answer (None: there was none)."""


class StepResult(BaseModel):
    seq: int
    """The number of this step in the episode (1-based)."""
    messages: list[ObservationMessage]
    """The observation: one tool result per call, or the next question; empty when the
    episode ended."""
    terminated: bool
    truncated: bool
    reward: float
    turn: int
    evaluation: Evaluation | None = None
    """On the step that ends the episode: its evaluation. The episode is then closed
    (its final reply stays available for a retried step for a while)."""
