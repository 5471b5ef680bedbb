"""A resume checks its environment service, not only its config (seal/launch/resume.py).

The `service` section is resume-safe, so a resume could adopt a service started with
other limits (`--max-calls-per-step 1`) and record `accepted_changes: []`. Now each
attempt records the settings its service reports (`GET /v1/whoami`); a resume whose
service differs in one that changes what an episode may do is refused before anything
is written, unless `--accept-config-change`, and every change of the service is recorded.

On a copy of the shared one-step run (tests/conftest.py's one_step_run), resumed with its
training replaced by a no-op: what is checked is the launcher's, before and after the job.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402
from seal.launch.resume import SERVICE_SETTINGS_SAFE  # noqa: E402
from seal.launch.service import new_token  # noqa: E402
from seal.rollout.env_client import TOKEN_ENV  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_token_from_the_environment")
LIMIT_CHANGE = "env_service.max_calls_per_step: 128 (recorded) -> 1 (now)"


def _no_training(cfg, url, run, split_file):
    return None


def record(run_dir: Path, number: int) -> dict:
    return json.loads((run_dir / "attempts" / f"{number:03d}" / "record.json").read_text())


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_a_resume_adopting_a_service_with_other_limits_is_refused_unless_accepted(
    one_step_run, tmp_path, capsys, monkeypatch, service_process
):
    run_dir = shutil.copytree(
        one_step_run[0], tmp_path / "b", ignore=shutil.ignore_patterns(".lock")
    )
    first = record(run_dir, 1)["service"]
    assert first["adopted"] is False and first["settings"]["max_calls_per_step"] == 128
    assert "token" not in first["settings"]

    token = new_token()
    monkeypatch.setenv(TOKEN_ENV, token)
    flags = ("--max-calls-per-step", "1", "--max-live-episodes", "64")
    port = service_process(*flags, env={TOKEN_ENV: token}).url.rsplit(":", 1)[1]
    monkeypatch.setitem(launcher.JOBS, "local", f"{__name__}:_no_training")
    resume = ["--resume", str(run_dir), "--", "service.start=false", f"service.port={port}"]
    before = snapshot(run_dir)
    capsys.readouterr()
    assert launcher.main(resume) == 1
    err = capsys.readouterr().err
    assert LIMIT_CHANGE in err and "--accept-config-change" in err, err
    assert "max_live_episodes" not in err, "a setting a resume may change was refused"
    assert snapshot(run_dir) == before, "the refused resume wrote into the run"

    assert launcher.main([*resume[:2], "--accept-config-change", *resume[2:]]) == 0
    second = record(run_dir, 2)
    assert second["accepted_changes"] == [LIMIT_CHANGE]
    assert second["service"]["adopted"] is True
    assert second["service"]["settings"]["max_calls_per_step"] == 1
    assert set(second["service_changes"]) == {
        LIMIT_CHANGE,
        "env_service.max_live_episodes: 1024 (recorded) -> 64 (now)",
        "service.start: True (recorded) -> False (now)",
        f"service.port: 0 (recorded) -> {port} (now)",
    }
    assert token not in (run_dir / "attempts/002/record.json").read_text()


def test_every_resume_safe_service_setting_is_one_the_service_has():
    from env_service.service_config import ServiceConfig

    assert set(SERVICE_SETTINGS_SAFE) <= set(ServiceConfig.model_fields) - {"token"}


def test_a_service_that_reports_no_settings_needs_acceptance_and_an_old_record_none(tmp_path):
    """An adopted service of a version that reports no settings cannot show they are the
    recorded ones; a run recorded before settings were recorded has nothing to compare."""
    from seal.launch.resume import ResumeConfigChanged, ServiceBaseline, check_service

    recorded = ServiceBaseline({"max_calls_per_step": 128}, [])
    with pytest.raises(ResumeConfigChanged, match=r"env_service\.\*: 'reported'"):
        check_service(recorded, None, tmp_path, accept=False)
    accepted, changes = check_service(recorded, None, tmp_path, accept=True)
    assert accepted == changes and [c.key for c in changes] == ["env_service.*"]
    unrecorded = ServiceBaseline(None, [])
    assert check_service(unrecorded, {"max_calls_per_step": 1}, tmp_path, False) == ([], [])
