"""Is a model on this machine's disk? A local folder, or a Hugging Face name in the cache
($HF_HOME), with its config and every weight file its index lists; looked up without the
network (a hub that cannot be reached costs minutes of retries, and a run must not start a
15 GB download by surprise). Both preflights ask it (the local one before the run directory
is made), and name the command that downloads what is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

from seal import commands
from seal.formats.registry import TINY_MODEL, TINY_QWEN35
from seal.trainer.preflight_rows import BLOCKER, OK, Check, PreflightFailed

MODEL_FILES = "model files"
"""The preflight row of the model's presence."""


class ModelNotLocal(LookupError):
    """The model's files are not (all) on this node's disk; the message says what is missing."""


def local_folder(path: str) -> Path:
    """The folder `path` names, or the Hugging Face cache's snapshot of the name `path`
    (its files are not checked); ModelNotLocal when there is none."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    folder = Path(path)
    if folder.is_dir():
        return folder
    if folder.is_absolute() or path.startswith("."):
        raise ModelNotLocal(f"{path} is not a folder on this node")
    try:
        return Path(snapshot_download(path, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError) as error:
        raise ModelNotLocal(
            f"{path} is not in this node's Hugging Face cache ({constants.HF_HUB_CACHE}): "
            f"{type(error).__name__}"
        ) from error


def local_model_dir(path: str) -> Path:
    """The folder holding the model `path` (a folder, or a Hugging Face name looked up in this
    node's cache, $HF_HOME), with its config and every weight file its index lists; never
    downloads. Raises ModelNotLocal saying what is missing."""
    folder = local_folder(path)
    missing = [name for name in ("config.json",) if not (folder / name).is_file()]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing += [shard for shard in shards if not (folder / shard).is_file()]
    elif not any(folder.glob("*.safetensors")) and not any(folder.glob("pytorch_model*.bin")):
        missing.append("weights (*.safetensors)")
    if missing:
        raise ModelNotLocal(f"{folder} lacks {', '.join(missing)}")
    return folder


def download_command(name: str) -> str:
    """The command that puts the Hugging Face model `name` into this machine's cache."""
    return commands.script("hf", "download", name)


def model_files_check(path: str, tokenizer: str = "") -> Check:
    """The `model files` row for the model `path` (and its tokenizer, when given apart):
    OK naming the folder, or a blocker naming what is missing and how to get it."""
    if path in (TINY_MODEL, TINY_QWEN35):
        return Check(MODEL_FILES, OK, f"{path}: built from config, nothing to download")
    found, missing = [], []
    for name, look_up in ((path, local_model_dir), (tokenizer, local_folder)):
        if not name:
            continue
        try:
            found.append(str(look_up(name)))
        except ModelNotLocal as error:
            remote = not Path(name).is_absolute() and not name.startswith(".")
            get = f"download it first: `{download_command(name)}`" if remote else "fix the path"
            missing.append(f"{error}; {get}")
    if missing:
        return Check(MODEL_FILES, BLOCKER, " ".join(missing) + " (or give a local folder)")
    return Check(MODEL_FILES, OK, f"config and weights in {', '.join(found)}")


def refuse_missing_model(path: str, tokenizer: str = "") -> None:
    """PreflightFailed naming what is missing and the download command, unless the model
    (and its tokenizer) are on this machine's disk: before a run makes its directory, and
    before transformers would ask the hub for them."""
    check = model_files_check(path, tokenizer)
    if check.status == BLOCKER:
        raise PreflightFailed(f"{check.name}: {check.detail}")
