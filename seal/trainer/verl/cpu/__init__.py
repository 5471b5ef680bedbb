"""A CPU backend for verl 0.9.1, for tests and `exp/verl_cpu_smoke.yaml` only.

It lets verl's own `run_ppo -> TaskRunnerV1 -> fit()` run the SEAL trainer on a machine
without a GPU or vLLM, so the paper's code path is exercised in CI: a platform
(`platform.py`), a rollout replica (`rollout.py`), a gloo checkpoint engine
(`weight_sync.py`) and a trainer (`trainer.py`), none selected by GPU runs. This file
imports nothing from verl: the launcher reads PLATFORM_ENV from it before the first
`import verl`, which resolves the platform once per process. Details:
docs/verl_notes.md, "How the CPU backend is built".
"""

PLATFORM_NAME = "seal_cpu"
PLATFORM_ENV = {"VERL_PLATFORM": PLATFORM_NAME}
"""Set in every process of a CPU run (the launcher's, and the Ray workers' through the
run's runtime_env) before verl is imported."""
