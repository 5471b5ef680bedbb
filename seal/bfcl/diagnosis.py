"""Verification and diagnosis of one episode: a failure tag per ground-truth turn.

The model's executed calls and the ground truth are replayed turn by turn in two private
namespaces, and each turn gets the first tag whose condition holds, with bfcl-eval's own
pure checkers, so accuracy equals bfcl-eval's `multi_turn_checker` verdict (the tag table,
the digests that bound memory, the interleaving: docs/design.md, "Diagnosis").
`paper_label` gives a failed episode one of the paper's trajectory labels (its Table 5,
docs/diagnosis_labels.md).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Generator
from dataclasses import dataclass

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
    response_checker,
    state_checker,
)

from seal.bfcl import tags as T
from seal.bfcl.backends import ERROR_PREFIX, Backends
from seal.bfcl.calls import ToolCall, parse_call_string
from seal.bfcl.multi_turn import BfclTask

# Ground-truth strings repeat across episodes; parsing them once is safe because
# Backends.call copies arguments before every call.
_parse_gt = functools.lru_cache(maxsize=16384)(parse_call_string)

# A turn of model calls: one list of executed calls per generation in that turn.
ModelTurn = list[list[ToolCall]]

DIGEST_OVER = 1024
"""Results longer than this are compared by digest (sha256 of the text, and its length)."""


def comparable(result: str) -> str:
    """`result`, or for a long one a short string equal exactly when the results are."""
    if len(result) <= DIGEST_OVER:
        return result
    digest = hashlib.sha256(result.encode("utf-8", "surrogatepass")).hexdigest()
    return f"<sha256 {digest}, {len(result)} characters>"


@dataclass(frozen=True)
class Diagnosis:
    tags: list[str]
    """One failure tag per ground-truth turn."""
    accuracy: int
    """1 when the official checker would pass the episode, else 0."""
    progress: float
    """The release's per-turn progress (`progress_counts`): turns tagged pass over the
    turns with a non-empty ground truth."""
    notes: list[str]
    """Per turn, a short human-readable reason for the tag ('' for pass)."""


def diagnose(task: BfclTask, model_turns: list[ModelTurn]) -> Diagnosis:
    """Tag every ground-truth turn; `model_turns` may be shorter than the task (early stop)."""
    steps = diagnose_steps(task, model_turns)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def diagnose_steps(
    task: BfclTask, model_turns: list[ModelTurn]
) -> Generator[None, None, Diagnosis]:
    """`diagnose`, yielding after every call it replays; returns the Diagnosis."""
    model_ns, gt_ns = Backends(task), Backends(task)
    model_results_so_far: list[str] = []
    tags, notes = [], []
    for turn, gt_strings in enumerate(task.ground_truth):
        steps = model_turns[turn] if turn < len(model_turns) else []
        model_calls = [call for step in steps for call in step]
        for call in model_calls:
            model_results_so_far.append(comparable(model_ns.call(call)))
            yield
        try:
            gt_results = []
            for s in gt_strings:
                gt_results.append(gt_ns.call(_parse_gt(s)))
                yield
        except ValueError as e:
            tag, note = T.GT_ERROR, str(e)
        else:
            tag, note = _tag_turn(
                gt_ns, model_ns, gt_strings, gt_results, model_calls, model_results_so_far, turn
            )
        tags.append(tag)
        notes.append(note)
    return _summarise(task, tags, notes)


def _tag_turn(gt_ns, model_ns, gt_strings, gt_results, model_calls, model_results_so_far, turn):
    failed = [r for r in gt_results if r.startswith(ERROR_PREFIX)]
    if failed:
        return T.GT_ERROR, f"ground truth raised: {failed[0]}"
    if not gt_strings:
        if model_calls:
            return T.SPURIOUS_TOOL_CALL, f"{len(model_calls)} call(s) where none were expected"
        return T.CORRECT_ABSTENTION, ""
    if not model_calls:
        return T.EMPTY_TURN_MODEL_RESPONSE, "no tool call in a turn that needs one"
    if set(model_ns.instances) != set(gt_ns.instances):
        return T.INSTANCE_MISMATCH, "different backend classes"
    try:
        state = state_checker(model_ns.instances, gt_ns.instances)
        if not state["valid"]:
            return T.STATE_MISMATCH, state["error_message"]
        response = response_checker(model_results_so_far, [comparable(r) for r in gt_results], turn)
        if not response["valid"]:
            missing = response["details"]["missing_items"]
            return T.RESPONSE_MISMATCH, f"{len(missing)} expected result(s) missing"
    except Exception as e:  # noqa: BLE001 - any comparison failure is the checker's, not the model's
        return T.CHECKER_ERROR, f"{type(e).__name__}: {e}"
    return T.PASS, ""


def progress_counts(tags: list[str], ground_truth: list[list[str]]) -> tuple[int, int]:
    """(passed, scorable) turns as the release's grader counts them
    (its multi_turn_progress.compute_per_turn_progress): a turn is scorable when its
    ground truth is non-empty, and passed when it is also tagged `pass`. A turn with an
    empty ground truth is neither (a correct abstention earns nothing); a scorable turn
    whose check raised (`gt_error`, `checker_error`) counts as failed, as there."""
    scorable = [tag for tag, gt in zip(tags, ground_truth, strict=True) if gt]
    return sum(tag == T.PASS for tag in scorable), len(scorable)


def _summarise(task: BfclTask, tags: list[str], notes: list[str]) -> Diagnosis:
    passed, scorable = progress_counts(tags, task.ground_truth)
    accuracy = int(passed == scorable)
    progress = passed / scorable if scorable else 0.0
    return Diagnosis(tags=tags, accuracy=accuracy, progress=progress, notes=notes)


# --- the paper's trajectory label (Table 5) --------------------------------------------------

INVALID_CALL_KINDS = frozenset({"parse", "unknown_tool", "unavailable_tool"})
"""Rejections (env_service/episode.py's `invalid_by_kind`) that make a call invalid: it
could not be read, or names a tool that does not exist or is not available yet."""
ARGUMENT_KINDS = frozenset({"missing_argument", "unexpected_argument"})
"""Rejections of a call to a valid tool for its arguments: a required one missing, or a
name the tool's signature does not have."""
TOOL_ERROR = "tool_error"
"""A call that ran and failed in its backend (raised, or answered {"error": ...})."""

_STATE_TAGS = frozenset({T.STATE_MISMATCH, T.INSTANCE_MISMATCH})
_NOT_THE_MODELS = frozenset({T.GT_ERROR, T.CHECKER_ERROR})


def deciding_turn(tags: list[str], ground_truth: list[list[str]]) -> int | None:
    """The first turn with a non-empty ground truth that is not `pass`: where the official
    checker stops and fails the episode. None when every such turn passed."""
    for turn, (tag, gt) in enumerate(zip(tags, ground_truth, strict=True)):
        if gt and tag != T.PASS:
            return turn
    return None


def paper_label(
    tags: list[str], ground_truth: list[list[str]], turn_signals: list[dict[str, int]]
) -> str | None:
    """One of the paper's labels (tags.PAPER_LABELS) for a failed episode, None for a
    passed one or one whose failure says nothing about the model.

    The label is the failing turn's (`deciding_turn`), from that turn's tag and
    `turn_signals[turn]` (counts of the call rejections and tool errors the episode
    answered in that turn, keyed by rejection kind and TOOL_ERROR); the first rule that
    holds in the paper's priority order, as listed in docs/diagnosis_labels.md.
    """
    turn = deciding_turn(tags, ground_truth)
    if turn is None or tags[turn] in _NOT_THE_MODELS:
        return None
    tag, signals = tags[turn], turn_signals[turn]
    if any(signals.get(kind) for kind in INVALID_CALL_KINDS):
        return T.INVALID_TOOL_CALL
    if any(signals.get(kind) for kind in ARGUMENT_KINDS):
        return T.ARGUMENT_MISMATCH
    if tag in _STATE_TAGS:
        return T.STATE_MISMATCH_LABEL
    if signals.get(TOOL_ERROR):
        return T.RECOVERY_FAILURE
    if tag == T.EMPTY_TURN_MODEL_RESPONSE:
        return T.MISSING_TOOL_CALL
    if tag == T.RESPONSE_MISMATCH:
        return T.RESPONSE_MISMATCH_LABEL
    raise ValueError(f"turn {turn} fails the episode with tag {tag!r}, which no label maps")
