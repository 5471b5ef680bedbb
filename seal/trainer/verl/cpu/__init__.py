"""A CPU backend for verl 0.9.1, for tests and `exp/verl_cpu_smoke.yaml` only.

It lets verl's own `run_ppo -> TaskRunnerV1 -> fit()` run the SEAL trainer on a machine
without a GPU or vLLM, so the paper's code path is exercised in CI:

- `platform.py`: a verl platform (`seal_cpu`, selected with VERL_PLATFORM=seal_cpu) whose
  device is the CPU and whose collectives are gloo;
- `rollout.py`: a rollout replica (`rollout.name = seal_hf_cpu`) serving token-in/token-out
  generation with a Hugging Face model, which takes the actor's weights through verl's
  checkpoint-engine path;
- `weight_sync.py`: the checkpoint engine (`seal_gloo`) that carries the weights from the
  FSDP actor to the replica over a gloo process group;
- `trainer.py`: `seal_sync_cpu`, the SEAL trainer with the rollout served by that replica
  instead of a vLLM engine fused into the actor (see its docstring for why).

GPU runs never select any of these: the platform is not auto-detected, and the names are
used only by the smoke config.

This file imports nothing from verl: the launcher reads PLATFORM_ENV from it before the
first `import verl`, because verl resolves its platform once per process, at the first
module that asks (some ask while being imported).
"""

PLATFORM_NAME = "seal_cpu"
PLATFORM_ENV = {"VERL_PLATFORM": PLATFORM_NAME}
"""Set in every process of a CPU run (the launcher's, and the Ray workers' through the
run's runtime_env) before verl is imported."""
