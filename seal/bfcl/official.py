"""bfcl-eval's official multi-turn checker as a reference oracle, isolated per call.

Used by tests and `scripts/check_agreement.py` to show that the service's diagnosis
agrees with BFCL; never by the service itself, because the official executor `eval`s
call strings. Inputs here are ground-truth strings (or corruptions of them), never model
text. Each check runs under a fresh model name, and the backend instances bfcl-eval
caches in its executor's module globals for that name are deleted afterwards.
"""

from __future__ import annotations

import uuid

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

from seal.bfcl.tasks import BfclTask


def official_accuracy(task: BfclTask, decoded: list[list[list[str]]]) -> int:
    """1 if bfcl-eval's checker passes `decoded` (per turn, per step, call strings), else 0."""
    model_name = f"oracle_{uuid.uuid4().hex}"
    entry = {
        "id": task.task_id,
        "initial_config": task.initial_config,
        "involved_classes": task.involved_classes,
    }
    try:
        result = multi_turn_checker(decoded, task.ground_truth, entry, task.category, model_name)
    finally:
        leftover = [k for k in vars(multi_turn_utils) if k.startswith(model_name)]
        for key in leftover:
            delattr(multi_turn_utils, key)
    return int(result["valid"])


def bfcl_globals_left() -> list[str]:
    """Backend instances currently cached in bfcl-eval's executor globals (should be none)."""
    return [k for k in vars(multi_turn_utils) if k.endswith("_instance")]
