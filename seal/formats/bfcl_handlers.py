"""bfcl-eval's local-inference handlers: the leaderboard's own prompt layout and output
decoder for each open model it ranks, imported from the pinned package (2026.3.23).

`registry_entry(name)` reads bfcl-eval's model map, `build_handler(entry)` constructs the
handler as BFCL does (no server, no download). Two things differ from importing bfcl-eval
naively, on purpose: the model map is read with `ast`, not imported (importing it pulls 40
packages of API clients), and in the decoders' modules `eval` is bound to
`ast.literal_eval`, so model text never runs as code. Why: docs/tool_formats.md, "The code".
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import dataclass

MODEL_CONFIG = "bfcl_eval.constants.model_config"
LOCAL_MAP = "local_inference_model_map"
BFCL_TEMPERATURE = 0.001
"""`bfcl generate`'s default temperature."""

# Modules whose code calls eval() on model output (see the module docstring).
_EVAL_MODULES = (
    "bfcl_eval.model_handler.utils",
    "bfcl_eval.model_handler.local_inference.llama_3_1",
    "bfcl_eval.model_handler.local_inference.qwen_fc",
)


@dataclass(frozen=True)
class RegistryEntry:
    """One model of bfcl-eval's local-inference map."""

    registry_name: str
    """The map's key (what `bfcl generate --model` takes), e.g. `Team-ACE/ToolACE-2-8B`."""
    model_name: str
    """The Hugging Face name the handler is built with."""
    handler_class: str
    handler_module: str
    is_fc_model: bool
    """Function-calling mode; False: prompt mode (BFCL's system prompt, Python-style calls)."""


class UnknownModelError(ValueError):
    def __init__(self, name: str):
        super().__init__(f"bfcl-eval 2026.3.23 has no local-inference handler for {name!r}")


def import_handlers() -> None:
    """Import the handler modules (and bind their `eval`); install.sh checks this works."""
    for module in _EVAL_MODULES:
        importlib.import_module(module).eval = ast.literal_eval


@functools.cache
def registry() -> dict[str, RegistryEntry]:
    """bfcl-eval's local-inference model map, read from its source."""
    spec = importlib.util.find_spec(MODEL_CONFIG)
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    modules = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == LOCAL_MAP for t in node.targets)
    )
    entries = {}
    for key, value in zip(table.keys, table.values, strict=True):
        fields = {kw.arg: kw.value for kw in value.keywords}
        handler = fields["model_handler"].id
        entries[key.value] = RegistryEntry(
            registry_name=key.value,
            model_name=fields["model_name"].value,
            handler_class=handler,
            handler_module=modules[handler],
            is_fc_model=fields["is_fc_model"].value if "is_fc_model" in fields else True,
        )
    return entries


def registry_entry(name: str) -> RegistryEntry:
    """The map's entry for `name` (a key of bfcl-eval's map); raises UnknownModelError."""
    entry = registry().get(name)
    if entry is None:
        raise UnknownModelError(name)
    return entry


def ranked_entry(model: str) -> RegistryEntry | None:
    """The map's entry for a Hugging Face model name: its function-calling entry
    (`<name>-FC`) when bfcl-eval ranks it in both modes, else its only one, else None."""
    entries = registry()
    return entries.get(f"{model}-FC") or entries.get(model)


def handler_class(entry: RegistryEntry) -> type:
    import_handlers()
    return getattr(importlib.import_module(entry.handler_module), entry.handler_class)


def build_handler(entry: RegistryEntry):
    """The entry's handler, constructed with BFCL's arguments. The temperature is only
    used by the handler's own requests, which are never made here."""
    return handler_class(entry)(
        model_name=entry.model_name,
        temperature=BFCL_TEMPERATURE,
        registry_name=entry.registry_name,
        is_fc_model=entry.is_fc_model,
    )
