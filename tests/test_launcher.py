"""The launcher: config composition and its errors, the service lifecycle, exit codes."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import launcher  # noqa: E402
from seal.launch.service import environment_service, is_healthy  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_compose_merges_yaml_and_overrides():
    cfg = launcher.compose(REPO / "exp/SEAL.yaml", ["trainer.rollout.n=4"])
    assert cfg.trainer.model.path == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.trainer.rollout.n == 4
    assert cfg.trainer.loss.loss_agg_mode == "seq-mean-token-mean"  # the paper's default


@pytest.mark.parametrize("conf", sorted((REPO / "exp").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_composes(conf):
    cfg = launcher.compose(conf, [])
    assert cfg.job in launcher.JOBS


def test_unknown_key_and_missing_file_fail_clearly(tmp_path, capsys):
    assert launcher.main(["--conf", str(tmp_path / "nope.yaml")]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = ["--conf", str(REPO / "exp/replay_demo.yaml"), "trainer.rollout.nn=3"]
    assert launcher.main(bad) == 1
    assert "nn" in capsys.readouterr().err


def test_missing_service_is_an_error(tmp_path, capsys):
    args = ["--conf", str(REPO / "exp/replay_demo.yaml"), "service.start=false",
            f"service.port={free_port()}", f"output_dir={tmp_path}"]  # fmt: skip
    assert launcher.main(args) == 1
    assert "no environment service" in capsys.readouterr().err


def test_an_already_running_service_is_reused_and_left_running(live_service, tmp_path):
    url, engine = live_service
    host, port = url.removeprefix("http://").split(":")
    with environment_service(host, int(port), tmp_path / "log") as got:
        assert got == url
    assert is_healthy(url), "the launcher stopped a service it did not start"


def test_a_started_service_is_stopped_on_exit(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (
        pytest.raises(RuntimeError, match="boom"),
        environment_service("127.0.0.1", port, tmp_path / "log"),
    ):
        assert is_healthy(url)
        raise RuntimeError("boom")
    assert not is_healthy(url), "the service outlived the launcher"


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
