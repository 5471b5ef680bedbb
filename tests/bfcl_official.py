"""Test oracle: bfcl-eval's official multi-turn checker, isolated per call.

Used by tests and `tests/check_agreement.py` to show that the service's diagnosis
agrees with BFCL; never by the service itself, because the official executor `eval`s
call strings. Inputs here are ground-truth strings (or corruptions of them), never model
text. Each check runs under a fresh model name, and the backend instances bfcl-eval
caches in its executor's module globals for that name are deleted afterwards, and the
mutable default arguments its backends mutate (see seal.bfcl.backends) are restored,
so every check sees what a fresh BFCL process would.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import types
import uuid

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from seal.bfcl.multi_turn import BfclTask
from seal.bfcl.official_executor import fresh_backends


def official_accuracy(task: BfclTask, decoded: list[list[list[str]]]) -> int:
    """1 if bfcl-eval's checker passes `decoded` (per turn, per step, call strings), else 0."""
    model_name = f"oracle_{uuid.uuid4().hex}"
    entry = {
        "id": task.task_id,
        "initial_config": task.initial_config,
        "involved_classes": task.involved_classes,
    }
    with fresh_backends([model_name], task.involved_classes):
        result = multi_turn_checker(decoded, task.ground_truth, entry, task.category, model_name)
    return int(result["valid"])


def bfcl_globals_left() -> list[str]:
    """Backend instances currently cached in bfcl-eval's executor globals (should be none)."""
    return [k for k in vars(multi_turn_utils) if k.endswith("_instance")]


class _StubClass(type):
    """A stand-in class whose attributes are stand-ins too (annotations like
    `cohere.types.ToolV2` evaluate)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubClass(name, (), {"__init__": lambda self, *args, **kwargs: None})


class _StubModule(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubClass(name, (), {"__init__": lambda self, *args, **kwargs: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self):
        self.names: set[str] = set()

    def find_spec(self, fullname, path, target=None):
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        pass


def bfcl_entry_evaluator():
    """bfcl-eval's own `_evaluate_single_multi_turn_entry` (its eval runner's per-task
    check). Its module imports bfcl's model map, which imports 40 API clients that are not
    installed (pyproject.toml says why): they are stood in for while it imports, then
    removed again, so nothing else sees them."""
    finder = _StubFinder()
    sys.meta_path.insert(0, finder)
    try:
        for _ in range(50):
            try:
                from bfcl_eval.eval_checker import eval_runner

                return eval_runner._evaluate_single_multi_turn_entry
            except ModuleNotFoundError as error:
                finder.names.add(error.name.split(".")[0])
            except ImportError as error:  # `from google import genai`: a missing submodule
                found = re.match(r"cannot import name '(\w+)' from '([\w.]+)'", str(error))
                finder.names.add(f"{found.group(2)}.{found.group(1)}")
            for name in [m for m in sys.modules if m.startswith("bfcl_eval.")]:
                if name.startswith(
                    ("bfcl_eval.eval_checker.eval_runner", "bfcl_eval.constants.model_config")
                ):
                    del sys.modules[name]
        raise ImportError(f"bfcl-eval's eval runner does not import: stood in for {finder.names}")
    finally:
        sys.meta_path.remove(finder)
        for name in [
            m for m in sys.modules if any(m == n or m.startswith(n + ".") for n in finder.names)
        ]:
            del sys.modules[name]
