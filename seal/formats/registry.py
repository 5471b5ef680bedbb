"""Tool formats by name (`trainer.model.tool_format`, seal-eval's --tool-format), and
the default for a model.

    bfcl_qwen_fc  toolace_official_prompt  qwen2.5  qwen3  llama3.1  bfcl_prompt
    bfcl_qwen_fc_qwen3.5  qwen3.5

`auto` picks by model name (the paper's prompts for the paper's models, bfcl-eval's
handler's format for a model it ranks); any other name needs an explicit format. What each
format is and the `auto` rule: docs/tool_formats.md.
"""

from __future__ import annotations

import functools
import importlib

from seal.formats.base import ToolFormat

AUTO = "auto"
FORMATS = {
    "bfcl_qwen_fc": "seal.formats.paper_qwen:PaperQwenFormat",
    "toolace_official_prompt": "seal.formats.toolace:ToolAceFormat",
    "qwen2.5": "seal.formats.hermes:HermesFormat",
    "qwen3": "seal.formats.handler_format:QwenFCFormat",
    "llama3.1": "seal.formats.handler_format:LlamaJsonFormat",
    "bfcl_prompt": "seal.formats.handler_format:PythonListFormat",
    "bfcl_qwen_fc_qwen3.5": "seal.formats.qwen35:PaperQwen35Format",
    "qwen3.5": "seal.formats.qwen35:Qwen35XmlFormat",
}
PAPER_QWEN = "bfcl_qwen_fc"
PAPER_QWEN35 = "bfcl_qwen_fc_qwen3.5"
PAPER_TOOLACE = "toolace_official_prompt"
TOOLACE_PAPER_MODEL = "toolace-2-llama-3.1-8b"
"""The paper's ToolACE backbone (Team-ACE/ToolACE-2-Llama-3.1-8B, the release's path)."""
TINY_MODEL = "tiny-qwen2"
TINY_QWEN35 = "tiny-qwen3.5"


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
    if model == TINY_QWEN35 or "qwen3.5" in model.lower():
        return PAPER_QWEN35
    if model.rstrip("/").rsplit("/", 1)[-1].lower() == TOOLACE_PAPER_MODEL:
        return PAPER_TOOLACE
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
