"""The paper's reference numbers: transcribed consistently, found by backbone and method,
and matched to the runs that reproduce them."""

import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seal.bfcl.tasks import CATEGORIES
from seal.report import paper as P
from seal.report.paper_match import ROW_CONFIGS, is_row_key, match_row

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402


def test_every_bfcl_v3_average_is_the_mean_of_its_four_categories():
    """Tables 1 and 3 print averages rounded to two decimals."""
    assert len(P.PAPER_RESULTS) == 8 + 9 + 3  # reference systems, 3 backbones x 3, ablations
    for result in P.PAPER_RESULTS:
        assert list(result.category_pct) == list(CATEGORIES)
        mean = sum(result.category_pct.values()) / 4
        assert result.average_pct == pytest.approx(mean, abs=0.0051), result.label


def test_table_1_and_3_rows():
    assert P.paper_result(P.QWEN_7B, P.SEAL).category_pct["multi_turn_base"] == 58
    assert P.paper_result(P.QWEN_3B, P.VANILLA_RL).average_pct == 9.25
    assert P.paper_result(P.TOOLACE_8B, P.SEAL).category_pct == dict(
        zip(CATEGORIES, (58, 46, 44, 39), strict=True)
    )
    assert P.paper_result(P.QWEN_7B, P.NO_CLOSED_LOOP).category_pct["multi_turn_miss_func"] == 32
    table3 = [r.method for r in P.PAPER_RESULTS if 3 in r.tables]
    assert table3 == [
        P.UNTRAINED,
        P.VANILLA_RL,
        P.SEAL,
        P.NO_ENV_ADAPTATION,
        P.NO_REWEIGHTING,
        P.NO_CLOSED_LOOP,
    ]
    assert len(P.controlled_results()) == 12 and len(P.controlled_results(P.QWEN_3B)) == 3
    with pytest.raises(KeyError, match="no result"):
        P.paper_result(P.QWEN_7B, "PPO")


def test_table_2_rows_and_their_averages():
    seal_7b = P.ood_result(P.QWEN_7B, P.SEAL)
    assert seal_7b.bfcl_v4 == {"average": 12.71, "web_search": 9.50, "memory": 15.92}
    assert seal_7b.tau2 == {"average": 20.79, "retail": 26.32, "airline": 22.00, "telecom": 14.04}
    assert len(P.ood_results()) == 10 and len(P.ood_results(P.QWEN_3B)) == 3
    for result in P.OOD_RESULTS:
        tau2 = [result.tau2[k] for k in P.TAU2_PARTS[1:]]
        assert result.tau2["average"] == pytest.approx(sum(tau2) / 3, abs=0.0051)
        v4 = (result.bfcl_v4["web_search"] + result.bfcl_v4["memory"]) / 2
        if (result.backbone, result.method) == (P.QWEN_3B, P.VANILLA_RL):
            assert (result.bfcl_v4["average"], v4) == (5.98, pytest.approx(5.88))  # as printed
        else:
            assert result.bfcl_v4["average"] == pytest.approx(v4, abs=0.0051)
    with pytest.raises(KeyError, match="out-of-distribution"):
        P.ood_result(P.TOOLACE_8B, P.SEAL)


@pytest.mark.parametrize(
    ("config", "row"),
    [
        ("SEAL", (P.QWEN_7B, P.SEAL)),
        ("GRPO", (P.QWEN_7B, P.VANILLA_RL)),
        ("SEAL_no_env_adaptation", (P.QWEN_7B, P.NO_ENV_ADAPTATION)),
        ("SEAL_no_reweighting", (P.QWEN_7B, P.NO_REWEIGHTING)),
        ("SEAL_no_closed_loop", (P.QWEN_7B, P.NO_CLOSED_LOOP)),
        ("SEAL_qwen2.5_3b", (P.QWEN_3B, P.SEAL)),
        ("GRPO_qwen2.5_3b", (P.QWEN_3B, P.VANILLA_RL)),
        ("SEAL_toolace2_8b", (P.TOOLACE_8B, P.SEAL)),
        ("GRPO_toolace2_8b", (P.TOOLACE_8B, P.VANILLA_RL)),
        ("SEAL_full_interface", None),
        ("SEAL_qwen3_4b", None),
        ("SEAL_qwen3.5_4b", None),
        ("GRPO_qwen3.5_4b", None),
        ("cpu_default", None),
    ],
)
def test_each_config_matches_the_row_it_reproduces(config, row):
    cfg = launcher.compose(REPO / f"exp/{config}.yaml", [])
    trainer = OmegaConf.to_container(cfg.trainer)
    found = P.matching_result(cfg.trainer.model.path, trainer)
    assert (found and (found.backbone, found.method)) == (row or None)


def test_an_untrained_model_matches_its_backbone_row():
    assert P.matching_result("/models/Qwen2.5-7B-Instruct/", None).method == P.UNTRAINED
    assert P.matching_result("Team-ACE/ToolACE-2-8B", None).average_pct == 32.00
    assert P.matching_result("smollm2-135m-instruct", None) is None


def saved_config(config: str, overrides: list[str]) -> dict:
    """A run's config as its run directory holds it (config.yaml), as plain data."""
    return OmegaConf.to_container(launcher.compose(REPO / f"exp/{config}.yaml", overrides))


@pytest.mark.parametrize("config", sorted(f.removesuffix(".yaml") for f in ROW_CONFIGS.values()))
@pytest.mark.parametrize("job", ["local", "verl"])
def test_a_paper_config_run_is_its_row_on_either_trainer(config, job):
    cfg = saved_config(config, [f"job={job}"])
    match = match_row(cfg, cfg["trainer"]["model"]["path"])
    assert match.differences == [] and match.reproduced is match.row
    assert ROW_CONFIGS[match.row.backbone, match.row.method] == f"{config}.yaml"


def test_a_run_with_the_row_s_switches_but_other_settings_is_not_the_row():
    """Model and switches alone named the row before; lr, steps, batch and n define it too."""
    changed = ["trainer.optim.lr=1e-5", "trainer.total_steps=10"]
    changed += ["trainer.data.train_batch_size=16", "trainer.rollout.n=4"]
    cfg = saved_config("SEAL", changed)
    match = match_row(cfg, cfg["trainer"]["model"]["path"])
    assert (match.row.backbone, match.row.method) == (P.QWEN_7B, P.SEAL)
    assert match.reproduced is None
    assert match.differences == [
        ("trainer.data.train_batch_size", 16, 32),
        ("trainer.optim.lr", 1e-5, 1e-6),
        ("trainer.rollout.n", 4, 8),
        ("trainer.total_steps", 10, 0),
    ]
    assert "`trainer.optim.lr` 1e-05 (the row's config: 1e-06)" in match.describe()
    prompt = saved_config("SEAL", ["job=verl", "verl.max_prompt_length=4096"])
    assert match_row(prompt, P.QWEN_7B).differences == [("verl.max_prompt_length", 4096, 8192)]


def test_seeds_paths_and_memory_settings_do_not_define_a_row():
    """A replicate (another seed or data order), a local copy of the model, other dtype or
    micro-batches: still the row."""
    cfg = saved_config(
        "SEAL",
        [
            "trainer.data.seed=3",
            "trainer.data.order=shuffle_per_epoch",
            "trainer.rollout.seed=3",
            "trainer.model.path=/models/Qwen2.5-7B-Instruct",
            "trainer.model.dtype=float32",
            "trainer.optim.micro_batch_size=2",
            "trainer.data.train_file=/data/copy/bfcl_train.parquet",
        ],
    )
    assert match_row(cfg, cfg["trainer"]["model"]["path"]).differences == []
    assert not is_row_key("model.path") and is_row_key("limits.max_new_tokens")
    assert is_row_key("checkpoint.best_rule") and not is_row_key("checkpoint.save_freq")
