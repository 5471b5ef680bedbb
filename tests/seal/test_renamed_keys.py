"""Renamed config keys keep their old spellings (seal/renamed_keys.py): a layer's old keys
read as the new ones with one FutureWarning each, in the launcher's files, its `key=value`
overrides and a run recorded before the renames, which still resumes and compares."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seal import renamed_keys
from seal.renamed_keys import rename_old_keys
from seal.report import cli as report_cli

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402

BEFORE_RENAMES = REPO / "tests" / "data" / "config_before_renames.yaml"
"""config.yaml as main's launcher recorded conftest's one-step run before the renames."""


@pytest.fixture
def caught(monkeypatch):
    """Every warning issued (Python's once-per-place filter off: the once is ours)."""
    monkeypatch.setattr(renamed_keys, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def deprecations(caught) -> list[str]:
    return sorted(str(w.message) for w in caught if issubclass(w.category, FutureWarning))


def test_old_keys_move_to_their_new_names_with_one_warning_each(caught):
    old = {"trainer": {"apatch": {"budget": True, "enable": True}, "evolution": {"x": 1}}}
    assert rename_old_keys(old) == {
        "trainer": {"apatch": {"enable": True, "renormalize": True}, "interface": {"x": 1}}
    }
    rename_old_keys({"trainer": {"apatch": {"budget": False}}})
    assert deprecations(caught) == [
        "config key 'trainer.apatch.budget' is deprecated, read as "
        "'trainer.apatch.renormalize': rename it",
        "config key 'trainer.evolution' is deprecated, read as 'trainer.interface': rename it",
    ]
    new = {"trainer": {"apatch": {"renormalize": True}}, "other": 1}
    assert rename_old_keys(new) == {"trainer": {"apatch": {"renormalize": True}}, "other": 1}
    with pytest.raises(ValueError, match="'trainer.interface' given twice"):
        rename_old_keys({"trainer": {"interface": {}, "evolution": {}}})


def test_the_launcher_reads_old_keys_in_a_file_and_on_the_command_line(caught, tmp_path):
    conf = tmp_path / "old.yaml"
    conf.write_text("trainer:\n  apatch:\n    budget: true\n")
    cfg = launcher.compose(conf, ["trainer.evolution.guidelines=true"])
    assert cfg.trainer.apatch.renormalize is True and cfg.trainer.interface.guidelines is True
    assert cfg.trainer.interface.schema_cues is True, "the section's other keys keep defaults"
    assert len(deprecations(caught)) == 2


@pytest.mark.slow  # a resume and a comparison of conftest's one-step run: about 60 s
def test_a_run_recorded_before_the_renames_resumes_and_compares(one_step_run, tmp_path, caught):
    # conftest's run (made by today's launcher) with the config main recorded for the same
    # command before the renames, in each place the launcher writes it.
    old = shutil.copytree(
        one_step_run[0], tmp_path / "old" / "b", ignore=shutil.ignore_patterns(".lock")
    )
    recorded = BEFORE_RENAMES.read_text().replace("OUTPUT_DIR", str(old.parent))
    assert "\n    budget: false\n" in recorded and "\n  evolution:\n" in recorded
    for path in [old / "config.yaml", *old.glob("attempts/*/config.yaml")]:
        path.write_text(recorded)

    # The resume check finds nothing changed (a change would be refused: exit 1).
    assert launcher.main(["--resume", str(old)]) == 0
    resumed = OmegaConf.load(old / "attempts" / "002" / "config.yaml").trainer
    assert resumed.apatch.renormalize is False and resumed.interface.schema_cues is False
    assert (
        json.loads((old / "attempts" / "002" / "record.json").read_text())["accepted_changes"] == []
    )

    new = shutil.copytree(
        one_step_run[0], tmp_path / "new" / "b", ignore=shutil.ignore_patterns(".lock")
    )
    out = tmp_path / "cmp"
    argv = ["--compare", "--arm", "old", str(old), "--arm", "new", str(new), "--out-dir", str(out)]
    assert report_cli.main([*argv, "--resamples", "200"]) == 0
    differences = json.loads((out / "compare.json").read_text())["config_differences"]
    assert set(differences) == {"output_dir"}, differences

    assert deprecations(caught) == [
        "config key 'trainer.apatch.budget' is deprecated, read as "
        "'trainer.apatch.renormalize': rename it",
        "config key 'trainer.evolution' is deprecated, read as 'trainer.interface': rename it",
    ]
