"""A preflight's rows and its table: one check each, with its status and what it found.
The verl preflight (seal/trainer/verl/preflight.py) and the local trainer's
(seal/trainer/local_preflight.py) both report in these rows."""

from __future__ import annotations

import importlib.metadata
import shutil
from dataclasses import dataclass

OK, WARN, BLOCKER, SKIP = "ok", "warn", "BLOCKER", "skip"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def render(checks: list[Check]) -> str:
    """The table, as rich draws it (plain text when the output is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="preflight", show_lines=False)
    for column in ("check", "status", "detail"):
        table.add_column(column, overflow="fold")
    colours = {OK: "green", WARN: "yellow", BLOCKER: "bold red", SKIP: "dim"}
    for c in checks:
        table.add_row(c.name, f"[{colours[c.status]}]{c.status}[/]", c.detail)
    console = Console(width=max(120, shutil.get_terminal_size().columns), record=True)
    with console.capture() as capture:
        console.print(table)
    return capture.get()


def blockers(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == BLOCKER]


class PreflightFailed(RuntimeError):
    """A preflight check found a blocker: the run would fail."""


def raise_on_blockers(checks: list[Check], skip_hint: str) -> None:
    """PreflightFailed naming the blockers, if any (the table says why)."""
    found = blockers(checks)
    if found:
        raise PreflightFailed(
            f"the preflight found {len(found)} blocker(s): {', '.join(c.name for c in found)} "
            f"(table above; {skip_hint})"
        )


LINEAR_ATTENTION_KERNELS = ("flash-linear-attention", "causal-conv1d")
"""What transformers' fast path for Gated DeltaNet layers (Qwen3.5, Qwen3-Next) imports."""


def linear_attention_path() -> tuple[bool, str]:
    """How transformers runs a Gated DeltaNet layer here: (fast, what): its fast path when
    flash-linear-attention and causal-conv1d are installed, else its torch fallback (the
    same layers, much slower), naming what is missing."""
    found, missing = [], []
    for name in LINEAR_ATTENTION_KERNELS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    if not missing:
        return True, f"transformers' fast path ({', '.join(found)})"
    return False, (
        f"transformers' torch fallback, much slower: {' and '.join(missing)} not installed "
        "(install.sh --gpu installs them; causal-conv1d builds against torch, "
        "SEAL_CAUSAL_CONV1D=none skips it)"
    )


def linear_attention_check(linear_layers: int) -> list[Check]:
    """A preflight row for a model with Gated DeltaNet layers (none for other models)."""
    if not linear_layers:
        return []
    fast, what = linear_attention_path()
    return [Check("linear attention", OK if fast else WARN, f"{linear_layers} layers: {what}")]
