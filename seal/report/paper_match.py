"""Whether a training run is one of the paper's rows: its model and SEAL switches name the
row (seal.report.paper.matching_result), and the keys that define the row (`ROW_KEYS`)
must equal those of the row's config in exp/ (`ROW_CONFIGS`); otherwise the report names
the keys that differ. docs/paper_configs.md, "Which runs are a paper row", lists the keys
and why the others do not count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from omegaconf import OmegaConf

from seal.formats.registry import resolve
from seal.report import paper as P
from seal.report.config_diff import MISSING, flatten
from seal.trainer_config import TrainerConfig

EXP_DIR = Path(__file__).resolve().parents[2] / "exp"

ROW_CONFIGS = {
    (P.QWEN_7B, P.SEAL): "SEAL.yaml",
    (P.QWEN_7B, P.VANILLA_RL): "GRPO.yaml",
    (P.QWEN_7B, P.NO_ENV_ADAPTATION): "SEAL_no_env_adaptation.yaml",
    (P.QWEN_7B, P.NO_REWEIGHTING): "SEAL_no_reweighting.yaml",
    (P.QWEN_7B, P.NO_CLOSED_LOOP): "SEAL_no_closed_loop.yaml",
    (P.QWEN_3B, P.SEAL): "SEAL_qwen2.5_3b.yaml",
    (P.QWEN_3B, P.VANILLA_RL): "GRPO_qwen2.5_3b.yaml",
    (P.TOOLACE_8B, P.SEAL): "SEAL_toolace2_8b.yaml",
    (P.TOOLACE_8B, P.VANILLA_RL): "GRPO_toolace2_8b.yaml",
}
"""The config in exp/ each trained row of Tables 1 and 3 was run with (docs/paper_configs.md)."""

ROW_KEYS = (
    # The paper's Table 4 (and the 72 steps of its figures).
    "total_epochs",
    "total_steps",
    "model.tool_format",
    "data.train_file",
    "data.val_file",
    "data.train_batch_size",
    "data.max_train_tasks",
    "data.max_val_tasks",
    "rollout.n",
    "rollout.temperature",
    "optim.lr",
    "optim.mini_batch_size",
    "validation",
    "limits",
    "loss",
    # The rest of the release's recipe (docs/paper_configs.md, the settings table).
    "rollout.top_p",
    "optim.weight_decay",
    "optim.grad_clip",
    "advantage",
    "reward",
    "checkpoint.best_rule",
    # SEAL's switches and their settings.
    "rollout.push_profile",
    "interface",
    "apatch",
    "capability",
)
"""The `trainer` keys (or sections: every key under them) that define a row. Not among
them: the seeds and the data order (another seed is a replicate of the row), the model's
path (the backbone is matched by name, so a local copy counts), and what only changes
memory, speed or numerics (dtype, device, gradient checkpointing, micro-batches, chunking,
the generator's batch, checkpoint frequency, logging)."""

PROMPT_KEY = "verl.max_prompt_length"
TABLE4_PROMPT_LENGTH = 8192
"""Table 4's prompt length: a verl run's `verl.max_prompt_length` must equal it, or the
row's config's own value (the ToolACE configs': 12288)."""


@dataclass(frozen=True)
class RowMatch:
    """The row a run's model and switches name, and the row-defining keys in which the run
    differs from that row's config: (dotted key, the run's value, the row's value)."""

    row: P.PaperResult
    differences: list[tuple[str, object, object]] = field(default_factory=list)

    @property
    def reproduced(self) -> P.PaperResult | None:
        """The row, when the run differs from its config in no row-defining key."""
        return None if self.differences else self.row

    def describe(self) -> str:
        """The differences as Markdown (empty when there are none)."""
        return ", ".join(
            f"`{key}` {run!r} (the row's config: {paper!r})" for key, run, paper in self.differences
        )


def is_row_key(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in ROW_KEYS)


def row_config(row: P.PaperResult) -> dict:
    """The row's config file composed as the launcher composes it (the run config's
    documented defaults under the file), as plain data: {"trainer": ..., "verl": {...}}."""
    loaded = OmegaConf.load(EXP_DIR / ROW_CONFIGS[row.backbone, row.method])
    trainer = OmegaConf.merge(OmegaConf.structured(TrainerConfig), loaded.get("trainer", {}))
    prompt = OmegaConf.select(loaded, PROMPT_KEY, default=TABLE4_PROMPT_LENGTH)
    return {
        "trainer": OmegaConf.to_container(trainer),
        "verl": {"max_prompt_length": prompt},
    }


def _compared(trainer: Mapping) -> dict[str, object]:
    """The row-defining keys of a `trainer` section, with the forms that must be equal:
    the tool format resolved for its model, the data files by name."""
    flat = {k: v for k, v in flatten(trainer).items() if is_row_key(k)}
    if "model.tool_format" in flat:
        flat["model.tool_format"] = resolve(
            flat["model.tool_format"], trainer["model"]["path"]
        ).name
    for key in ("data.train_file", "data.val_file"):
        if key in flat:
            flat[key] = PurePath(flat[key]).name
    return flat


def match_row(config: Mapping, model: str) -> RowMatch | None:
    """The row a training run's saved config (plain data) names by its model and switches,
    with the row-defining keys that differ from the row's config; None when it names none
    (another model or method, or a row without a config of its own)."""
    row = P.matching_result(model, config["trainer"])
    if row is None or (row.backbone, row.method) not in ROW_CONFIGS:
        return None
    paper = row_config(row)
    ours, theirs = _compared(config["trainer"]), _compared(paper["trainer"])
    differences = [
        (f"trainer.{key}", ours.get(key, MISSING), theirs.get(key, MISSING))
        for key in sorted(ours.keys() | theirs.keys())
        if ours.get(key, MISSING) != theirs.get(key, MISSING)
    ]
    if config.get("job") == "verl":
        prompt = config.get("verl", {}).get("max_prompt_length", MISSING)
        if prompt != paper["verl"]["max_prompt_length"]:
            differences.append((PROMPT_KEY, prompt, paper["verl"]["max_prompt_length"]))
    return RowMatch(row, differences)
