"""The release's `/create` params, and this service's flat keys, as `EpisodeSettings`
(`translate_params`): every release key is honoured with the release's meaning or refused
(422), never dropped. The keys: docs/service.md, "The release protocol, route by
route".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from env_service import release_capability_file
from env_service.errors import InvalidRequestError
from seal.bfcl import tags as T
from seal.bfcl.tasks import CATEGORIES
from seal.service_contract import EpisodeSettings, InterfaceSettings

# The release's rollout modes that count as validation for its train-only layers.
_VALIDATION_MODES = {"validate", "validation", "val", "test"}

# Release params with one value this service implements; any other value is refused.
# key -> (served value, what the service does instead of the other values)
_FIXED = {
    "is_open_query": (False, "every BFCL turn is played; an open query is not supported"),
    "strict_tool_parser": (True, "malformed tool calls are always reported, never dropped"),
    "enforce_available_tools": (True, "tools not yet available are always refused"),
    "flag_python_literals_in_tool_json": (False, "JSON parse errors are reported as they are"),
    "accept_parameters_as_arguments": (False, 'a call must use the key "arguments"'),
}
# The release's modes this service speaks (env_service/release_texts.py): its three mode keys
# and reject_tool_call_with_content, each absent key at the release's default.
_RELEASE_DEFAULTS = {
    "tool_prompt_mode": "bfcl_qwen_fc",
    "tool_call_parser": "xml_json",
    "tool_result_mode": "bfcl_tool_response",
    "reject_tool_call_with_content": False,
}
_TEXT_OF_MODES = {
    # The paper's Qwen2.5 prompt (or this service's `prompt: rich`): <tool_call> blocks,
    # text beside them allowed.
    ("bfcl_qwen_fc", "xml_json", "bfcl_tool_response", False): "bfcl_qwen_fc",
    # The release's ToolACE mode as its ToolACE runs set it: call lists, nothing beside.
    ("toolace_official_prompt",) * 3 + (True,): "toolace_official_prompt",
}
# Release params naming files the release reads its tasks from; here tasks come from the
# pinned bfcl-eval package, so these cannot be honoured.
_TASK_FILES = {"data_path", "answer_path"}

# This service's own flat keys (docs/service.md, "The release protocol, route by route").
_FLAT_EVOLUTION = {
    "observation_lite": "schema_cues",
    "schema_cues": "schema_cues",
    "type_hints": "type_hints",
    "recovery_feedback": "recovery_feedback",
    "diagnostic_guidelines": "guidelines",
    "max_guidelines": "max_guidelines",
}
_REWARD_KEYS = {"partial_credit_cap", "partial_credit_weight"}
_TOP_KEYS = {"rollout_mode", "evolve_in_validation", "max_steps", "prompt"}
_SETTING_KEYS = {"terminate_on_parse_error": "end_on_malformed_call"}


class _TrainOnlyLayer(BaseModel):
    """The release's gate of an interface layer: on when enabled, off in validation unless
    `apply_to_validation`, and only for the listed categories when any are listed."""

    model_config = ConfigDict(extra="forbid")
    enable: bool = False
    apply_to_validation: bool = False
    categories: list[str] | str | None = None

    def applies(self, validating: bool, category: str) -> bool:
        if not self.enable or (validating and not self.apply_to_validation):
            return False
        wanted = [self.categories] if isinstance(self.categories, str) else self.categories
        return not wanted or category in wanted

    def check(self, name: str) -> None:
        wanted = [self.categories] if isinstance(self.categories, str) else self.categories or []
        unknown = sorted(set(wanted) - set(CATEGORIES))
        if unknown:
            raise InvalidRequestError(
                f"{name}.categories: unknown categories {unknown}; known: {list(CATEGORIES)}"
            )


class ReleaseObservationLite(_TrainOnlyLayer):
    """`observation_lite` as the release's config block (a dict) gives it."""

    add_required_hint: bool = True
    add_type_hint: bool = False
    add_enum_hint: bool = True
    hide_optional: bool = False
    instruction: str | None = None

    def check(self, name: str) -> None:
        super().check(name)
        if not self.enable:
            return  # the knobs below shape a layer that is off
        refused = {
            "add_required_hint": (
                not self.add_required_hint,
                "the schema cues always mark required parameters",
            ),
            "add_enum_hint": (
                not self.add_enum_hint,
                "the schema cues always surface allowed values",
            ),
            "hide_optional": (
                self.hide_optional,
                "optional parameters are always shown (marked [optional])",
            ),
            "instruction": (
                self.instruction is not None,
                "the note of the schema cues is fixed (interface_layers.OBSERVATION_NOTE)",
            ),
        }
        for key, (asked, reason) in refused.items():
            if asked:
                raise InvalidRequestError(
                    f"{name}.{key}={getattr(self, key)!r} cannot be honoured: {reason}"
                )


class ReleaseDiagnosticEvolution(_TrainOnlyLayer):
    """`diagnostic_evolution`: guidelines for prevalent, unsolved failure tags."""

    state_path: str | None = None
    """Refused: see `check`."""
    prevalence_threshold: float = Field(release_capability_file.DEFAULT_PREVALENCE, ge=0.0, le=1.0)
    reward_threshold: float = release_capability_file.DEFAULT_REWARD
    min_tag_count: int = Field(release_capability_file.DEFAULT_MIN_COUNT, ge=0)
    max_lines: int = Field(3, ge=0)
    category_tags: bool = False
    guidelines: dict[str, str | None] | None = None

    def check(self, name: str) -> None:
        super().check(name)
        # Refused whatever its value or the layer's switch, and before anything is opened:
        # the service reads only files its operator names at start. A path from a request
        # let any client stall the service (a FIFO), fill its memory (/dev/zero) or probe
        # which files exist. Refused rather than ignored with a warning because the
        # release's own clients never send it by default (its exp/SEAL.yaml has no
        # diagnostic_evolution block, and its env worker passes that config block as it
        # is): only a user who configured it sends it, and a 422 naming the option to use
        # tells them, where an ignored key would silently drop their guidelines.
        if self.state_path:
            raise InvalidRequestError(STATE_PATH_REFUSED.format(name=name))
        if not self.enable:
            return
        if self.guidelines:
            raise InvalidRequestError(
                f"{name}.guidelines cannot be honoured: the guideline texts are fixed "
                "(interface_layers.PAPER_GUIDELINES)"
            )

    def thresholds(self) -> dict:
        """The keys release_capability_file.release_profile takes."""
        return self.model_dump(
            include={"prevalence_threshold", "reward_threshold", "min_tag_count", "category_tags"}
        )

    def refuse_thresholds(self, name: str) -> None:
        """Without the release's state file the guidelines follow the service's profile
        (pushed by the trainer, or this project's --capability-state file), which is
        thresholded where it is made: the release's thresholds would be dropped."""
        defaults = ReleaseDiagnosticEvolution().thresholds()
        for key, value in self.thresholds().items():
            if value != defaults[key]:
                raise InvalidRequestError(
                    f"{name}.{key} applies to the original release's capability-state file "
                    "only, which the service reads when started with --capability-state "
                    "PATH; without one the guidelines follow the service's failure profile"
                )


STATE_PATH_REFUSED = (
    "{name}.state_path is not accepted: the service reads only the files its operator "
    "names when starting it; start it with --capability-state PATH (this service's or the "
    "original release's capability-state file) for guidelines from it"
)


class ReleaseToolFeedback(_TrainOnlyLayer):
    """`tool_feedback_evolution`: recovery hints on malformed calls and tool errors."""

    max_tool_names: int | None = None

    def check(self, name: str) -> None:
        super().check(name)
        if self.enable and self.max_tool_names is not None:
            raise InvalidRequestError(
                f"{name}.max_tool_names cannot be honoured: the recovery hints do not list tools"
            )


_RELEASE_LAYERS = {
    "observation_lite": ReleaseObservationLite,
    "diagnostic_evolution": ReleaseDiagnosticEvolution,
    "tool_feedback_evolution": ReleaseToolFeedback,
}


@dataclass
class CreateParams:
    settings: EpisodeSettings
    profile: dict | None
    """The failure profile for this episode; None: the service's own."""
    ignored: list[str]
    notes: dict[str, Any] = field(default_factory=dict)
    """What the client should see about its release layers (e.g. the state file used)."""
    release_text: str = "bfcl_qwen_fc"
    """The text the episode speaks (env_service/release_texts.py)."""


_SETTINGS = TypeAdapter(EpisodeSettings)
_INTERFACE = TypeAdapter(InterfaceSettings)


def _invalid(error: ValidationError) -> InvalidRequestError:
    return InvalidRequestError(f"invalid params: {error.errors(include_url=False)}")


def translate_params(
    params: dict, category: str, release_state_of: Callable[[], dict | None] = lambda: None
) -> CreateParams:
    """Episode settings for a task of `category` from release protocol `/create` params;
    `release_state_of()` is the release's capability state the operator gave the service,
    if any (EnvEngine.profiles.release_state), which `diagnostic_evolution` selects guidelines from."""
    flat_evo, reward, top, ignored = {}, {}, {}, []
    layers: dict[str, _TrainOnlyLayer] = {}
    for key, value in params.items():
        if key in _RELEASE_LAYERS and (key != "observation_lite" or isinstance(value, dict)):
            try:
                layers[key] = _RELEASE_LAYERS[key].model_validate(value)
            except ValidationError as e:
                raise _invalid(e) from None
            layers[key].check(key)
        elif key in _FLAT_EVOLUTION:
            flat_evo[_FLAT_EVOLUTION[key]] = value
        elif key in _REWARD_KEYS:
            reward[key] = value
        elif key in _TOP_KEYS:
            top[key] = value
        elif key in _SETTING_KEYS:
            top[_SETTING_KEYS[key]] = value
        elif key in _RELEASE_DEFAULTS:
            pass  # read together below
        elif key in _FIXED:
            served, reason = _FIXED[key]
            if value != served:
                raise InvalidRequestError(
                    f"{key}={value!r} is not supported (only {served!r}): {reason}"
                )
        elif key in _TASK_FILES:
            raise InvalidRequestError(
                f"{key} is not supported: tasks come from the bfcl-eval package "
                "(ids multi_turn_<category>_<k>, or the release's row numbers)"
            )
        else:
            ignored.append(key)

    release_text = _release_text(params)
    if release_text != "bfcl_qwen_fc" and top.get("prompt", "paper") != "paper":
        raise InvalidRequestError(f"{release_text} is the paper's prompt: `prompt` must be paper")
    mode = top.pop("rollout_mode", "sample")
    if isinstance(mode, str) and mode.lower() in _VALIDATION_MODES:
        mode = "validate"
    if "max_steps" in top:  # the release's name for the episode's generation limit
        top["limits"] = {"max_generations": top.pop("max_steps")}
    try:
        base = _SETTINGS.validate_python({"mode": mode, "reward": reward, **top})
        flat = _INTERFACE.validate_python(flat_evo)
    except ValidationError as e:
        raise _invalid(e) from None
    _refuse_twice(params, layers)

    # Each layer is gated here by its own rule, so the engine gets the final layers: our
    # flat keys by evolve_in_validation, each release block by its own apply_to_validation.
    validating = base.mode == "validate"
    flat_on = not validating or base.evolve_in_validation
    evo = {
        "schema_cues": flat.schema_cues and flat_on,
        "type_hints": flat.type_hints,
        "recovery_feedback": flat.recovery_feedback and flat_on,
        "guidelines": flat.guidelines and flat_on,
        "max_guidelines": flat.max_guidelines,
    }
    notes: dict[str, Any] = {}
    profile = None
    if lite := layers.get("observation_lite"):
        evo["schema_cues"] = lite.applies(validating, category)
        evo["type_hints"] = lite.add_type_hint
    if feedback := layers.get("tool_feedback_evolution"):
        evo["recovery_feedback"] = feedback.applies(validating, category)
    if diag := layers.get("diagnostic_evolution"):
        evo["guidelines"] = diag.applies(validating, category)
        # The release has five guidelines; a larger max_lines shows them all, as there.
        evo["max_guidelines"] = min(diag.max_lines, len(T.FAILURE_TAGS))
        release = release_state_of() if diag.enable else None
        if diag.enable and release is None:
            diag.refuse_thresholds("diagnostic_evolution")
        if evo["guidelines"] and release is not None:
            profile = release_capability_file.release_profile(
                release, category, **diag.thresholds()
            )
            notes["diagnostic_evolution"] = {
                "source": "--capability-state (the original release's capability state)",
                "guideline_tags": [e["tag"] for e in profile["tags"]][: evo["max_guidelines"]],
            }
    interface = _INTERFACE.validate_python(evo)
    # evolve_in_validation only tells the engine to keep these already-gated layers.
    settings = dataclasses.replace(
        base, interface=interface, evolve_in_validation=validating and interface.any
    )
    release_text = release_text if settings.prompt == "paper" else "qwen2.5"
    return CreateParams(settings, profile, sorted(ignored), notes, release_text)


def _release_text(params: dict) -> str:
    """The release text the release's mode keys ask for; refused (422) unless they name one
    of the modes this service speaks, as a whole."""
    asked = tuple(params.get(k, default) for k, default in _RELEASE_DEFAULTS.items())
    if asked in _TEXT_OF_MODES:
        return _TEXT_OF_MODES[asked]
    served = " or ".join(
        ", ".join(f"{k}={v!r}" for k, v in zip(_RELEASE_DEFAULTS, modes, strict=True))
        for modes in _TEXT_OF_MODES
    )
    given = {k: params[k] for k in _RELEASE_DEFAULTS if k in params}
    raise InvalidRequestError(
        f"{given} is not supported: this service speaks {served} (absent keys at the "
        "release's defaults)"
    )


def _refuse_twice(params: dict, layers: dict) -> None:
    """A layer switched by a release block and by one of our flat keys is ambiguous."""
    flat_keys = {
        "observation_lite": ("schema_cues", "type_hints"),
        "tool_feedback_evolution": ("recovery_feedback",),
        "diagnostic_evolution": ("diagnostic_guidelines", "max_guidelines"),
    }
    for block in layers:
        both = [k for k in flat_keys[block] if k in params]
        if both:
            raise InvalidRequestError(f"{block} and {both} set the same layer; give one")
