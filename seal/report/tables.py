"""Markdown pipe tables for the report pages: one helper, so every table is laid out alike."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A pipe table with a header row; cells are written with str() (None as "–")."""
    # A pipe table is a few lines by hand; tabulate is not worth a dependency for it.
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in rows:
        cells = ["–" if cell is None else str(cell).replace("|", "\\|") for cell in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
