"""seal.learning_check's `seeds` command: the per-seed table and the between-run
statistics; its command line."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from seal.learning_check import cli, curves, run, warm_up
from seal.runs.metrics_log import read_metrics
from seal.runs.records import read_val_dir


def write_curve(path, evals: dict[int, float]):
    path.parent.mkdir(parents=True)
    curve = [{"step": s, "eval_success": v} for s, v in evals.items()]
    curve.insert(1, {"step": 1, "train_success": 0.5})  # train-only rows are skipped
    path.write_text(json.dumps({"curve": curve}))
    return path


def test_table_and_change(tmp_path, capsys):
    a = write_curve(tmp_path / "s0/curve.json", {0: 0.1, 4: 0.2, 8: 0.3})
    b = write_curve(tmp_path / "s1/curve.json", {0: 0.1, 4: 0.1, 8: 0.0})
    assert curves.eval_curve(a) == {0: 0.1, 4: 0.2, 8: 0.3}
    curves.print_group("off", {"s0": curves.eval_curve(a), "s1": curves.eval_curve(b)})
    out = capsys.readouterr().out
    assert "| 8 | 0.300 | 0.000 | 0.150 ± 0.150 |" in out
    assert "change +0.050 ± 0.150; rose in 1/2 runs" in out


def test_the_table_says_a_patch_was_off_rather_than_a_scale(capsys):
    curves.print_table([{"step": 0, "eval_success": 0.25},
                    {"step": 1, "train_success": 0.5, "train_reward": 0.5,
                     "apatch_mean_scale": None}])  # fmt: skip
    out = capsys.readouterr().out
    assert "| 1 | 0.500 | 0.500 | off |  |  |" in out and "| 0 |  |  |  | 0.250 |" in out


def test_mean_and_se():
    mean, se = curves.mean_and_se([0.2, 0.4])
    assert mean == pytest.approx(0.3) and se == pytest.approx(0.1)


def test_seeds_command_groups_by_label_and_refuses_a_label_count_mismatch(tmp_path, capsys):
    a = write_curve(tmp_path / "s0/curve.json", {0: 0.1, 4: 0.3})
    b = write_curve(tmp_path / "s1/curve.json", {0: 0.2, 4: 0.2})
    c = write_curve(tmp_path / "s2/curve.json", {0: 0.0, 4: 0.4})
    args = ["seeds", str(a), str(b), str(c), "--label", "off", "off", "on"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "### off (2 runs)" in out and "### on (1 runs)" in out
    assert "| 4 | 0.300 | 0.200 | 0.250 ± 0.050 |" in out
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["seeds", str(a), str(b), str(c), "--label", "off", "on"])
    assert exit_info.value.code == 2
    assert "2 labels for 3 files" in capsys.readouterr().err


def test_run_command_defaults_are_the_documented_ones():
    args = cli.parse_args(["run"])
    assert (args.k, args.steps, args.n, args.lr, args.guidelines) == (4, 12, 8, 1e-4, False)
    assert args.out_dir == cli.REPO_ROOT / "outputs" / "learning_check"


def test_run_command_warms_up_then_trains_from_the_warmed_policy(tmp_path):
    """The whole `run` at its smallest: 1 task, 2 warm-up steps, 1 GRPO step."""
    out = tmp_path / "out"
    args = ["run", "--k", "1", "--steps", "1", "--n", "2", "--warmup-max-steps", "2",
            "--warmup-check-every", "1", "--warmup-check-nll", "1e9",
            "--warmup-check-samples", "1", "--eval-samples", "1", "--out-dir", str(out)]  # fmt: skip
    assert cli.main(args) == 0
    result = json.loads((out / "curve.json").read_text())
    warm = result["warmup"]["history"]
    assert [w["step"] for w in warm] == [1, 2] and warm[1]["nll"] < warm[0]["nll"]
    assert [r["step"] for r in result["curve"]] == [0, 1]
    assert all("eval_success" in r for r in result["curve"])  # the last step is evaluated
    # GRPO starts from the warmed-up weights: its KL reference is them, not the random
    # model the warm-up changed, so the first update's KL is nil.
    assert result["curve"][1]["kl"] == 0.0
    assert (out / "warm_policy.pt").exists() and (out / "curve.png").stat().st_size > 0
    assert [r["step"] for r in read_metrics(out / "run")] == [1]
    # The evaluations as validation records (one per sampled episode, numbered) and the
    # run's config, for seal-report --compare; the seal arm: A-Patch on, its scale logged.
    steps = read_val_dir(out / "run" / "validation")
    assert sorted(steps) == [0, 1] and [r.extra["sample"] for r in steps[1]] == [0]
    assert steps[1][0].extra["mode"] == "sample"
    config = OmegaConf.load(out / "run" / "config.yaml")
    assert config.trainer.apatch.enable and config.trainer.interface.schema_cues
    assert config.learning_check.arm == "seal"
    assert result["curve"][1]["apatch_mean_scale"] is not None
    assert result["grpo_s"] < result["runtime_s"]


@pytest.mark.slow
def test_the_arms_command_compares_seal_and_vanilla_grpo_from_one_warm_up(tmp_path):
    """`arms` at its smallest (one seed, 1 task, 1 GRPO step): the seal run warms up, the
    grpo run starts from its weights, both evaluated on the plain benchmark; the comparison
    page follows."""
    out = tmp_path / "arms"
    run_args = ["--", "--k", "1", "--steps", "1", "--n", "2", "--warmup-max-steps", "1",
                "--warmup-check-nll", "1e9", "--warmup-check-every", "1",
                "--warmup-check-samples", "1", "--eval-samples", "2"]  # fmt: skip
    assert cli.main(["arms", "--seeds", "0", "--out-dir", str(out), *run_args]) == 0
    seal, grpo = (json.loads((out / f"{arm}_0" / "curve.json").read_text()) for arm in run.ARMS)
    assert seal["args"]["eval_mode"] == grpo["args"]["eval_mode"] == "validate"
    assert grpo["args"]["warm_policy"] == str(out / "seal_0" / "warm_policy.pt")
    assert grpo["warmup"]["history"] == [] and len(seal["warmup"]["history"]) == 1
    # Vanilla GRPO: A-Patch off, no scale; its config says so.
    assert grpo["curve"][1]["apatch_mean_scale"] is None
    config = OmegaConf.load(out / "grpo_0" / "run" / "config.yaml")
    assert not config.trainer.apatch.enable and not config.trainer.interface.schema_cues
    assert not config.trainer.rollout.push_profile
    for arm in run.ARMS:
        records = read_val_dir(out / f"{arm}_0" / "run" / "validation")[1]
        assert [r.extra["mode"] for r in records] == ["validate", "validate"]
    assert (out / "compare_fixed" / "compare.md").exists()
    numbers = json.loads((out / "compare" / "compare.json").read_text())
    assert [a["name"] for a in numbers["arms"]] == ["SEAL", "GRPO"] and numbers[
        "baseline"
    ] == "GRPO"
    # The runs are named by their shortest distinct path ending; their configs differ in
    # the arm's switches.
    assert numbers["config_differences"]["trainer.apatch.enable"] == {
        "seal_0/run": True,
        "grpo_0/run": False,
    }


def test_the_warm_up_step_accumulates_the_gradient_of_one_batch():
    """nll_step goes one episode at a time (memory: one episode's logits); its gradient and
    its NLL per episode are those of all episodes as one padded batch."""
    import torch
    from tiny_models import PAD, SAMPLES, SMALL_VOCAB, tiny_qwen2

    from seal.trainer.update import collate, response_logprobs

    model = tiny_qwen2(vocab_size=SMALL_VOCAB)
    batch = collate(SAMPLES, list(range(len(SAMPLES))), PAD, torch.device("cpu"))
    logp, _ = response_logprobs(model, batch, 1024)
    loss = -(logp * batch.response_mask).sum() / batch.response_mask.sum()
    loss.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    expected_nll = loss.item() * float(batch.response_mask.sum()) / len(SAMPLES)

    class KeepGradients(torch.optim.SGD):
        def step(self, closure=None):  # the gradient nll_step leaves, before any change
            self.grads = {n: p.grad.clone() for n, p in model.named_parameters()}

    optimizer = KeepGradients(model.parameters(), lr=0.0)
    model.zero_grad()
    nll = warm_up.nll_step(model, optimizer, SAMPLES, PAD, 1024)
    assert nll == pytest.approx(expected_nll, rel=1e-5)
    clipped = min(1.0, 1.0 / torch.cat([g.flatten() for g in expected.values()]).norm().item())
    for name, grad in optimizer.grads.items():
        relative = ((grad - expected[name] * clipped).norm() / expected[name].norm()).item()
        assert relative < 1e-4, name
