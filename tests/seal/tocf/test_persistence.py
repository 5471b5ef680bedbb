"""Capability state on disk: round trip, atomic saves, explicit resume, a light import."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seal import atomic_file
from seal.tocf.state import (
    STATE_FILENAME,
    CapabilityConfig,
    CapabilityState,
    TrajectoryOutcome,
    load_failure_profile,
    open_capability_state,
)


def busy_state(config=None):
    state = CapabilityState(config)
    for k in range(12):
        tags = ["pass", "state_mismatch"] if k % 3 else ["empty_turn_model_response"]
        state.observe(
            TrajectoryOutcome(
                "multi_turn_base", f"task_{k % 5}", k % 2 * 0.5, k % 4 == 0, tags, 3, 0
            )
        )
    state.update_weights()
    return state


def test_round_trip_restores_everything(tmp_path):
    config = CapabilityConfig(alpha=0.5, fixed_tags=["pass", "response_mismatch"])
    state = busy_state(config)
    path = state.save(tmp_path / STATE_FILENAME)
    loaded = CapabilityState.load(path)
    assert loaded.to_dict() == state.to_dict()
    assert loaded.config == config
    # a resumed state carries on exactly as the original would have
    assert loaded.update_weights() == state.update_weights()


def test_load_with_new_config_overrides_saved_one(tmp_path):
    path = busy_state().save(tmp_path / STATE_FILENAME)
    assert CapabilityState.load(path, CapabilityConfig(beta=0.5)).config.beta == 0.5


@pytest.mark.parametrize("failing_call", ["fsync", "replace"])
def test_crash_during_save_keeps_previous_file(tmp_path, monkeypatch, failing_call):
    path = tmp_path / STATE_FILENAME
    before = busy_state()
    before.save(path)
    after = busy_state()
    after.start_epoch(1)

    def crash(*args):
        raise OSError("disk gone")

    # fsync fails after the new text was written to the temporary file; replace fails
    # after it was fully flushed: neither may touch the saved state.
    monkeypatch.setattr(atomic_file.os, failing_call, crash)
    with pytest.raises(OSError, match="disk gone"):
        after.save(path)
    monkeypatch.undo()
    assert CapabilityState.load(path).to_dict() == before.to_dict()
    assert os.listdir(tmp_path) == [STATE_FILENAME]


def test_stale_temporary_file_does_not_disturb_load(tmp_path):
    # a process killed between write and rename leaves its temporary file behind
    path = busy_state().save(tmp_path / STATE_FILENAME)
    (tmp_path / f".{STATE_FILENAME}.abc.tmp").write_text('{"half": ')
    state, _ = open_capability_state(tmp_path, resume=True)
    assert state.run.num_trajectories == 12
    assert CapabilityState.load(path).step == 3


def test_fresh_run_refuses_a_directory_with_a_state(tmp_path):
    state, path = open_capability_state(tmp_path)
    assert path == tmp_path / STATE_FILENAME and state.run.num_trajectories == 0
    busy_state().save(path)
    with pytest.raises(FileExistsError, match="earlier run"):
        open_capability_state(tmp_path)
    resumed, _ = open_capability_state(tmp_path, resume=True)
    assert resumed.run.num_trajectories == 12


def test_resume_without_a_state_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_capability_state(tmp_path, resume=True)


def test_unknown_format_version_is_refused(tmp_path):
    data = busy_state().to_dict()
    data["version"] = 99
    path = tmp_path / STATE_FILENAME
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="version"):
        CapabilityState.load(path)


def test_load_failure_profile_from_file(tmp_path):
    state = busy_state()
    path = state.save(tmp_path / STATE_FILENAME)
    profile = load_failure_profile(path, min_count=4)
    assert profile == state.failure_profile(min_count=4)
    assert [e["tag"] for e in profile["tags"]] == ["state_mismatch", "empty_turn_model_response"]


def test_state_and_profile_import_without_torch(tmp_path):
    path = busy_state().save(tmp_path / STATE_FILENAME)
    code = (
        "import sys, seal.tocf, seal.tocf.weights, seal.tocf.summary\n"
        "from seal.tocf import load_failure_profile\n"
        f"load_failure_profile({str(path)!r})\n"
        "assert 'torch' not in sys.modules, 'seal.tocf imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])
