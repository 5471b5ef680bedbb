"""The record of every attempt of a run: what the paper's Appendix C.4 says a run logs.

Each start of a run (its first, then one per resume) is an attempt with a folder of its
own, `RUN_DIR/attempts/NNN/` (001 first), written once and never rewritten: its config,
`record.json` (command, seeds, code, packages), `uncommitted.diff` and `base_model.json`.
`RUN_DIR/config.yaml` is the first attempt's. The fields: docs/runs.md, "What each run
records".
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from seal.atomic_file import write_json_atomic, write_text_atomic

ATTEMPTS_DIR = "attempts"
CONFIG_FILENAME = "config.yaml"
RECORD_FILENAME = "record.json"
DIFF_FILENAME = "uncommitted.diff"
BASE_MODEL_FILENAME = "base_model.json"


def attempt_dirs(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / ATTEMPTS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


def latest_attempt(run_dir: Path) -> Path | None:
    attempts = attempt_dirs(run_dir)
    return attempts[-1] if attempts else None


def git_state(repo: Path) -> tuple[dict, str]:
    """(commit, dirty flag and untracked files; the uncommitted diff) of the checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=True
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        diff = git("diff", "HEAD", "--no-color")
        untracked = git("ls-files", "--others", "--exclude-standard").splitlines()
    except (OSError, subprocess.CalledProcessError) as error:
        note = f"not a git checkout ({type(error).__name__}): no commit or diff recorded\n"
        return {"commit": None, "note": note.strip()}, note
    return {"commit": commit, "dirty": bool(diff or untracked), "untracked": untracked}, diff


def package_versions() -> dict[str, str]:
    """Every installed distribution's version (what `pip freeze` lists), by its
    normalised name (PEP 503: `bfcl_eval` -> `bfcl-eval`)."""
    versions = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[re.sub(r"[-_.]+", "-", name).lower()] = dist.version
    return dict(sorted(versions.items()))


def start_attempt(run_dir: Path, config_yaml: str, record: dict, repo: Path) -> Path:
    """Write a new attempt's folder (the module docstring); `record` holds the command,
    the seeds and the accepted changes, to which the code and environment are added.
    The first attempt also writes `RUN_DIR/config.yaml`."""
    run_dir = Path(run_dir)
    previous = latest_attempt(run_dir)
    number = int(previous.name) + 1 if previous else 1
    folder = run_dir / ATTEMPTS_DIR / f"{number:03d}"
    folder.mkdir(parents=True)  # never an existing one: attempts are not rewritten
    code, diff = git_state(repo)
    full = {
        "attempt": number,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        **record,
        "code": code,
        "python": sys.version,
        "platform": platform.platform(),
        "packages": package_versions(),
    }
    write_text_atomic(folder / CONFIG_FILENAME, config_yaml)
    write_text_atomic(folder / DIFF_FILENAME, diff)
    write_json_atomic(folder / RECORD_FILENAME, full)
    if not (run_dir / CONFIG_FILENAME).exists():
        write_text_atomic(run_dir / CONFIG_FILENAME, config_yaml)
    return folder


# --- the base checkpoint -------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(state_dict) -> str:
    """One sha256 over a model's tensors (names, dtypes, shapes and bytes, in order)."""
    import torch  # only where a model exists: the launcher imports this module early

    digest = hashlib.sha256()
    for name, tensor in state_dict.items():
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\n".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def model_identity(path: str) -> dict:
    """What identifies the base checkpoint `path`: a local directory's files (sha256 of
    each), or a Hugging Face hub name's revision (commit) and its files' blob hashes from
    the local cache (the hub names LFS blobs by their sha256). A hub model not in the cache
    is recorded as such: the revision is what the cache would have resolved."""
    local = Path(path)
    if local.is_dir():
        files = sorted(p for p in local.rglob("*") if p.is_file())
        return {
            "path": str(local.resolve()),
            "kind": "local directory",
            "sha256": {str(p.relative_to(local)): file_sha256(p) for p in files},
        }
    from huggingface_hub import try_to_load_from_cache  # transformers' own dependency

    cached = try_to_load_from_cache(path, "config.json")
    if not isinstance(cached, str):
        return {"path": path, "kind": "hub", "revision": None,
                "note": "not in the local Hugging Face cache when recorded"}  # fmt: skip
    snapshot = Path(cached).parent
    blobs = {
        str(p.relative_to(snapshot)): Path(p.resolve()).name
        for p in sorted(snapshot.rglob("*"))
        if p.is_file()
    }
    return {"path": path, "kind": "hub", "revision": snapshot.name, "blobs": blobs}


def record_base_model(attempt: Path, identity: dict) -> None:
    """Write the base checkpoint's identity into the attempt's folder."""
    write_json_atomic(Path(attempt) / BASE_MODEL_FILENAME, identity)


def read_record(attempt: Path) -> dict:
    return json.loads((Path(attempt) / RECORD_FILENAME).read_text(encoding="utf-8"))
