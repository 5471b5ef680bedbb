"""`seal-export`: a run's checkpoint as a clean Hugging Face model directory.

    seal-export RUN_DIR OUT_DIR [--step best|latest|N] [--tokenizer NAME_OR_DIR]

A checkpoint of either trainer is already a model directory; the export checks its weights
files are whole, copies the model's files and nothing of the trainer's (hard links where
it can) into a folder of its own making, records their origin in `seal_export.json` and
checks the result loads. verl shards without Hugging Face weights
are named with verl's merge command, not converted. Details: docs/runs.md, "Checkpoints
are model directories".
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
from pathlib import Path

from omegaconf import OmegaConf

from seal import commands
from seal.atomic_file import read_json, write_json_atomic
from seal.runs import checkpoint as ckpt
from seal.runs.run_record import CONFIG_FILENAME

TRAINER_FILES = {
    "optimizer.pt", "rng.pt", "trainer_state.json", "capability_state.json", "seal_best.json",
}  # fmt: skip
"""The local trainer's state in a checkpoint (seal/runs/checkpoint.py): not the model's."""
TOKENIZER_CONFIG = "tokenizer_config.json"
VERL_HF = Path("actor") / "huggingface"
EXPORT_RECORD = "seal_export.json"
SAFETENSORS_INDEX = "model.safetensors.index.json"


class ExportError(ValueError):
    """The run has no checkpoint to export as asked; the message says which it has."""


def _step_of(folder: Path) -> int:
    return int(folder.name.rsplit("_", 1)[1])


def local_checkpoint(run_dir: Path, step: str) -> tuple[Path, int]:
    """(folder, step) of a local run's checkpoint: `best` (the best validated step's),
    `latest`, or a step number."""
    latest = ckpt.latest_checkpoint(run_dir)
    if latest is None:
        raise ExportError(f"{run_dir} has no checkpoint (checkpoints/{ckpt.LATEST})")
    if step == "latest":
        return latest, _step_of(latest)
    if step == "best":
        best = read_json(latest / "seal_best.json", "best validated step")["step"]
        if not best:  # None (never validated) or 0: the model before training
            raise ExportError(
                f"the best validated step of {run_dir} is {best}: the base model before any "
                f"training, which has no checkpoint; export --step latest (step "
                f"{_step_of(latest)}), or score the base model itself"
            )
        step = str(best)
    folder = ckpt.checkpoint_dir(run_dir, int(step))
    if not folder.is_dir():
        kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*") if p.is_dir())
        raise ExportError(f"{folder} does not exist (kept: {', '.join(kept)})")
    return folder, int(step)


def verl_checkpoint(run_dir: Path, step: str) -> tuple[Path, int | None]:
    """(folder of the Hugging Face files, step) of a verl run's checkpoint."""
    root = run_dir / "checkpoints"
    if step == "best":
        best = root / "best"
        if not best.is_dir():
            raise ExportError(f"{best} does not exist: no validated step had a checkpoint")
        return best / VERL_HF, read_json(best / "seal_best.json", "best validated step")["step"]
    steps = sorted((p for p in root.glob("global_step_*") if p.is_dir()), key=_step_of)
    if not steps:
        raise ExportError(f"{root} holds no global_step_N checkpoint")
    folder = steps[-1] if step == "latest" else root / f"global_step_{step}"
    if not folder.is_dir():
        raise ExportError(f"{folder} does not exist (kept: {', '.join(p.name for p in steps)})")
    return folder / VERL_HF, _step_of(folder)


def best_rule_of(model_folder: Path) -> str:
    """The rule that made the checkpoint in `model_folder` the best (its seal_best.json,
    seal/trainer/seal_hooks.py): `trainer.checkpoint.best_rule`; `average` for a record from
    before the rule was a key (its metric, `val/average`, was the only one then)."""
    for folder in (model_folder, *model_folder.parents[:2]):  # verl: best/actor/huggingface
        if (folder / "seal_best.json").exists():
            best = read_json(folder / "seal_best.json", "best validated step")
            return best.get("rule") or (
                "average" if best.get("metric") == "val/average" else best["metric"]
            )
    raise ExportError(f"{model_folder}: no seal_best.json says how the best step was chosen")


def find_checkpoint(run_dir: Path, step: str = "best") -> tuple[Path, int | None]:
    """The model folder of `run_dir`'s checkpoint `step` (best, latest or N), either
    trainer's; ExportError says what the run has instead."""
    if (run_dir / "checkpoints" / ckpt.LATEST).exists():
        return local_checkpoint(run_dir, step)
    if (
        any((run_dir / "checkpoints").glob("global_step_*"))
        or (run_dir / "checkpoints" / "best").is_dir()
    ):
        return verl_checkpoint(run_dir, step)
    raise ExportError(f"{run_dir} has no checkpoints (checkpoints/ of a training run)")


def _weights(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin"))


def check_weights(folder: Path) -> None:
    """Refuse weights that would not load: every safetensors file whole (its header, and
    data covering exactly what the header lists: a file cut short fails here), a sharded
    model's index naming only files and tensors that are there, a `.bin` file loadable as
    tensors (without running code)."""
    from safetensors import SafetensorError, safe_open

    names: dict[str, set[str]] = {}
    for file in _weights(folder):
        if file.suffix == ".bin":
            ckpt.load_torch_file(file, "model weights")
            continue
        try:
            with safe_open(file, framework="pt") as weights:
                names[file.name] = set(weights.keys())
        except (SafetensorError, OSError) as error:
            raise ExportError(f"{file}: damaged weights, not exported: {error}") from error
    index = folder / SAFETENSORS_INDEX
    if not index.exists():
        return
    weight_map = read_json(index, "index of the weights files")
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict):
        raise ExportError(f"{index}: not an index of weights files (no weight_map)")
    missing = sorted(
        f"{tensor} ({file})"
        for tensor, file in weight_map.items()
        if tensor not in names.get(file, ())
    )
    if missing:
        raise ExportError(
            f"{index} names {len(missing)} tensors its files do not hold, not exported: "
            f"{', '.join(missing[:5])}"
        )


def run_tokenizer(run_dir: Path) -> str:
    """The tokenizer the run trained with, from its config.yaml."""
    from seal.rollout.turn_tokens import SHIPPED_TOKENIZER  # transformers only when needed

    config = OmegaConf.load(run_dir / CONFIG_FILENAME)
    model = config.trainer.model
    if model.tokenizer:
        return model.tokenizer
    return str(SHIPPED_TOKENIZER) if model.path == "tiny-qwen2" else model.path


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


def export(run_dir: Path, out_dir: Path, step: str = "best", tokenizer: str | None = None) -> Path:
    """Write the checkpoint's model (see the module docstring) into `out_dir`, which must
    not exist yet, and return it."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    folder, at_step = find_checkpoint(run_dir, step)
    if not _weights(folder):
        actor = folder.parent
        raise ExportError(
            f"{folder} holds no Hugging Face weights (verl.export_hf_weights was off): merge "
            f"verl's FSDP shards with `python -m verl.model_merger merge --backend fsdp "
            f"--local_dir {actor} --target_dir {out_dir}`"
        )
    if out_dir.exists():
        raise ExportError(f"{out_dir} exists: export into a new directory")
    check_weights(folder)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # A new name, never an existing folder (another export's, or anything of the user's):
    # only what this export made is removed when it fails.
    tmp = out_dir.with_name(f"{out_dir.name}.{secrets.token_hex(4)}.tmp")
    tmp.mkdir()
    try:
        best_rule = best_rule_of(folder) if step == "best" else None
        _fill(run_dir, folder, at_step, tmp, tokenizer, best_rule)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _fill(
    run_dir: Path,
    folder: Path,
    at_step: int | None,
    tmp: Path,
    tokenizer: str | None,
    best_rule: str | None,
):
    """Write the export into `tmp`: the model's files, a tokenizer, the record (with the
    rule that made the step the best, for `--step best`)."""
    from transformers import AutoConfig, AutoTokenizer

    for file in sorted(folder.iterdir()):
        if file.is_file() and file.name not in TRAINER_FILES:
            _link_or_copy(file, tmp / file.name)
    source = None
    if tokenizer is not None or not (tmp / TOKENIZER_CONFIG).exists():
        source = tokenizer or run_tokenizer(run_dir)
        AutoTokenizer.from_pretrained(source).save_pretrained(tmp)
        print(f"[seal-export] tokenizer and chat template from {source} "
              f"({'asked' if tokenizer else 'the checkpoint has none: the run config'})")  # fmt: skip
    loaded = AutoTokenizer.from_pretrained(tmp)
    vocab = AutoConfig.from_pretrained(tmp).vocab_size
    if len(loaded) < 2 or len(loaded) > vocab or not loaded.chat_template:
        raise ExportError(
            f"the tokenizer from {source or folder} does not fit the model ({len(loaded)} "
            f"tokens for a vocabulary of {vocab}, chat template "
            f"{'set' if loaded.chat_template else 'missing'})"
        )
    record = {"run": str(run_dir.resolve()), "step": at_step, "checkpoint": str(folder.resolve()),
              "tokenizer_from": source or "the checkpoint"}  # fmt: skip
    if best_rule is not None:
        record["best_rule"] = best_rule
    write_json_atomic(tmp / EXPORT_RECORD, record)
    # Weights of a checkpoint written before make_readable, or by verl, are 0600 (and the
    # record's temporary file was): a hard link shares its mode with the checkpoint's file,
    # which becomes readable too.
    ckpt.make_readable(tmp)


def export_hint(run_dir: Path) -> str:
    """The run's last lines: which checkpoint is a model directory and the commands that
    export and score it (the best validated step's, else the latest's)."""
    run_dir = Path(run_dir)
    try:
        folder, step = find_checkpoint(run_dir, "best")
        which = "--step best"
    except ExportError as error:
        try:
            folder, step = find_checkpoint(run_dir, "latest")
        except ExportError:
            return f"no checkpoint to export: {error}"
        which = "--step latest"
    out = run_dir.parent / "export" / run_dir.name
    weights = "" if _weights(folder) else " (no Hugging Face weights: seal-export says how)"
    export = commands.script("seal-export", run_dir, out, *which.split())
    score = commands.script("seal-eval", "--model-dir", out, "--start-env")
    return (
        f"model of step {step}: {folder}{weights}, a Hugging Face model directory (tokenizer and "
        f"chat template included). Export it alone: {export}; score it: {score}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seal-export",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=commands.examples(
            "seal-export",
            ("outputs/seal_tiny outputs/export/seal_tiny", "the best validated step's model"),
            ("outputs/seal_tiny outputs/export/seal_tiny_step3 --step 3", "step 3's"),
        ),
    )
    parser.add_argument("run_dir", type=Path, help="a training run's directory")
    parser.add_argument("out_dir", type=Path, help="the model directory to write (new)")
    parser.add_argument(
        "--step",
        default="best",
        help="best (the best validated step's checkpoint), latest, or a step number "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--tokenizer",
        help="tokenizer to write beside the model (default: the checkpoint's own)",
    )
    args = parser.parse_args(argv)
    try:
        out = export(args.run_dir, args.out_dir, args.step, args.tokenizer)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    record = json.loads((out / EXPORT_RECORD).read_text())
    rule = f" (the best by the {record['best_rule']} rule)" if "best_rule" in record else ""
    print(
        f"exported step {record['step']}{rule} of {args.run_dir} to {out}: a Hugging Face model "
        f"directory (from_pretrained, `transformers serve {out}`, vLLM); score it with "
        f"`{commands.script('seal-eval', '--model-dir', out, '--start-env')}`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
