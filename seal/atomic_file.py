"""Write a file so that readers see either the old file or the new one, never half.

The text goes to a temporary file in the same directory (a dot name, so globs over results
skip one a crash leaves behind), is flushed to disk, then renamed over the target: atomic
within one POSIX filesystem. Used for every result file a crash must not truncate:
capability states, checkpoints' metadata, validation records, the metrics log when it is
rewritten. `read_json` reads one back; a file missing, damaged (cut short, edited) or not
JSON is a `StateFileError` that names it, never a bare JSONDecodeError.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


class StateFileError(ValueError):
    """A state file that cannot be read; the message names the file and what it holds."""


def read_json(path: str | Path, what: str) -> object:
    """The JSON in `path` (`what` it holds, for the error: "capability state", ...)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StateFileError(f"{path}: no such file (expected the {what})") from None
    except (OSError, UnicodeDecodeError) as error:
        raise StateFileError(f"{path}: cannot read the {what}: {error}") from None
    try:
        return json.loads(text)
    except ValueError as error:
        raise StateFileError(
            f"{path}: the {what} is damaged, not JSON ({error}; {len(text)} bytes)"
        ) from None


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return path


def write_json_atomic(path: str | Path, obj: object) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=1, sort_keys=True))
