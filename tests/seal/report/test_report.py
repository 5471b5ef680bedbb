"""Run report: figures and page from a synthetic run directory, skipped parts, empty runs, CLI."""

import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from seal.bfcl.tasks import CATEGORIES
from seal.report import figure_style, plots
from seal.report.cli import main
from seal.report.run_data import EmptyRunError, training_tag_shares, validation_tag_shares
from seal.report.run_page import write_report
from seal.runs import metrics_log
from seal.runs.interface_log import write_interface
from seal.runs.records import ValidationRecord, read_val_dir, write_step
from seal.tocf.state import STATE_FILENAME, CapabilityState, TrajectoryOutcome
from seal.tocf.summary import write_epoch_summary

REPO = Path(__file__).resolve().parents[3]
SPLIT = REPO / "data" / "seal_split.json"
TASKS_PER_CATEGORY = 5
# Accurate tasks per category (out of 5) at each validation step; step 20 is the best.
PASSED = {0: (1, 0, 0, 0), 10: (2, 1, 1, 0), 20: (4, 3, 2, 3)}
NO_LAYERS = {"schema_cues": 0, "type_hints": 0, "recovery_feedback": 0, "guidelines": 0}
PROFILE_TAGS = [{"tag": "empty_turn_model_response", "share": 0.25, "count": 10, "mean_reward": 0}]
FIGURES = ("pass_rate.png", "failure_tags.png", "training.png", "tag_weights.png", "capability.png")


def eval_ids(category):
    ids = json.loads(SPLIT.read_text())["eval"]
    return [t for t in ids if t.startswith(category + "_")][:TASKS_PER_CATEGORY]


def write_validation(run_dir):
    for step, passed in PASSED.items():
        records = []
        for category, n_passed in zip(CATEGORIES, passed, strict=True):
            for k, task_id in enumerate(eval_ids(category)):
                score = int(k < n_passed)
                tags = ["pass", "correct_abstention"] if score else ["pass", "state_mismatch"]
                records.append(
                    ValidationRecord(
                        task_id=task_id,
                        data_source=category,
                        score=score,
                        reward=float(score),
                        step=step,
                        input="prompt",
                        output="trajectory",
                        failure_tags=tags,
                        paper_label=None if score else "state_mismatch",
                        turns=2,
                    )
                )
        write_step(run_dir / "validation", step, records)


def write_training(run_dir):
    """21 steps of metrics and an epoch summary, both made with the real capability state."""
    state = CapabilityState()
    with metrics_log.MetricsWriter(run_dir) as log:
        for step in range(1, 22):
            tags = [["pass", "spurious_tool_call"], ["empty_turn_model_response", "pass"]]
            if step > 10:
                tags[1] = ["pass", "pass"]
            for k, sample_tags in enumerate(tags):
                success = "pass" == sample_tags[-1] == sample_tags[0]
                state.observe(
                    TrajectoryOutcome(
                        CATEGORIES[k], f"task_{k}", float(success), success, sample_tags, step, 0
                    )
                )
            state.update_weights()
            # Guidelines from step 5 on, for a tag seen until step 10.
            shown = [{"tag": "empty_turn_model_response", "text": "Call the tools.", "episodes": 2}]
            write_interface(
                run_dir,
                {
                    "step": step,
                    "episodes": 2,
                    "layers": {**NO_LAYERS, "schema_cues": 2, "guidelines": 2},
                    "shown": shown if step >= 5 else [],
                    "served_profile": None if step == 1 else {"tags": PROFILE_TAGS},
                    "failure_profile": {"tags": PROFILE_TAGS},
                },
            )
            failed = ["missing_tool_call"] if step <= 10 else []
            log.write(
                step,
                {
                    metrics_log.REWARD_MEAN: step / 40,
                    metrics_log.accuracy_key(CATEGORIES[0]): step / 30,
                    **metrics_log.tag_fractions(tags),
                    **state.metrics(),
                    metrics_log.APATCH_MEAN_SCALE: 1.2,
                    metrics_log.APATCH_SCALED_FRAC: 0.5,
                    metrics_log.LOSS_POLICY: -0.01,
                    metrics_log.LOSS_KL: 0.001,
                    metrics_log.TIME_ROLLOUT_S: 30.0,
                    **(metrics_log.label_fractions(failed) if failed else {}),
                },
            )
    write_epoch_summary(state, run_dir / "tocf")
    return state


@pytest.fixture
def run_dir(tmp_path):
    write_validation(tmp_path)
    write_training(tmp_path)
    return tmp_path


def test_full_run_gives_every_figure_and_the_paper_table(run_dir):
    page = write_report(run_dir, label="synthetic")
    assert page == run_dir / "report" / "report.md"
    for name in FIGURES:
        image = matplotlib.image.imread(page.parent / name)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400, name
        assert image.std() > 0.01, f"{name} is blank"
    text = page.read_text()
    for name in FIGURES:
        assert f"]({name})" in text  # relative links: the folder moves as a whole
    assert "skipped" not in text  # every part of the run was found
    # The paper's rows in its format, then this run's best step (20: 4/5, 3/5, 2/5, 3/5).
    assert "| model | avg | base | miss_func | miss_param | long_ctx |" in text
    assert "| Qwen2.5-7B-Instruct + SEAL | 40.25 | 58.00 | 36.00 | 34.00 | 33.00 |" in text
    assert (
        "| **synthetic, step 20** | **60.00** | **80.00** | **60.00** | **40.00** | **60.00** |"
        in text
    )
    assert "| 20   | 60.00 | 80.00 (4/5)" in text  # the per-step summary table
    assert "epoch 0 window, up to step 21" in text
    assert "none of the paper's backbones: all the paper's own runs are shown" in text


def section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_papers_label_distribution_per_step(run_dir):
    labels = section(write_report(run_dir).read_text(), "Failure labels (the paper's Table 5)")
    # Validation step 20: 8 of 20 tasks failed, all labelled state_mismatch.
    assert "| 20 | 8/20 | 0.00 (0) | 0.00 (0) | 1.00 (8) | 0.00 (0) |" in labels
    # Training: the failed rollouts' shares per step; step 11 on, none failed (no row).
    assert "| 10 | – | – | – | – | 1.00 | – | – |" in labels
    assert "| 11 |" not in labels


def test_the_interface_per_step_and_the_recurrence_of_targeted_failures(run_dir):
    text = write_report(run_dir).read_text()
    interface = section(text, "Training-time interface per step (the paper's Appendix C.4)")
    assert (
        "| 1 | 2 | schema_cues, guidelines | – | not pushed | empty_turn_model_response 0.25 |"
        in (interface)
    )
    assert "| 5 | 2 | schema_cues, guidelines | [empty_turn_model_response] Call the tools. |" in (
        interface
    )
    recurrence = section(text, "Guidelines and the failures they target")
    # The tag's share: 0.25 in steps 1-4; from step 5, 0.25 until step 10 and 0 after
    # (6 x 0.25 / 17 steps).
    assert (
        "| [empty_turn_model_response] Call the tools. | 5 | 0.250 (4 steps) | 0.088 (17 steps) "
        "| -0.162 |" in recurrence
    )


def test_a_run_of_a_paper_config_shows_its_backbones_rows(run_dir):
    sys.path.insert(0, str(REPO))
    from omegaconf import OmegaConf

    import launcher

    OmegaConf.save(
        launcher.compose(REPO / "exp/SEAL_qwen2.5_3b.yaml", ["job=local"]), run_dir / "config.yaml"
    )
    text = section(write_report(run_dir).read_text(), "Best validation step against the paper")
    assert "| **Qwen2.5-3B-Instruct + SEAL** (this run's row) | **14.00** |" in text
    assert "| Qwen2.5-3B-Instruct + vanilla RL | 9.25 | 16.00 | 9.00 | 6.00 | 6.00 |" in text
    assert "Qwen2.5-7B-Instruct" not in text
    # Table 2's rows of the backbone.
    assert (
        "| Qwen2.5-3B-Instruct + SEAL | 8.63 | 2.00 | 15.26 | 11.76 | 8.77 | 16.00 | 10.52 |"
        in text
    )


def test_a_run_that_differs_from_its_row_s_config_is_named_not_the_row(run_dir):
    """The model and switches of the 3B SEAL row, another learning rate and step count: the
    page names those keys and bolds no paper row."""
    sys.path.insert(0, str(REPO))
    from omegaconf import OmegaConf

    import launcher

    changed = ["job=local", "trainer.optim.lr=1e-5", "trainer.total_steps=10"]
    OmegaConf.save(
        launcher.compose(REPO / "exp/SEAL_qwen2.5_3b.yaml", changed), run_dir / "config.yaml"
    )
    text = section(write_report(run_dir).read_text(), "Best validation step against the paper")
    assert "(this run's row)" not in text and "**14.00**" not in text
    assert (
        "has the model and SEAL switches of the paper's row Qwen2.5-3B-Instruct + SEAL, but it "
        "is not that row: it differs from the row's config in `trainer.optim.lr` 1e-05 (the "
        "row's config: 1e-06), `trainer.total_steps` 10 (the row's config: 0)." in text
    )


def test_tag_shares_per_step_sum_to_one(run_dir):
    steps, shares = validation_tag_shares(read_val_dir(run_dir / "validation"))
    assert steps == [0, 10, 20]
    # Step 10: 16 of 20 tasks failed, each with one state_mismatch among its two turns.
    assert shares["state_mismatch"][1] == pytest.approx(16 / 40)
    for k in range(3):
        assert sum(share[k] for share in shares.values()) == pytest.approx(1.0)

    steps, shares = training_tag_shares(metrics_log.read_metrics(run_dir))
    assert steps == list(range(1, 22))
    assert shares["empty_turn_model_response"][0] == 0.25
    # A tag that did not occur in a step counts 0 there.
    assert shares["empty_turn_model_response"][10] == 0.0


def test_missing_parts_are_skipped_with_a_note(tmp_path):
    write_validation(tmp_path)
    page = write_report(tmp_path, split=tmp_path / "no_split.json")
    produced = {path.name for path in page.parent.glob("*.png")}
    assert produced == {"pass_rate.png", "failure_tags.png"}
    text = page.read_text()
    assert "no `metrics.jsonl` rows" in text
    assert "no capability state" in text
    assert "split file" in text and "not found" in text


def test_subset_of_the_split_is_flagged_as_not_comparable(tmp_path):
    write_validation(tmp_path)
    text = write_report(tmp_path).read_text()
    assert "380 missing" in text and "not comparable with the paper" in text
    assert main([str(tmp_path), "--no-split-check"]) == 0  # a subset on purpose
    text = (tmp_path / "report" / "report.md").read_text()
    assert "380 missing" not in text and "not checked against a split" in text


def test_capability_state_file_stands_in_for_epoch_summaries(tmp_path):
    state = CapabilityState()
    state.observe(TrajectoryOutcome(CATEGORIES[2], "t", 1.0, True, ["pass"], 7, 0))
    state.save(tmp_path / STATE_FILENAME)
    page = write_report(tmp_path)
    assert {path.name for path in page.parent.glob("*.png")} == {"capability.png"}
    assert "whole run up to step 7" in page.read_text()


def test_empty_run_is_an_error(tmp_path, capsys):
    with pytest.raises(EmptyRunError):
        write_report(tmp_path)
    assert main([str(tmp_path)]) == 1
    assert "no validation records, metrics or capability state" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [["RUN"], ["RUN", "--table", "markdown"], ["--table2", "RUN@3"],
     ["--compare", "HERE", "RUN"], ["--compare", "--arm", "A", "HERE", "--arm", "B", "RUN"]],
)  # fmt: skip
def test_a_run_that_does_not_exist_is_named_so_and_nothing_is_written(tmp_path, capsys, args):
    missing = tmp_path / "no_such_run"
    given = [{"RUN": str(missing), "HERE": str(tmp_path)}.get(a, a) for a in args]
    given = [a.replace("RUN@", f"{missing}@") for a in given]
    assert main(given) == 1
    assert capsys.readouterr().err == f"error: {missing}: no such directory\n"
    assert not missing.exists(), "a report folder was made under a run that is not there"


def test_malformed_records_fail_the_command(tmp_path, capsys):
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "step_000000.jsonl").write_text("{}\n")
    assert main([str(tmp_path)]) == 1
    assert "step_000000.jsonl:1" in capsys.readouterr().err


def test_colours_are_fixed_per_tag():
    assert figure_style.tag_color("pass") == figure_style.TAG_COLORS["pass"]
    assert figure_style.tag_color("a_new_tag") == figure_style.tag_color("a_new_tag")
    assert figure_style.ordered_tags(["pass", "zzz", "state_mismatch"]) == [
        "zzz",
        "state_mismatch",
        "pass",
    ]


def test_module_runs_as_a_command(run_dir):
    out_dir = run_dir / "elsewhere"
    done = subprocess.run(
        [sys.executable, "-m", "seal.report.cli", str(run_dir), "--out-dir", str(out_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (out_dir / "report.md").exists() and (out_dir / "capability.png").exists()


def test_a_run_with_a_patch_and_the_layers_off_is_shown_as_such(tmp_path, monkeypatch):
    """A vanilla GRPO run (exp/GRPO.yaml: apatch.enable false, no layer): its report says A-Patch
    and each layer were off and draws no A-Patch scale (issue 32: it looked like a SEAL run's,
    "scale 1.728")."""
    import torch

    from seal.tocf.apatch import APatchConfig, apply_apatch

    sys.path.insert(0, str(REPO))
    from omegaconf import OmegaConf

    import launcher

    OmegaConf.save(
        launcher.compose(REPO / "exp/GRPO.yaml", ["job=local"]), tmp_path / "config.yaml"
    )
    state = CapabilityState()
    off = APatchConfig(enable=False)
    with metrics_log.MetricsWriter(tmp_path) as log:
        for step in range(1, 4):
            tags = [["empty_turn_model_response"], ["pass"]]
            for k, sample_tags in enumerate(tags):
                outcome = TrajectoryOutcome(
                    CATEGORIES[0], f"t{k}", k, bool(k), sample_tags, step, 0
                )
                state.observe(outcome)
            state.update_weights()
            advantages = torch.tensor([[-1.0], [1.0]])
            _, apatch = apply_apatch(advantages, torch.ones(2, 1), tags, off, step=step,
                                     weights=state.weights)  # fmt: skip
            interface = {"episodes": 2, "layers": dict(NO_LAYERS)}
            log.write(step, {**state.metrics(), **apatch, **metrics_log.layer_metrics(interface)})
    titles = []
    save = plots._save

    def keep_titles(fig, path):
        titles.extend(ax.get_title() for ax in fig.axes)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep_titles)
    text = write_report(tmp_path).read_text()
    settings = section(text, "What the run trained with")
    assert "| A-Patch (advantage reweighting) | off |" in settings
    assert "| layer: schema_cues | off |" in settings and "| layer: guidelines | off |" in settings
    assert "| failure profile pushed to the service (closed loop) | off |" in settings
    assert "A-Patch was off in every step" in text
    assert not any("A-Patch: mean advantage scale" in title for title in titles)
    assert any("not applied (A-Patch off)" in title for title in titles)
    # Without a config, the metrics say the same.
    (tmp_path / "config.yaml").unlink()
    settings = section(write_report(tmp_path).read_text(), "What the run trained with")
    assert "| A-Patch (advantage reweighting) | on in 0 of 3 steps |" in settings
    assert "| layer: schema_cues | off |" in settings
