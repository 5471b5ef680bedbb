"""A scripted policy that answers with the ground truth, and corruptions of it.

Used to prove the service right (the ground truth must pass; a corrupted one must get
exactly the official checker's verdict), to benchmark the service without a model, and
for the demonstration run. A scripted trajectory is a list of turns, each a list of
steps, each a list of `ToolCall`s; `assistant_messages` turns it into the raw assistant
texts a model would write.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from seal.bfcl.calls import ToolCall, parse_call_string
from seal.bfcl.multi_turn import BfclTask

Trajectory = list[list[list[ToolCall]]]  # turn -> step -> calls
END_OF_TURN_TEXT = "Done."


def with_keywords(call: ToolCall, doc: dict) -> ToolCall:
    """The same call with positional arguments named, as a JSON tool call must be.

    BFCL's docs list parameters in the order of the backend method's signature (checked
    for every positional ground-truth call), so position i is the i-th property.
    """
    if not call.args:
        return call
    names = list(doc["parameters"].get("properties", {}))
    return ToolCall(call.name, {**dict(zip(names, call.args, strict=False)), **call.kwargs})


def ground_truth_trajectory(task: BfclTask) -> Trajectory:
    """The ground truth as one step per turn (no step on empty-ground-truth turns)."""
    docs = {d["name"]: d for d in task.tools_until(task.num_turns)}
    trajectory = []
    for calls in task.ground_truth:
        parsed = [parse_call_string(s) for s in calls]
        step = [with_keywords(c, docs[c.name]) for c in parsed]
        trajectory.append([step] if step else [])
    return trajectory


def tool_call_text(calls: list[ToolCall]) -> str:
    """Calls as a Qwen2.5 assistant message body."""
    blocks = (
        "<tool_call>\n"
        + json.dumps({"name": c.name, "arguments": c.kwargs}, ensure_ascii=False)
        + "\n</tool_call>"
        for c in calls
    )
    return "\n".join(blocks)


def assistant_messages(
    trajectory: Trajectory,
    call_text: Callable[[list[ToolCall]], str] = tool_call_text,
    end_text: str = END_OF_TURN_TEXT,
) -> list[list[str]]:
    """Per turn, the assistant texts to send: one per step (the calls as `call_text`
    writes them, Qwen2.5 text by default; a tool format's `call_text` for another),
    then `end_text`, which answers and so ends the turn."""
    return [[call_text(step) for step in steps] + [end_text] for steps in trajectory]


def ground_truth_texts(
    task: BfclTask, call_text: Callable[[list[ToolCall]], str] = tool_call_text
) -> list[str]:
    """The ground-truth policy's assistant texts of `task`, all turns in order (one per
    generation), the calls written by `call_text`."""
    turns = assistant_messages(ground_truth_trajectory(task), call_text)
    return [text for turn in turns for text in turn]


def decoded_for_checker(trajectory: Trajectory) -> list[list[list[str]]]:
    """The trajectory in the official checker's input form (call strings per step)."""
    return [[[c.to_call_string() for c in step] for step in steps] for steps in trajectory]


# --- corruptions -------------------------------------------------------------------------


def drop_call(trajectory: Trajectory, turn: int, index: int) -> Trajectory:
    """The trajectory without the index-th call of `turn`."""
    out = [[list(step) for step in steps] for steps in trajectory]
    calls = [c for step in out[turn] for c in step]
    del calls[index]
    out[turn] = [calls] if calls else []
    return out


def skip_turn(trajectory: Trajectory, turn: int) -> Trajectory:
    """The trajectory with no call at all in `turn`."""
    out = [list(steps) for steps in trajectory]
    out[turn] = []
    return out


def duplicate_call(trajectory: Trajectory, turn: int, index: int) -> Trajectory:
    """The trajectory with the index-th call of `turn` made twice in a row."""
    out = [[list(step) for step in steps] for steps in trajectory]
    calls = [c for step in out[turn] for c in step]
    calls.insert(index, calls[index])
    out[turn] = [calls]
    return out
