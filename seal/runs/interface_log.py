"""The interface state of each training step, beside its failure profile (the paper's
Appendix C.4 logs both per round).

``RUN_DIR/interface/step_<step, 6 digits>.json``, one file per training step, written
atomically by both trainers: the layers on, the guidelines shown with their tags, the
profile served before the step and the step's own. The fields, and what the report reads
from them: docs/design.md, "The training interface".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from seal.atomic_file import read_json, write_json_atomic

INTERFACE_DIRNAME = "interface"
LAYERS = ("schema_cues", "type_hints", "recovery_feedback", "guidelines")
_STEP_FILE = re.compile(r"step_(\d+)\.json")


def interface_row(
    step: int,
    interfaces: Iterable[Mapping],
    served_profile: dict | None,
    failure_profile: dict,
) -> dict:
    """The record of one step from its episodes' interfaces (EpisodeInterface dicts)."""
    interfaces = list(interfaces)
    shown: dict[tuple[str, str], int] = {}
    for interface in interfaces:
        for entry in interface["shown"]:
            key = (entry["tag"], entry["text"])
            shown[key] = shown.get(key, 0) + 1
    return {
        "step": step,
        "episodes": len(interfaces),
        "layers": {layer: sum(bool(i[layer]) for i in interfaces) for layer in LAYERS},
        "shown": [{"tag": t, "text": text, "episodes": n} for (t, text), n in shown.items()],
        "served_profile": served_profile,
        "failure_profile": failure_profile,
    }


def write_interface(run_dir: str | Path, row: dict) -> Path:
    path = Path(run_dir) / INTERFACE_DIRNAME / f"step_{row['step']:06d}.json"
    return write_json_atomic(path, row)


def read_interfaces(run_dir: str | Path) -> list[dict]:
    """The run's step records in step order ([] when it has none)."""
    folder = Path(run_dir) / INTERFACE_DIRNAME
    rows = []
    for path in folder.glob("step_*.json"):
        if match := _STEP_FILE.fullmatch(path.name):
            row = read_json(path, "interface record of a step")
            if not isinstance(row, dict) or row.get("step") != int(match.group(1)):
                raise ValueError(f"{path}: holds step {row.get('step')}, not its name's")
            rows.append(row)
    return sorted(rows, key=lambda row: row["step"])
