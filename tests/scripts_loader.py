"""Import a file of scripts/ as a module in tests (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import does: dataclasses look their module up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
