"""Tool formats by name (`trainer.model.tool_format`, seal-eval's --tool-format), and
the default for a model.

    bfcl_qwen_fc the paper's Qwen2.5 prompt, byte for byte the original release's
                 (`<tool_call>` JSON blocks; seal/formats/paper_qwen.py)
    qwen2.5      this project's richer Qwen2.5 prompt (the template's own `tools=`
                 rendering, instructions; beyond the paper: seal/formats/hermes.py)
    qwen3        Qwen3 instruct, bfcl-eval's QwenFCHandler
    llama3.1     Llama 3.1 JSON tool calls, bfcl-eval's LlamaHandler_3_1
    bfcl_prompt  BFCL's prompt mode, Python-style call lists in Llama 3's layout
                 (bfcl-eval's LlamaHandler: ToolACE-2-8B, watt-tool-8B)

`auto` picks by model name: Qwen2.5 models (and the tiny test model) use bfcl_qwen_fc, the
paper's prompt (bfcl-eval does not rank Qwen2.5); any other model bfcl-eval ranks uses
the format of its handler there, function-calling mode first (`<name>-FC`). Any other
name needs an explicit one.
"""

from __future__ import annotations

import functools
import importlib

from seal.formats.base import ToolFormat

AUTO = "auto"
FORMATS = {
    "bfcl_qwen_fc": "seal.formats.paper_qwen:PaperQwenFormat",
    "qwen2.5": "seal.formats.hermes:HermesFormat",
    "qwen3": "seal.formats.handler_format:QwenFCFormat",
    "llama3.1": "seal.formats.handler_format:LlamaJsonFormat",
    "bfcl_prompt": "seal.formats.handler_format:PythonListFormat",
}
PAPER_QWEN = "bfcl_qwen_fc"
TINY_MODEL = "tiny-qwen2"


def _format_class(name: str) -> type[ToolFormat]:
    module, cls = FORMATS[name].split(":")
    return getattr(importlib.import_module(module), cls)


@functools.cache
def get_format(name: str) -> ToolFormat:
    """The format called `name` (one instance per process: building a bfcl-eval handler
    imports its modules)."""
    if name not in FORMATS:
        raise ValueError(f"unknown tool format {name!r}; known: {', '.join(FORMATS)}")
    return _format_class(name)()


def default_format(model: str) -> str:
    """The format `auto` means for `model` (a Hugging Face name); see the module docstring."""
    if model == TINY_MODEL or "qwen2.5" in model.lower():
        return PAPER_QWEN
    from seal.formats.bfcl_handlers import ranked_entry, registry_entry

    by_handler = {
        registry_entry(_format_class(n).REGISTRY_NAME).handler_class: n
        for n in FORMATS
        if hasattr(_format_class(n), "REGISTRY_NAME")
    }
    entry = ranked_entry(model)
    if entry is not None and entry.handler_class in by_handler:
        return by_handler[entry.handler_class]
    raise ValueError(
        f"no default tool format for model {model!r}: set trainer.model.tool_format "
        f"(seal-eval: --tool-format) to one of {', '.join(FORMATS)}"
    )


def resolve(tool_format: str, model: str) -> ToolFormat:
    """The format a run uses: `tool_format`, or with `auto` the default for `model`."""
    return get_format(default_format(model) if tool_format == AUTO else tool_format)
