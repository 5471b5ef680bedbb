"""Every run-config key with its default and its documentation, read from the source.

A config field is documented the way this project documents it: a string literal right
under the field in its dataclass (the convention of CleanRL-style config classes; Python
keeps no such attribute docstrings at run time, so they are read with `ast`). A section
field (a nested dataclass) may instead rely on its class's docstring.

`python launcher.py --explain [--conf X.yaml]` prints the table; a test fails when any
key reachable from the run config, or set in any `exp/*.yaml`, has no documentation.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from collections.abc import Iterator


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


def describe(cls: type, prefix: str = "") -> Iterator[tuple[str, object, str]]:
    """(dotted key, default, documentation) of every leaf key under `cls`; a section
    without a field docstring contributes its class docstring to its keys' context."""
    docs = field_docs(cls)
    defaults = cls()
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        section = _section_type(cls, f.name)
        if section is not None:
            yield from describe(section, key + ".")
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


def render(cls: type) -> str:
    """The key reference as plain text, one key per paragraph."""
    lines = []
    for key, default, doc in describe(cls):
        lines.append(f"{key} = {default!r}")
        lines += [f"    {line}" for line in doc.splitlines()] or ["    (undocumented)"]
    return "\n".join(lines)
