"""Resource guards and tool-error handling: a model call cannot stall the service, and
failures BFCL's backends return (rather than raise) are counted and get recovery hints."""

from __future__ import annotations

import pytest

from env_service.interface_layers import add_schema_cues, allowed_values
from seal.bfcl.backends import ERROR_PREFIX, Backends, cost_error, is_tool_error
from seal.bfcl.calls import ToolCall
from seal.bfcl.diagnosis import diagnose
from seal.bfcl.tasks import load_task

MATH_TASK = "multi_turn_base_15"  # GorillaFileSystem + MathAPI


@pytest.mark.parametrize(
    "call",
    [
        ToolCall("power", {"base": 10, "exponent": 10**7}),
        ToolCall("power", {"base": 2**3000, "exponent": 1000}),
        ToolCall("logarithm", {"value": 10.0, "base": 3.0, "precision": 10**6}),
        ToolCall("square_root", {"number": 2.0, "precision": 10**7}),
    ],
)
def test_costly_calls_are_refused_quickly(call):
    """Refused before BFCL's method runs (a timer would measure the machine's load: the
    refusal is microseconds, the computation seconds to minutes)."""
    backends = Backends(load_task(MATH_TASK))
    ran = []
    setattr(backends.instances["MathAPI"], call.name, lambda **kwargs: ran.append(kwargs))
    result = backends.call(call)
    assert result.startswith(ERROR_PREFIX) and "limit" in result, result
    assert ran == [], f"{call.name} reached BFCL's MathAPI"


def test_ordinary_math_is_unchanged():
    backends = Backends(load_task(MATH_TASK))
    assert cost_error(ToolCall("power", {"base": 2, "exponent": 10})) is None
    assert backends.call(ToolCall("power", {"base": 2, "exponent": 10})) == '{"result": 1024}'
    assert backends.call(ToolCall("power", {"base": 2.5, "exponent": 2.0})) == '{"result": 6.25}'
    # BFCL formats this one with str(): a Decimal inside a dict that json cannot encode.
    assert backends.call(ToolCall("square_root", {"number": 16.0, "precision": 5})) == (
        "{'result': Decimal('4')}"
    )


def test_refused_call_replays_identically_in_the_diagnosis(monkeypatch):
    from bfcl_eval.eval_checker.multi_turn_eval.func_source_code.math_api import MathAPI

    ran = []
    real_power = MathAPI.power
    monkeypatch.setattr(
        MathAPI, "power", lambda self, **kw: ran.append(kw) or real_power(self, **kw)
    )
    task = load_task(MATH_TASK)
    huge = ToolCall("power", {"base": 10, "exponent": 10**7})
    diagnosis = diagnose(task, [[[huge]]])
    assert diagnosis.accuracy == 0
    assert {"base": 10, "exponent": 10**7} not in ran, "the replay computed 10**10**7"


@pytest.mark.parametrize("prompt", ["paper", "rich"])
def test_returned_error_dicts_count_as_tool_errors(service, prompt):
    svc = service()
    episode_id, _ = svc.create(
        "multi_turn_base_150", prompt=prompt, interface={"recovery_feedback": True}
    )
    # TravelAPI answers a bad token with {..., "error": ...} instead of raising.
    arguments = {"access_token": "nope", "booking_id": "1"}
    [message] = svc.call(episode_id, "cancel_booking", arguments)["messages"]
    assert '"error": "Invalid access token"' in message["content"]
    if prompt == "paper":  # the paper's hint follows the result (its D.3)
        assert message["hint"].startswith("`cancel_booking_1` returned an error.")
    else:
        assert "Hint:" in message["content"]
    assert svc.evaluate(episode_id)["tool_errors"] == 1


def test_is_tool_error():
    assert is_tool_error(f"{ERROR_PREFIX}boom")
    assert is_tool_error('{"error": "User not authenticated."}')
    assert is_tool_error('{"cancel_status": false, "error": "Invalid access token"}')
    assert not is_tool_error('{"note": "the word \\"error\\" in a value"}')
    assert not is_tool_error('{"result": 3}')
    assert not is_tool_error('{"message": "error free"}')


def test_enums_without_brackets_and_on_arrays():
    assert allowed_values("The base currency. [Enum]: USD, RMB, EUR") == ["USD", "RMB", "EUR"]
    task = load_task("multi_turn_base_50")  # VehicleControlAPI
    doc = next(d for d in task.tools if d["name"] == "lockDoors")
    cued = add_schema_cues(doc, type_hints=False)
    door = cued["parameters"]["properties"]["door"]
    assert door["items"]["enum"] == ["driver", "passenger", "rear_left", "rear_right"]
    assert "Allowed values: driver, passenger" in door["description"]
    hinted = add_schema_cues(doc, type_hints=True)["parameters"]["properties"]["door"]
    assert hinted["description"].endswith("Expects a JSON list.")
