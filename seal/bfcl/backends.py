"""BFCL's executable backends, one private set of instances per episode or check.

bfcl-eval's own executor `eval`s a string per call and caches instances in module globals,
so two checks of one episode share mutated state. Here every `Backends` owns fresh
instances, calls methods by name with the parsed arguments as data, deep-copies arguments
and mutable defaults, and stringifies results as bfcl-eval does. BFCL V4 agentic tasks use
the same path with their own backends (seal/bfcl/agentic/backends.py). Why each rule:
docs/service.md, "Facts about BFCL found on the way".
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import json

from bfcl_eval.constants.executable_backend_config import (
    CLASS_FILE_PATH_MAPPING,
    STATELESS_CLASSES,
)

from seal.bfcl.calls import ToolCall, json_failure
from seal.bfcl.multi_turn import BfclTask

ERROR_PREFIX = "Error during execution: "
MULTI_TURN_CLASSES = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


@functools.cache
def backend_class(class_name: str) -> type:
    """bfcl-eval's backend class of this name, imported once per process."""
    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)


# Arguments whose cost grows without bound: `power(10, 10**7)` held the event loop (and so
# every live episode) for 7.6 s, and mpmath/decimal precision is as costly. BFCL's tasks
# stay far inside these limits; a call beyond them is answered with an error instead.
MAX_PRECISION = 1_000
MAX_POWER_RESULT_BITS = 1_000_000
# MessageAPI draws message ids at random from 90,000 and retries until it finds an unused
# one, forever once all are used (~34 requests of 2,570 send_message calls did it: the
# service hung for good). At half of them used a draw succeeds in 2 tries on average.
MAX_MESSAGE_IDS = 45_000


def cost_error(call: ToolCall, instance: object = None) -> str | None:
    """Why running `call` (on `instance`, its backend) could take unbounded time, or None."""
    kw = call.kwargs
    if call.name == "send_message" and instance is not None:
        used = len(getattr(instance, "generated_ids", ()))
        if used >= MAX_MESSAGE_IDS:
            return (
                f"this episode has used {used} message ids, the service's limit "
                f"(BFCL's MessageAPI has 90,000 and never returns once they run out)"
            )
    if call.name in ("logarithm", "square_root", "round_number"):
        for key in ("precision", "decimal_places"):
            value = kw.get(key)
            if isinstance(value, int) and abs(value) > MAX_PRECISION:
                return f"{key}={value} exceeds the service's limit of {MAX_PRECISION}"
    if call.name == "power":
        base, exponent = kw.get("base"), kw.get("exponent")
        ints = isinstance(base, int) and isinstance(exponent, int)
        if ints and abs(base) > 1 and exponent * abs(base).bit_length() > MAX_POWER_RESULT_BITS:
            return f"the result of {base}**{exponent} would exceed the service's size limit"
    return None


def is_tool_error(result: str) -> bool:
    """A call that failed: it raised, or it returned a dict with an `error` key (how most
    BFCL backends report failure, e.g. {"cancel_status": false, "error": "Invalid token"})."""
    if result.startswith(ERROR_PREFIX):
        return True
    if not result.startswith("{") or '"error"' not in result:
        return False
    try:
        return "error" in json.loads(result)
    except ValueError:
        return False


def preload_backends() -> None:
    """Import the multi-turn backends now (MathAPI pulls in mpmath: ~0.3 s on first use)."""
    for class_name in MULTI_TURN_CLASSES:
        backend_class(class_name)


@functools.cache
def _public_methods(cls: type) -> tuple[str, ...]:
    # What bfcl-eval's executor maps per instance; cached because inspecting a class on
    # every episode was a visible share of the service's CPU.
    return tuple(n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_"))


@functools.cache
def mutable_defaults(cls: type) -> dict[str, tuple[list[str], dict[str, object]]]:
    """Per public method with mutable defaults: its parameter order and pristine copies
    of those defaults, taken the first time the class is used in this process."""
    found = {}
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        params = list(inspect.signature(fn).parameters.values())[1:]  # drop self
        mutable = {p.name: p.default for p in params if isinstance(p.default, (list, dict, set))}
        if mutable and not name.startswith("_"):
            found[name] = ([p.name for p in params], copy.deepcopy(mutable))
    return found


def format_result(value: object) -> str:
    """A method's return value as the string bfcl-eval's executor would record."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class Backends:
    """Fresh backend instances for one task, and a data-only way to call their methods."""

    def __init__(self, task: BfclTask):
        self.task = task
        self.instances: dict[str, object] = {}
        self._owner: dict[str, str] = {}
        for class_name in task.involved_classes:
            instance = self._class(class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(self._scenario(class_name), long_context=task.long_context)
            if task.long_context:
                # Long-context scenarios insert bfcl-eval's module-level extension objects
                # by reference (TravelAPI's CREDIT_CARD_EXTENSION cards: a booking in one
                # episode charged every later episode's card, 5000 -> 3900). One deep copy
                # of the loaded state (under a millisecond a create) makes all of it this
                # episode's own; tests/env_service/test_isolation.py checks no object is shared,
                # for every task.
                vars(instance).update(copy.deepcopy(vars(instance)))
            self.instances[class_name] = instance
            # Later classes win on a shared method name, as in bfcl-eval's executor.
            for name in _public_methods(type(instance)):
                self._owner[name] = class_name

    def _class(self, class_name: str) -> type:
        """The backend class of this name (a kind of task may load its own its way)."""
        return backend_class(class_name)

    def _scenario(self, class_name: str) -> dict:
        """The state that backend starts from: the task's."""
        return self.task.backend_config(class_name)

    def call(self, call: ToolCall) -> str:
        """Run one call; a backend exception becomes bfcl-eval's error string, as in BFCL."""
        if call.name not in self._owner:
            return f"{ERROR_PREFIX}no backend method named {call.name!r}"
        instance = self.instances[self._owner[call.name]]
        if reason := cost_error(call, instance):
            return f"{ERROR_PREFIX}{reason}"
        method = getattr(instance, call.name)
        args, kwargs = copy.deepcopy(call.args), copy.deepcopy(call.kwargs)
        if call.name in mutable_defaults(type(instance)):
            order, defaults = mutable_defaults(type(instance))[call.name]
            given = set(order[: len(args)]) | set(kwargs)
            kwargs |= {p: copy.deepcopy(v) for p, v in defaults.items() if p not in given}
        try:
            value = method(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - backends raise anything; BFCL records it
            return f"{ERROR_PREFIX}{e}"
        try:
            return format_result(value)
        except (ValueError, RecursionError) as e:
            # e.g. multiply() of two 4,000-digit integers: Python will not print the
            # product (over 4,300 digits), and json.dumps and str() both raise.
            return f"{ERROR_PREFIX}the result cannot be written out ({json_failure(e)})"
