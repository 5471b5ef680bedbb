"""bfcl-eval's own multi-turn inference loop, run with a scripted model: the reference the
tool-format tests compare the service's prompts with (tests/seal/formats/test_formats.py,
tests/seal/formats/test_agentic_formats.py)."""

from __future__ import annotations

import itertools

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

from seal.formats.bfcl_handlers import build_handler
from seal.formats.handler_format import HandlerFormat, _completion

_RUNS = itertools.count()


def bfcl_inference_prompts(fmt: HandlerFormat, entry: dict, texts: list[str]) -> list[str]:
    """The prompts `inference_multi_turn_prompting` builds for the test case `entry` (a
    copy: it is changed) when its model answers with `texts`, in a fresh handler."""
    handler = build_handler(fmt.entry)
    # bfcl-eval's executor keeps backend instances per (model name, task id) in its
    # globals: a fresh namespace, or a second run of a task continues the first's state.
    handler.model_name_underline_replaced += f"_{next(_RUNS)}"
    script, prompts = iter(texts), []

    def query(inference_data):
        prompts.append(
            handler._format_prompt(inference_data["message"], inference_data["function"])
        )
        return _completion(next(script)), 0.0

    handler._query_prompting = query
    try:
        handler.inference_multi_turn_prompting(
            entry, include_input_log=False, exclude_state_log=True
        )
    finally:
        # Those instances are this run's alone; left there, the official checker's tests
        # (tests/bfcl_official.py, bfcl_globals_left) would see them.
        prefix = handler.model_name_underline_replaced
        for key in [k for k in vars(multi_turn_utils) if k.startswith(prefix)]:
            delattr(multi_turn_utils, key)
    return prompts
