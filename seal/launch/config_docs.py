"""Every run-config key with its default and its documentation, read from the source.

A config field is documented by a string literal right under it in its dataclass (Python
keeps no such attribute docstrings at run time, so they are read with `ast`); a section
field (a nested dataclass) may rely on its class's docstring instead. `python launcher.py
--explain [--conf X.yaml]` prints the table, a file's values beside the defaults where
they differ; a test fails when any key of the run config, or set in any `exp/*.yaml`, has
no documentation. `closest_keys` answers a misspelt key with the valid names nearest to
it. The convention: docs/design.md, "The run config's `trainer` section".
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import textwrap
import typing
from collections.abc import Iterator

from omegaconf import OmegaConf


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> its docstring, for `cls` and the dataclasses it inherits from."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body
        for node, following in zip(body, body[1:] + [None], strict=True):
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
                continue
            if (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _section_type(cls: type, name: str) -> type | None:
    hint = typing.get_type_hints(cls)[name]
    return hint if dataclasses.is_dataclass(hint) else None


def describe(
    cls: type, prefix: str = "", defaults: object = None
) -> Iterator[tuple[str, object, str]]:
    """(dotted key, default, documentation) of every leaf key under `cls`; a section
    without a field docstring contributes its class docstring to its keys' context.
    A section's defaults are its parent's (`defaults`), which may differ from the section
    class's own (`trainer.interface` defaults to the paper's schema cues, not to none)."""
    docs = field_docs(cls)
    defaults = cls() if defaults is None else defaults
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        section = _section_type(cls, f.name)
        if section is not None:
            yield from describe(section, key + ".", getattr(defaults, f.name))
        else:
            yield key, getattr(defaults, f.name), docs.get(f.name, "")


def undocumented(cls: type, prefix: str = "") -> list[str]:
    """Keys under `cls` without documentation (sections: neither field nor class doc)."""
    missing = []
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        section = _section_type(cls, f.name)
        if section is not None:
            if f.name not in docs and not (section.__doc__ or "").strip():
                missing.append(key)
            missing += undocumented(section, key + ".")
        elif f.name not in docs:
            missing.append(key)
    return missing


def _plain(value: object) -> object:
    """A composed config's value as Python data (lists and dicts, not OmegaConf nodes)."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value)
    return value


def render(cls: type, values=None) -> str:
    """The key reference as plain text, one key per paragraph. `values`: a composed config
    (OmegaConf) whose values are shown, each with its default where they differ."""
    lines = []
    for key, default, doc in describe(cls):
        if values is None:
            lines.append(f"{key} = {default!r}")
        else:
            value = _plain(OmegaConf.select(values, key))
            differs = "" if value == _plain(default) else f"    (default: {default!r})"
            lines.append(f"{key} = {value!r}{differs}")
        lines += [f"    {line}" for line in doc.splitlines()] or ["    (undocumented)"]
    return "\n".join(lines)


def known_keys(cls: type) -> list[str]:
    """Every dotted key a config may set: the leaves and the sections above them."""
    keys = set()
    for key, _, _ in describe(cls):
        parts = key.split(".")
        keys.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return sorted(keys)


def closest_keys(key: str, cls: type, n: int = 3) -> list[str]:
    """The valid keys nearest to a misspelt `key`, by the whole dotted name, then by its
    last part alone (`trainer.rollout.nn` -> `trainer.rollout.n`); leaf keys first, the
    sections when no leaf is near (a misspelt section in a YAML file)."""
    leaves = [k for k, _, _ in describe(cls)]
    sections = sorted(set(known_keys(cls)) - set(leaves))
    last = key.rsplit(".", 1)[-1]
    for keys in (leaves, sections):
        found = difflib.get_close_matches(key, keys, n=n, cutoff=0.6)
        by_last = [
            k for k in keys if difflib.get_close_matches(last, [k.rsplit(".", 1)[-1]], 1, 0.75)
        ]
        by_last.sort(key=lambda k: -difflib.SequenceMatcher(None, key, k).ratio())
        near = list(dict.fromkeys(found + by_last))[:n]
        if near:
            return near
    return []
