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

import contextlib
import copy
import importlib
import uuid

from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from seal.bfcl.backends import mutable_defaults
from seal.bfcl.multi_turn import BfclTask


def official_accuracy(task: BfclTask, decoded: list[list[list[str]]]) -> int:
    """1 if bfcl-eval's checker passes `decoded` (per turn, per step, call strings), else 0."""
    model_name = f"oracle_{uuid.uuid4().hex}"
    entry = {
        "id": task.task_id,
        "initial_config": task.initial_config,
        "involved_classes": task.involved_classes,
    }
    with fresh_backends(model_name, task.involved_classes):
        result = multi_turn_checker(decoded, task.ground_truth, entry, task.category, model_name)
    return int(result["valid"])


@contextlib.contextmanager
def fresh_backends(model_name: str, class_names: list[str]):
    """Run bfcl-eval's executor under `model_name` as a fresh BFCL process would: afterwards
    its cached instances for that name are deleted and the backends' mutated default
    arguments restored."""
    saved = _save_defaults(class_names)
    try:
        yield
    finally:
        _restore_defaults(saved)
        leftover = [k for k in vars(multi_turn_utils) if k.startswith(model_name)]
        for key in leftover:
            delattr(multi_turn_utils, key)


def _save_defaults(class_names: list[str]) -> list[tuple[object, tuple]]:
    saved = []
    for name in class_names:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)
        for method in mutable_defaults(cls):
            fn = getattr(cls, method)
            saved.append((fn, copy.deepcopy(fn.__defaults__)))
    return saved


def _restore_defaults(saved: list[tuple[object, tuple]]) -> None:
    # Plain attribute assignment on bfcl-eval's functions, only in this oracle, only to
    # undo what the official executor just did to them.
    for fn, defaults in saved:
        fn.__defaults__ = defaults


def bfcl_globals_left() -> list[str]:
    """Backend instances currently cached in bfcl-eval's executor globals (should be none)."""
    return [k for k in vars(multi_turn_utils) if k.endswith("_instance")]
