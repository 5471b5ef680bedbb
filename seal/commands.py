"""The project's commands as printed hints write them, so that a hint runs as pasted.

A hint names the launcher as this interpreter runs it (`.venv/bin/python launcher.py` from
the repository's root, as the README writes it) and a console script (`seal-export`,
`seal-eval`, `hf`, ...) by its file beside this interpreter; either by the bare name when
the shell would find that same file on PATH (an activated venv). Paths inside the working
directory are written relative to it, others absolute.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = REPO_ROOT / "launcher.py"


def shown(path: str | Path) -> str:
    """`path` relative to the working directory when it is inside it, else absolute;
    quoted for a shell."""
    absolute = Path(os.path.abspath(path))
    try:
        text = str(absolute.relative_to(Path.cwd()))
    except ValueError:
        text = str(absolute)
    return shlex.quote(text)


def _program(path: Path) -> str:
    """An executable as a shell finds it: its bare name when PATH leads to this file,
    else its path (with a `/`, so that the shell does not look it up on PATH)."""
    on_path = shutil.which(path.name)
    if on_path and Path(os.path.abspath(on_path)) == Path(os.path.abspath(path)):
        return path.name
    text = shown(path)
    return text if "/" in text else f"./{text}"


def python() -> str:
    """This interpreter, as a shell would run it."""
    return _program(Path(sys.executable))


def launcher(*args: str | Path) -> str:
    """`launcher.py` with `args`, run by this interpreter: `.venv/bin/python launcher.py ...`."""
    return " ".join([python(), shown(LAUNCHER), *(_arg(a) for a in args)])


def script(name: str, *args: str | Path) -> str:
    """The console script `name` installed beside this interpreter (the venv's `bin/`),
    with `args`; its bare name if there is none there (another install layout)."""
    path = Path(sys.executable).parent / name
    program = _program(path) if path.exists() else name
    return " ".join([program, *(_arg(a) for a in args)])


def resume(run_dir: str | Path) -> str:
    """The one way a hint says to continue a run: `launcher.py --resume RUN_DIR`."""
    return launcher("--resume", Path(run_dir))


def _arg(value: str | Path) -> str:
    return shown(value) if isinstance(value, Path) else shlex.quote(str(value))


def examples(name: str, *uses: tuple[str, str]) -> str:
    """A `--help` epilog: each (arguments, what it does) of the console script `name` as a
    command that runs as pasted here."""
    lines = ["examples:"]
    for args, what in uses:
        lines += [f"  {script(name, *shlex.split(args))}", f"      {what}"]
    return "\n".join(lines)
