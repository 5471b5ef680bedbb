"""`seal_sync_cpu`: the SEAL trainer with its rollouts on the `seal_hf_cpu` replica.

Everything of `SealPPOTrainer` (the SEAL step, validation records, checkpoints) and of
verl's `fit()` is unchanged; only where generation runs differs from a GPU run.

Why not verl's hybrid engine, as GPU runs use: there the actor worker itself builds the
rollout engine with `get_rollout_class(name, "async")` (verl/workers/engine_workers.py,
`ActorRolloutRefWorker.init_model`), which reads a fixed table of vLLM, SGLang and
TensorRT-LLM adapters (`_ROLLOUT_REGISTRY` in verl/workers/rollout/base.py) that has no
public way to add one, and all three need their engine installed. So this trainer opts
out of hybrid replicas (`_enable_hybrid_replicas = False`, the hook verl's
separate-async trainer uses), and after verl's setup starts standalone `seal_hf_cpu`
replicas with verl's LLMServerManager and syncs weights to them with verl's
CheckpointEngineManager over the configured checkpoint engine (`seal_gloo`) - the path
verl takes for disaggregated rollouts, instead of the in-process "naive" sync of the
hybrid engine. The sync trainer's hooks (update weights at init and after each step,
sleep the replicas after sampling) then act on these replicas.

The actor and reference workers are verl's `ActorRolloutRefWorker`, started with their
process group on gloo: verl's default backend string, `cpu:gloo,{device}:{backend}`
(verl/utils/distributed.py, `initialize_global_process_group_ray`), names the CPU twice on
this platform, which torch refuses; verl's own call then finds the group initialised.
Workers are swapped through `_init_resource_pool_mgr`, as verl's separate-async trainer
swaps in its DetachActorWorker.
"""

from __future__ import annotations

import ray
from verl.checkpoint_engine import CheckpointEngineManager
from verl.trainer.ppo.v1 import register_trainer
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager

from seal.trainer.verl.trainer import SealPPOTrainer

TRAINER_MODE_CPU = "seal_sync_cpu"


class GlooActorRefWorker(ActorRolloutRefWorker):
    """verl's actor/reference worker, its process group started on gloo alone."""

    def __init__(self, *args, **kwargs):
        initialize_global_process_group_ray(timeout_second=None, backend="cpu:gloo")
        super().__init__(*args, **kwargs)


@register_trainer(TRAINER_MODE_CPU)
class SealPPOTrainerCPU(SealPPOTrainer):
    _enable_hybrid_replicas = False  # read by PPOTrainer._setup (see the module docstring)

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        for role, worker in self.role_worker_mapping.items():
            if worker.__ray_actor_class__ is not ActorRolloutRefWorker:
                raise TypeError(f"unexpected worker for {role}: {worker.__ray_actor_class__}")
            self.role_worker_mapping[role] = ray.remote(GlooActorRefWorker)

    def _setup(self):
        super()._setup()  # actor/ref workers, an empty server manager, verl's checkpoint
        self.llm_server_manager = LLMServerManager.create(config=self.config)
        engine_config = omega_conf_to_dataclass(
            self.config.actor_rollout_ref.rollout.checkpoint_engine
        )
        self.checkpoint_manager = CheckpointEngineManager(
            config=engine_config,
            actor_wg=self.actor_rollout_wg,
            replicas=self.llm_server_manager.get_replicas(),
        )

    def on_step_end(self):
        super().on_step_end()  # the weight sync, then the SEAL trainer's epoch summary
        # Logged with the step (verl's stash for weight-sync metrics): what the sync
        # changed in each replica, the proof that the update reached generation.
        stats = ray.get(
            [server.weight_sync_stats.remote() for server in self.llm_server_manager.server_handles]
        )
        self._pending_sync_metrics = {key: max(s[key] for s in stats) for key in stats[0]}
