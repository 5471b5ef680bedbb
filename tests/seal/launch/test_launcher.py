"""The launcher in-process: config composition and its errors, the run's service (its
own, stopped on exit; an adopted one only with the run's token), the token kept out of
config.yaml and argv, and loading a job. The refusals that come before anything is
written: test_launcher_refusals.py; runs as processes (locks, kill -9):
test_launcher_runs.py."""

from __future__ import annotations

import gc
import importlib
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402
from seal.launch.service import (  # noqa: E402
    ServiceIdentityError,
    adopt_service,
    check_identity,
    new_token,
    start_service,
)
from seal.rollout.env_client import TOKEN_ENV, is_healthy  # noqa: E402
from seal.runs.records import ValidationRecord, write_step  # noqa: E402

CPU = REPO / "exp/cpu_default.yaml"

pytestmark = pytest.mark.usefixtures("no_token_from_the_environment")


@pytest.fixture
def job_named_record(monkeypatch):
    """Registers `job=record`, which runs the function the test puts in the returned dict."""
    hooks = {}
    monkeypatch.setitem(launcher.JOBS, "record", f"{__name__}:_run_recorded_job")
    monkeypatch.setitem(globals(), "_hooks", hooks)
    return hooks


_hooks: dict = {}


def _run_recorded_job(cfg, url, run_dir, split_file):
    return _hooks["job"](cfg, url, run_dir, split_file)


def test_compose_merges_yaml_and_overrides():
    cfg = launcher.compose(REPO / "exp/SEAL.yaml", ["trainer.rollout.n=4"])
    assert cfg.trainer.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.trainer.rollout.n == 4
    # The release's arithmetic: its per-episode loss weight, training cut and context stop.
    assert cfg.trainer.loss.loss_agg_mode == "seq-mean-token-mean"
    assert cfg.trainer.loss.trained_response_tokens == 4096
    assert cfg.trainer.limits.context_stop == "release"


@pytest.mark.parametrize("conf", sorted((REPO / "exp").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_composes(conf):
    cfg = launcher.compose(conf, [])
    assert cfg.job in launcher.JOBS
    assert cfg.service.port == 0, "a shipped config pins a port: two runs would share it"


def test_unknown_key_and_missing_file_fail_clearly(tmp_path, capsys):
    assert launcher.main(["--conf", str(tmp_path / "nope.yaml")]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = ["--conf", str(REPO / "exp/replay_demo.yaml"), "trainer.rollout.nn=3"]
    assert launcher.main(bad) == 1
    assert "nn" in capsys.readouterr().err


def test_a_misspelt_key_is_answered_with_the_closest_valid_names(capsys):
    assert launcher.main(["--", "trainer.rollout.nn=3", "output_dir=/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert "unknown config key 'trainer.rollout.nn' (in the command line)" in err, err
    assert "did you mean trainer.rollout.n" in err and "ConfigKeyError" not in err
    assert launcher.main(["--", "trainer.apatch.enabled=false"]) == 1
    assert "did you mean trainer.apatch.enable" in capsys.readouterr().err


def test_explain_shows_the_values_of_the_given_config_beside_the_defaults(capsys):
    assert launcher.main(["--explain"]) == 0
    defaults = capsys.readouterr().out
    # The paper's defaults, the nested sections' included (the interface's default
    # is the paper's interface, not the section class's own).
    assert "trainer.interface.schema_cues = True\n" in defaults
    assert launcher.main(["--explain", "--conf", str(REPO / "exp/GRPO.yaml"),
                          "trainer.rollout.n=4"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "trainer.interface.schema_cues = False    (default: True)" in text
    assert "trainer.apatch.enable = False    (default: True)" in text
    assert "trainer.rollout.n = 4    (default: 8)" in text
    assert "trainer.limits.max_generations = 20\n" in text


def test_explain_without_a_conf_shows_the_main_jobs_config(capsys):
    """`launcher.py --explain` describes what `launcher.py` runs (exp/cpu_default.yaml), not
    the schema's defaults (a `replay_demo` run of the `replay` job)."""
    assert launcher.main(["--explain"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# the config of exp/cpu_default.yaml"), text[:200]
    assert "name = 'cpu_default'    (default: 'replay_demo')" in text
    assert "job = 'local'    (default: 'replay')" in text
    assert "trainer.model.path = 'tiny-qwen2'" in text


@pytest.mark.parametrize("name", ["../escape", "ABSOLUTE", "a/b", "my run", ".hidden", ".."])
def test_a_run_name_that_is_not_one_safe_path_component_is_refused(tmp_path, capsys, name):
    name = str(tmp_path / "abs") if name == "ABSOLUTE" else name
    # service.start=false without a port: a start that got past the name fails at once.
    args = ["--", f"output_dir={tmp_path / 'out'}", f"name={name}", "service.start=false"]
    assert launcher.main(args) == 1
    err = capsys.readouterr().err
    assert f"run name {name!r} refused" in err and "one path component" in err, err
    assert list(tmp_path.iterdir()) == [], "a refused name wrote something"


def test_an_empty_run_name_is_refused_with_the_rule(capsys):
    assert launcher.main(["--", "name="]) == 1
    err = capsys.readouterr().err
    assert "the run name is empty" in err and "one path component" in err, err
    assert "ValidationError" not in err
    for name in ("seal_tiny", "run-2.b", "Qwen2.5_7B"):
        assert launcher.compose(CPU, [f"name={name}"]).name == name


def test_a_port_held_by_another_program_is_named(tmp_path, capsys):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        args = ["--conf", str(REPO / "exp/replay_demo.yaml"), f"output_dir={tmp_path}",
                f"service.port={port}"]  # fmt: skip
        assert launcher.main(args) == 1
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is in use by another program" in err, err
    assert "exited with code" not in err
    assert list(tmp_path.iterdir()) == [], "the refused start left its run directory"


def test_adopting_needs_a_port_a_token_and_a_service(tmp_path, capsys, monkeypatch):
    base = ["--conf", str(REPO / "exp/replay_demo.yaml"), "service.start=false",
            f"output_dir={tmp_path}"]  # fmt: skip
    assert launcher.main(base) == 1
    assert "service.start=false needs service.port" in capsys.readouterr().err
    assert launcher.main([*base, f"service.port={free_port()}"]) == 1
    assert f"set ${TOKEN_ENV}" in capsys.readouterr().err
    monkeypatch.setenv(TOKEN_ENV, "t0ken")
    assert launcher.main([*base, f"service.port={free_port()}"]) == 1
    assert "no environment service" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [], "a refused start left its run directory"


def test_a_service_that_fails_to_start_leaves_its_log(tmp_path, capsys):
    """The one refusal whose run directory stays: the error names the service's log."""
    args = ["--conf", str(REPO / "exp/replay_demo.yaml"), f"output_dir={tmp_path}",
            "service.max_live_episodes=0"]  # fmt: skip
    assert launcher.main(args) == 1
    assert "exited with code" in capsys.readouterr().err
    assert (tmp_path / "replay_demo" / "env_service.log").stat().st_size > 0
    # A refusal in a directory that was there before leaves it as it was.
    assert launcher.main([*args[:-1], "service.start=false"]) == 1
    assert (tmp_path / "replay_demo" / "env_service.log").exists()


# --- the run's own service and adopted ones (they need the service's authentication) -----


def test_a_started_service_needs_its_token_and_is_stopped_on_exit(tmp_path):
    token = new_token()
    with (
        pytest.raises(RuntimeError, match="boom"),
        start_service("127.0.0.1", 0, tmp_path / "log", token) as service,
    ):
        assert is_healthy(service.url)
        check_identity(service.url, token)
        with pytest.raises(ServiceIdentityError, match="does not accept this run's token"):
            check_identity(service.url, new_token())
        raise RuntimeError("boom")
    assert not is_healthy(service.url), "the service outlived the launcher"


def test_work_given_to_the_start_up_runs_while_the_service_starts_and_its_error_stops_it(
    tmp_path,
):
    """`meanwhile` (the launcher imports the job there) runs once, with the service's
    process already started and not yet checked; an error in it ends that process."""
    port, seen = free_port(), []

    def meanwhile():
        seen.append(_service_pid(port))

    with start_service("127.0.0.1", port, tmp_path / "log", new_token(), meanwhile=meanwhile) as s:
        assert seen == [s.pid] and is_healthy(s.url)

    port = free_port()

    def failing():
        seen.append(_service_pid(port))
        raise ModuleNotFoundError("the job does not import")

    with (
        pytest.raises(ModuleNotFoundError, match="does not import"),
        start_service("127.0.0.1", port, tmp_path / "log", new_token(), meanwhile=failing),
    ):
        pytest.fail("the service was handed over after its start-up work failed")
    assert seen[1] is not None and seen[1] != seen[0]
    assert not Path(f"/proc/{seen[1]}").exists(), "the service outlived the failed start-up"


def _service_pid(port: int, wait_s: float = 5.0) -> int | None:
    """The pid of the environment service this test process started on `port` (its command
    line names the port; its worker processes, and an earlier service's still ending, are
    not this process's children). A process just started may not show its command line for
    a moment (the kernel sets it late in exec): looked for until `wait_s` have passed."""
    wanted = f"env_service\x00--host\x00127.0.0.1\x00--port\x00{port}\x00"
    deadline = time.monotonic() + wait_s
    while True:
        found = [
            int(p.name)
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and wanted in _cmdline(p) and _parent(int(p.name)) == os.getpid()
        ]
        if len(found) == 1 or time.monotonic() > deadline:
            return found[0] if len(found) == 1 else None
        time.sleep(0.05)


def _parent(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(status.split("PPid:")[1].split()[0])


def test_an_adopted_service_must_answer_with_the_runs_token(
    service_process, tmp_path, capsys, job_named_record
):
    """A service of another run (another token) is refused, as is a port already taken;
    the right token adopts it, and the run leaves it running."""
    token = new_token()
    url = service_process(env={TOKEN_ENV: token}).url
    port = url.rsplit(":", 1)[1]
    with pytest.raises(ServiceIdentityError, match="does not accept this run's token"):
        adopt_service(url, new_token())
    assert adopt_service(url, token).pid is None

    base = ["--conf", str(REPO / "exp/replay_demo.yaml"), f"output_dir={tmp_path}",
            f"service.port={port}"]  # fmt: skip
    for start in ("true", "false"):
        os.environ[TOKEN_ENV] = new_token()  # another run's
        assert launcher.main([*base, f"service.start={start}"]) == 1
        assert "does not accept this run's token" in capsys.readouterr().err
    del os.environ[TOKEN_ENV]
    assert launcher.main([*base, "service.start=true"]) == 1  # no token at all
    assert "already answers" in capsys.readouterr().err
    assert not (tmp_path / "replay_demo" / "config.yaml").exists(), "written before refusing"

    seen = {}

    def job(cfg, url, run_dir, split_file):
        seen.update(url=url, token=os.environ[TOKEN_ENV])

    job_named_record["job"] = job
    os.environ[TOKEN_ENV] = token
    assert launcher.main([*base, "service.start=false", "job=record"]) == 0
    assert seen == {"url": url, "token": token}
    assert "adopting the environment service" in capsys.readouterr().out
    assert is_healthy(url), "the launcher stopped a service it did not start"


def test_the_token_reaches_service_and_job_by_environment_never_argv_or_config(
    tmp_path, job_named_record
):
    """A token given in the config goes to the service through its environment and to the
    job through $SEAL_ENV_TOKEN; config.yaml and the service's command line never hold it."""
    token = new_token()
    seen = {}

    def job(cfg, url, run_dir, split_file):
        port = url.rsplit(":", 1)[1]
        pid = _service_pid(int(port))
        seen.update(
            cmdline=_cmdline(Path(f"/proc/{pid}")),
            environ=Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace"),
            job_token=os.environ.get(TOKEN_ENV),
            cfg_token=cfg.service.token,
            anonymous=_status(url, None),
            with_token=_status(url, token),
        )

    job_named_record["job"] = job
    args = ["--conf", str(REPO / "exp/replay_demo.yaml"), f"output_dir={tmp_path}",
            "job=record", f"service.token={token}"]  # fmt: skip
    assert launcher.main(args) == 0
    assert token not in seen["cmdline"] and f"{TOKEN_ENV}={token}" in seen["environ"]
    assert seen["job_token"] == token and seen["cfg_token"] == ""
    assert (seen["anonymous"], seen["with_token"]) == (401, 200)
    saved = (tmp_path / "replay_demo" / "config.yaml").read_text()
    assert token not in saved and "token: '***'" in saved


def _cmdline(proc_dir: Path) -> str:
    try:
        return (proc_dir / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _status(url: str, token: str | None) -> int:
    from seal.http import request_once

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return request_once(url, "GET", "/v1/stats", "a probe", headers=headers).status


def test_a_training_job_ends_with_the_pass_rates_the_launcher_prints(
    tmp_path, capsys, monkeypatch, job_named_record
):
    """The trainers print no table: once a training job returns, the launcher prints the
    per-category pass rates of the run's validation records, the job's note under them and
    the export hint, in that order (the user sees what the trainers printed before)."""
    passed = ValidationRecord(
        task_id="multi_turn_base_3", data_source="multi_turn_base", score=1, reward=1.0,
        step=0, input="", output="", failure_tags=["pass"], turns=1,
    )  # fmt: skip

    def job(cfg, url, run, split_file):
        write_step(Path(run) / "validation", 0, [passed])
        return "best step 0 (the job's note)"

    job_named_record["job"] = job
    monkeypatch.setitem(launcher.JOBS, "local", f"{__name__}:_run_recorded_job")
    assert (
        launcher.main(["--conf", str(CPU), f"output_dir={tmp_path}", "name=run", "job=local"]) == 0
    )
    out = capsys.readouterr().out
    table = out.index(f"validation pass rates per category ({tmp_path / 'run' / 'validation'})")
    note = out.index("best step 0 (the job's note)")
    hint = out.index("no checkpoint to export")
    assert table < out.index("100.00 (1/1)") < note < hint, out  # base passed 1/1
    assert "n/a (0/0)" in out[table:note]  # the categories not validated


def test_a_training_run_without_validation_says_so(tmp_path, capsys):
    launcher.print_end_of_run(tmp_path, None)
    out = capsys.readouterr().out
    assert "no validation ran (trainer.validation): no pass rates to show" in out
    assert "pass rates per category" not in out and "no checkpoint to export" in out


def test_verl_job_without_verl_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_verl(name, *args, **kwargs):
        if name == "verl" or name.startswith("verl."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_verl)
    monkeypatch.delitem(sys.modules, "seal.trainer.verl.launch", raising=False)
    with pytest.raises(RuntimeError, match="install.sh --gpu"):
        launcher.job_function("verl")
    assert gc.isenabled(), "the collector stayed paused after a failed import"


def test_a_jobs_import_pauses_the_collector_and_freezes_what_it_loaded(monkeypatch):
    """The trainers' imports run no automatic collection (each would scan torch's,
    transformers' and verl's objects again) and leave their objects out of later ones, the
    one at exit included; a caller that paused the collector finds it paused still."""
    module = "seal.trainer.local_preflight"
    seen = []
    real_import = importlib.import_module

    def import_module(name):
        seen.append(gc.isenabled())
        return real_import(name)

    monkeypatch.setattr(importlib, "import_module", import_module)
    frozen = gc.get_freeze_count()
    try:
        for caller_enabled in (True, False):
            monkeypatch.delitem(sys.modules, module, raising=False)
            (gc.enable if caller_enabled else gc.disable)()
            assert launcher.job_function("local", preflight=True).__module__ == module
            assert gc.isenabled() is caller_enabled
        assert seen == [False, False]
        assert gc.get_freeze_count() > frozen
    finally:
        gc.enable()
        gc.unfreeze()  # this test process goes on; the launcher's would exit
