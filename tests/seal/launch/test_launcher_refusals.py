"""The launcher's refusals that come before anything is written: a fresh start over an
earlier run's state, a resume with a changed data order, a damaged state file, each
named and leaving the earlier run untouched."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402
from seal import commands  # noqa: E402
from seal.runs import checkpoint as ckpt  # noqa: E402
from seal.runs.data_order import DATA_ORDER_FILENAME, DataOrderChanged, data_order  # noqa: E402
from seal.runs.run_dir_checks import check_run_dir  # noqa: E402
from seal.tocf.state import STATE_FILENAME, CapabilityState  # noqa: E402

CPU = REPO / "exp/cpu_default.yaml"

pytestmark = pytest.mark.usefixtures("no_token_from_the_environment")


# --- refusals before anything is written ------------------------------------------------


def training_args(tmp_path, *overrides) -> list[str]:
    return ["--conf", str(CPU), f"output_dir={tmp_path}", "name=run", *overrides]


def earlier_run(tmp_path, step: int = 1, **overrides) -> Path:
    """A run directory as a local run of cpu_default leaves it after checkpoint `step`."""
    cfg = launcher.compose(CPU, [f"output_dir={tmp_path}", "name=run"])
    run_dir = tmp_path / "run"
    path = ckpt.checkpoint_dir(run_dir, step)
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(
        json.dumps(dataclasses.asdict(ckpt.TrainerState(step=step)))
    )
    CapabilityState().save(path / STATE_FILENAME)
    CapabilityState().save(run_dir / STATE_FILENAME)
    (run_dir / "checkpoints" / ckpt.LATEST).write_text(
        json.dumps({"step": step, "path": path.name})
    )
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1}\n')
    (run_dir / DATA_ORDER_FILENAME).write_text(json.dumps(data_order(cfg.trainer)))
    OmegaConf.save(cfg, run_dir / "config.yaml")
    return run_dir


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_a_refused_fresh_start_leaves_the_earlier_run_untouched(tmp_path, capsys):
    run_dir = earlier_run(tmp_path)
    before = snapshot(run_dir)
    assert launcher.main(training_args(tmp_path, "trainer.rollout.n=2")) == 1
    err = capsys.readouterr().err
    # The one resume wording, runnable as pasted (tests/seal/test_commands.py).
    assert "holds an earlier run (" in err and f"resume it with `{commands.resume(run_dir)}`" in err
    assert snapshot(run_dir) == before, "the refused start changed the earlier run's files"


def test_resume_refuses_a_changed_data_order_unless_told(tmp_path, capsys):
    run_dir = earlier_run(tmp_path)
    before = snapshot(run_dir)
    resume = training_args(tmp_path, "trainer.checkpoint.resume=true")
    for change, named in [
        ("trainer.data.seed=1", "trainer.data.seed: 0 -> 1"),
        ("trainer.data.train_batch_size=2", "trainer.data.train_batch_size: 4 -> 2"),
        ("trainer.data.max_train_tasks=8", "16 tasks"),
    ]:
        assert launcher.main([*resume, change]) == 1
        err = capsys.readouterr().err
        assert "DataOrderChanged" in err and named in err, err
        assert "trainer.checkpoint.allow_data_order_change=true" in err
    assert snapshot(run_dir) == before

    cfg = launcher.compose(CPU, [f"output_dir={tmp_path}", "name=run", "trainer.data.seed=1",
                                 "trainer.checkpoint.resume=true"])  # fmt: skip
    with pytest.raises(DataOrderChanged):
        check_run_dir(run_dir, cfg.trainer, "local")
    cfg.trainer.checkpoint.allow_data_order_change = True
    assert check_run_dir(run_dir, cfg.trainer, "local") == ["trainer.data.seed: 0 -> 1"]
    cfg.trainer.data.seed = 0
    assert check_run_dir(run_dir, cfg.trainer, "local") == []


@pytest.mark.parametrize(
    "damaged",
    [
        STATE_FILENAME,
        f"checkpoints/step_000001/{STATE_FILENAME}",
        "checkpoints/step_000001/trainer_state.json",
        f"checkpoints/{ckpt.LATEST}",
        DATA_ORDER_FILENAME,
    ],
)
def test_a_damaged_state_file_is_named(tmp_path, capsys, damaged):
    """A state file cut short (a crash, a full disk) fails the resume with its name;
    the run directory's own capability state is re-made from the checkpoint's."""
    run_dir = earlier_run(tmp_path)
    path = run_dir / damaged
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    code = launcher.main(training_args(tmp_path, "trainer.checkpoint.resume=true",
                                       "service.start=false", "service.port=1"))  # fmt: skip
    err = capsys.readouterr().err
    if damaged == STATE_FILENAME:  # the checkpoint's copy is the one resumed from
        assert "StateFileError" not in err and code == 1  # fails later: no service on port 1
        return
    assert code == 1 and "StateFileError" in err and str(path) in err, err
    assert "damaged, not JSON" in err


def test_capability_state_load_names_the_file(tmp_path):
    path = tmp_path / STATE_FILENAME
    CapabilityState().save(path)
    path.write_text(path.read_text()[:40])
    with pytest.raises(ValueError, match=rf"{path}: the capability state is damaged"):
        CapabilityState.load(path)
    path.write_text('{"version": 1}')
    with pytest.raises(ValueError, match=rf"{path}: not a capability state .*KeyError"):
        CapabilityState.load(path)
