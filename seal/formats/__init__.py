"""Tool formats: how each model family sees a BFCL episode and writes tool calls.

The environment service's native API is structured (tool docs, system-prompt sections,
tool results, assistant turns as tool names with JSON arguments); a format is the
client's rendering and parsing for one model family (base.py). `registry.py` names
them and picks the default for a model; hermes.py is Qwen2.5's, handler_format.py
wraps bfcl-eval's own handlers (bfcl_handlers.py) for the others.
"""
