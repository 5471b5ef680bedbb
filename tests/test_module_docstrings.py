"""Module docstrings stay short (issue 43): at most 10 lines in the shipped packages, the
launcher and the scripts; the why, the history and the figures live in docs/."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 10
SOURCES = ["seal", "env_service", "scripts", "benchfixtures"]


def module_files() -> list[Path]:
    files = [REPO / "launcher.py"]
    for folder in SOURCES:
        files += sorted((REPO / folder).rglob("*.py"))
    return files


def docstring_lines(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return len(doc.splitlines()) if doc else 0


def test_the_walk_finds_the_modules():
    files = module_files()
    assert len(files) > 150
    assert REPO / "seal" / "trainer_config.py" in files


def test_no_module_docstring_is_over_ten_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in module_files()
        if (n := docstring_lines(path)) > MAX_LINES
    }
    assert long == {}, f"module docstrings over {MAX_LINES} lines (move the detail to docs/)"
