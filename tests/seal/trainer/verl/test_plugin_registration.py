"""The plugin module registers the agent loop and the trainer, and verl's own
entry-point loader finds both.

The loader test does not depend on `pip install -e .`: it puts a throwaway dist-info
with the plugin's entry point on the path of a fresh interpreter, so it checks what
verl does with the entry point the project declares.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("verl")

from verl.experimental.agent_loop.agent_loop import _agent_loop_registry  # noqa: E402

from seal.trainer.verl import plugin  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
REGISTERED = (
    "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry;"
    "assert _agent_loop_registry['seal_bfcl'] == "
    "{'_target_': 'seal.trainer.verl.agent_loop.SealBfclAgentLoop'}, _agent_loop_registry;"
    "from verl.trainer.ppo.v1 import get_trainer_cls;"
    "assert get_trainer_cls('seal_sync').__name__ == 'SealPPOTrainer';"
    "from seal.trainer.verl.plugin import missing_cpu_backend;"
    "assert missing_cpu_backend() == [], missing_cpu_backend()"
)


def fresh_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_check_registrations(monkeypatch):
    plugin.check_registrations()
    monkeypatch.delitem(_agent_loop_registry, "seal_bfcl")
    assert plugin.missing_registrations()
    with pytest.raises(RuntimeError, match="agent loop 'seal_bfcl'"):
        plugin.check_registrations()


def test_check_registrations_names_a_missing_cpu_backend_part(monkeypatch):
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    monkeypatch.delitem(RolloutReplicaRegistry._registry, "seal_hf_cpu")
    with pytest.raises(RuntimeError, match="rollout replica 'seal_hf_cpu'"):
        plugin.check_registrations()


def test_check_registrations_names_a_missing_trainer(monkeypatch):
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY

    monkeypatch.delitem(TRAINER_REGISTRY, "seal_sync")
    with pytest.raises(RuntimeError, match="trainer 'seal_sync'"):
        plugin.check_registrations()


def test_verl_loads_the_entry_point(tmp_path):
    dist = tmp_path / "seal_verl_plugin_probe-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: seal-verl-plugin-probe\n")
    (dist / "entry_points.txt").write_text(f"[{plugin.ENTRY_POINT_GROUP}]\n{plugin.ENTRY_POINT}\n")
    pythonpath = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    # verl only, then the registry: nothing of seal is imported by the code itself.
    code = "import sys, verl; assert 'seal.trainer.verl.plugin' in sys.modules; " + REGISTERED
    # Without the entry point verl registers nothing of ours: the probe is what did it. The
    # two interpreters are independent (seconds of imports each): they run side by side.
    with ThreadPoolExecutor(2) as pool:
        probed = pool.submit(
            fresh_python, code, PYTHONPATH=pythonpath, VERL_USE_EXTERNAL_PLUGINS="auto"
        )
        unplugged = pool.submit(
            fresh_python, "import verl; " + REGISTERED, VERL_USE_EXTERNAL_PLUGINS="none"
        )
    result = probed.result()
    assert result.returncode == 0, result.stderr[-3000:]
    result = unplugged.result()
    assert result.returncode != 0 and "seal_bfcl" in result.stderr


def test_declared_entry_point_is_installed():
    """Once pyproject.toml declares the plugin, the installed metadata must carry it
    (else `pip install -e .` was not rerun and verl would never load the plugin). What
    verl does with that entry point is test_verl_loads_the_entry_point's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project.get("entry-points", {}).get(plugin.ENTRY_POINT_GROUP)
    if not declared:
        pytest.skip("pyproject.toml does not declare the verl plugin yet")
    name, value = (s.strip() for s in plugin.ENTRY_POINT.split("="))
    assert declared == {name: value}
    installed = {ep.name: ep.value for ep in entry_points(group=plugin.ENTRY_POINT_GROUP)}
    assert installed.get(name) == value, "rerun `pip install -e .` to install the entry point"
