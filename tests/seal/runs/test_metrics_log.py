"""Training metrics log: round trip, resume truncation, crash leftovers, the wandb sink, key
names of the producers."""

import json
import math
import sys
from types import SimpleNamespace

import pytest
import torch

from seal.algos.loss import PolicyLossConfig, actor_loss
from seal.runs import metrics_log
from seal.tocf.apatch import APatchConfig, apply_apatch
from seal.tocf.state import CapabilityState, TrajectoryOutcome


def write_steps(run_dir, steps, resume_step=None):
    with metrics_log.MetricsWriter(run_dir, resume_step=resume_step) as log:
        for step in steps:
            log.write(step, {metrics_log.REWARD_MEAN: step / 10, metrics_log.LOSS_KL: step})


def test_rows_round_trip_with_numbers_as_written(tmp_path):
    with metrics_log.MetricsWriter(tmp_path) as log:
        log.write(
            1,
            {
                metrics_log.REWARD_MEAN: 0.25,
                "train/num_samples": 256,
                metrics_log.LOSS_POLICY: math.nan,
            },
        )
        log.write(2, {metrics_log.REWARD_MEAN: 0.5})
    rows = metrics_log.read_metrics(tmp_path)
    assert rows == [
        {
            "step": 1,
            metrics_log.REWARD_MEAN: 0.25,
            "train/num_samples": 256,
            metrics_log.LOSS_POLICY: None,
        },
        {"step": 2, metrics_log.REWARD_MEAN: 0.5},
    ]
    assert isinstance(rows[0]["train/num_samples"], int)
    # The file is plain JSON (no NaN token) that any reader accepts.
    text = (tmp_path / metrics_log.METRICS_FILENAME).read_text()
    assert "NaN" not in text and [json.loads(line) for line in text.splitlines()] == rows
    steps, values = metrics_log.series(rows, metrics_log.LOSS_POLICY)
    assert steps == [1] and math.isnan(values[0])
    assert metrics_log.series(rows, metrics_log.REWARD_MEAN) == ([1, 2], [0.25, 0.5])


def test_rows_are_on_disk_after_each_write(tmp_path):
    log = metrics_log.MetricsWriter(tmp_path)
    log.write(1, {metrics_log.REWARD_MEAN: 0.1})
    assert metrics_log.read_metrics(tmp_path) == [{"step": 1, metrics_log.REWARD_MEAN: 0.1}]
    log.close()


def test_new_run_refuses_an_existing_log(tmp_path):
    write_steps(tmp_path, [1, 2])
    with pytest.raises(FileExistsError, match="resume"):
        metrics_log.MetricsWriter(tmp_path)


def test_resume_drops_rows_after_the_resumed_step_and_appends(tmp_path):
    write_steps(tmp_path, [1, 2, 3, 4, 5])
    with metrics_log.MetricsWriter(tmp_path, resume_step=3) as log:
        assert [row["step"] for row in metrics_log.read_metrics(tmp_path)] == [1, 2, 3]
        with pytest.raises(ValueError, match="after step 3"):
            log.write(3, {metrics_log.REWARD_MEAN: 0.0})
        log.write(4, {metrics_log.REWARD_MEAN: 0.99})
    rows = metrics_log.read_metrics(tmp_path)
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert rows[-1][metrics_log.REWARD_MEAN] == 0.99


def test_resume_without_a_log_starts_one(tmp_path):
    write_steps(tmp_path, [8, 9], resume_step=7)
    assert [row["step"] for row in metrics_log.read_metrics(tmp_path)] == [8, 9]


def test_line_cut_short_by_a_crash_is_ignored_and_removed_on_resume(tmp_path):
    write_steps(tmp_path, [1, 2])
    path = tmp_path / metrics_log.METRICS_FILENAME
    with path.open("a") as log:
        log.write('{"step": 3, "train/rew')
    assert [row["step"] for row in metrics_log.read_metrics(path)] == [1, 2]
    write_steps(tmp_path, [3], resume_step=2)
    assert [row["step"] for row in metrics_log.read_metrics(path)] == [1, 2, 3]


@pytest.mark.parametrize(
    "lines, problem",
    [
        (['{"step": 1}', "not json", '{"step": 3}'], ":2: not JSON"),
        (['{"step": 1}', '{"loss/kl": 1.0}'], ":2: expected an object with an integer 'step'"),
        (['{"step": 2}', '{"step": 2}'], ":2: step 2 does not follow step 2"),
        (['{"step": 1}', ""], ":2: not JSON"),
    ],
)
def test_malformed_logs_name_file_and_line(tmp_path, lines, problem):
    path = tmp_path / metrics_log.METRICS_FILENAME
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(metrics_log.MetricsFormatError, match=problem):
        metrics_log.read_metrics(path)


def test_writer_refuses_bad_rows(tmp_path):
    with metrics_log.MetricsWriter(tmp_path) as log:
        with pytest.raises(TypeError, match="'actor/kl_loss' must be a number"):
            log.write(1, {metrics_log.LOSS_KL: "0.1"})
        with pytest.raises(TypeError, match="must be a number, not bool"):
            log.write(1, {"apatch/active": True})
        with pytest.raises(ValueError, match="row's key"):
            log.write(1, {"step": 1})
        log.write(5, {})
        with pytest.raises(ValueError, match="step 4 logged after step 5"):
            log.write(4, {})


def test_tag_fractions_are_shares_of_turns():
    fractions = metrics_log.tag_fractions(
        [["pass", "state_mismatch"], ["pass", "pass", "spurious_tool_call"]]
    )
    assert fractions == {
        "train/tag_frac/pass": 0.6,
        "train/tag_frac/spurious_tool_call": 0.2,
        "train/tag_frac/state_mismatch": 0.2,
    }
    assert metrics_log.names_under([fractions], metrics_log.TAG_FRAC_PREFIX) == [
        "pass",
        "spurious_tool_call",
        "state_mismatch",
    ]


def test_key_names_match_what_the_capability_state_apatch_and_the_loss_emit():
    state = CapabilityState()
    state.observe(TrajectoryOutcome("multi_turn_base", "t", 0.0, False, ["state_mismatch"], 1, 0))
    weights = state.update_weights()
    metrics = state.metrics()
    assert {metrics_log.tag_weight_key(tag) for tag in weights} <= metrics.keys()
    assert metrics_log.names_under([metrics], metrics_log.TAG_WEIGHT_PREFIX) == sorted(weights)

    _, apatch_metrics = apply_apatch(
        torch.ones(2, 3),
        torch.ones(2, 3),
        [["state_mismatch"], ["pass"]],
        APatchConfig(),
        step=1,
        weights=weights,
    )
    assert metrics_log.APATCH_MEAN_SCALE in apatch_metrics

    log_prob = torch.zeros(1, 3)
    _, loss_metrics = actor_loss(
        log_prob,
        log_prob,
        torch.ones(1, 3),
        torch.ones(1, 3),
        PolicyLossConfig(use_kl_loss=True),
        ref_log_prob=log_prob,
    )
    assert {metrics_log.LOSS_POLICY, metrics_log.LOSS_KL} <= loss_metrics.keys()


class FakeWandb:
    """Stands for the wandb module: records what the writer asks of it."""

    def __init__(self):
        self.inits, self.logged, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(
            log=lambda row, step: self.logged.append((step, row)), finish=self.finish
        )

    def finish(self):
        self.finished += 1


def test_rows_also_go_to_wandb_offline_without_a_key(tmp_path, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    settings = metrics_log.WandbSettings("online", "proj", {"lr": 0.1})
    with metrics_log.MetricsWriter(tmp_path / "run", wandb=settings) as log:
        log.write(1, {metrics_log.REWARD_MEAN: 0.5})
        log.write(2, {metrics_log.REWARD_MEAN: float("nan")})
    [init] = fake.inits
    assert init["mode"] == "offline" and init["project"] == "proj" and init["name"] == "run"
    assert init["config"] == {"lr": 0.1} and init["dir"] == str(tmp_path / "run")
    assert fake.logged[0] == (1, {metrics_log.REWARD_MEAN: 0.5}) and fake.logged[1][0] == 2
    assert fake.finished == 1
    assert [row["step"] for row in metrics_log.read_metrics(tmp_path / "run")] == [
        1,
        2,
    ]  # and the file

    monkeypatch.setenv("WANDB_API_KEY", "k")
    metrics_log.MetricsWriter(tmp_path / "online", wandb=settings).close()
    assert fake.inits[-1]["mode"] == "online"
    metrics_log.MetricsWriter(
        tmp_path / "off", wandb=metrics_log.WandbSettings("disabled", "proj")
    ).close()
    assert len(fake.inits) == 2  # disabled: no wandb run


def test_a_resumed_run_logs_into_its_first_wandb_run(tmp_path, monkeypatch):
    """A resume opens the wandb run of the first start (its id kept in the run
    directory), not a second one; another run directory gets another id."""
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    settings = metrics_log.WandbSettings("offline", "proj")
    with metrics_log.MetricsWriter(tmp_path / "run", wandb=settings) as log:
        log.write(1, {metrics_log.REWARD_MEAN: 0.5})
    metrics_log.MetricsWriter(tmp_path / "run", resume_step=1, wandb=settings).close()
    metrics_log.MetricsWriter(tmp_path / "other", wandb=settings).close()
    first, resumed, other = fake.inits
    assert first["id"] and resumed["id"] == first["id"] and other["id"] != first["id"]
    assert resumed["resume"] in ("allow", "must")


def test_wandb_asked_for_but_missing_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(RuntimeError, match="wandb is not installed"):
        metrics_log.MetricsWriter(tmp_path, wandb=metrics_log.WandbSettings("offline", "proj"))
