"""A preflight's rows and its table: one check each, with its status and what it found.
The verl preflight (seal/trainer/verl/preflight.py) and the local trainer's
(seal/trainer/local_preflight.py) both report in these rows."""

from __future__ import annotations

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
