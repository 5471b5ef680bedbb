"""`seal_sync_cpu`: the SEAL trainer with its rollouts on the `seal_hf_cpu` replica.

Everything of `SealPPOTrainer` and of verl's `fit()` is unchanged; only where generation
runs differs. verl's hybrid engine reads a fixed table of vLLM/SGLang/TensorRT-LLM
adapters with no public way to add one, so this trainer opts out of hybrid replicas and
syncs weights to standalone replicas through verl's checkpoint-engine path, as verl does
for disaggregated rollouts. The hooks used and why: docs/verl_notes.md, "How the
CPU backend is built".
"""

from __future__ import annotations

import uuid
from pathlib import Path

import ray
import transfer_queue as tq
from verl.checkpoint_engine import CheckpointEngineManager
from verl.trainer.ppo.v1 import register_trainer
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.distributed import initialize_global_process_group_ray
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.rollout.llm_server import LLMServerManager

from seal.atomic_file import write_json_atomic
from seal.rollout.generation import SamplingParams
from seal.trainer.verl.generator import VerlGenerator
from seal.trainer.verl.trainer import SealPPOTrainer

TRAINER_MODE_CPU = "seal_sync_cpu"


class GlooActorRefWorker(ActorRolloutRefWorker):
    """verl's actor/reference worker, its process group started on gloo alone."""

    def __init__(self, *args, **kwargs):
        initialize_global_process_group_ray(timeout_second=None, backend="cpu:gloo")
        super().__init__(*args, **kwargs)


def use_gloo_workers(role_worker_mapping: dict) -> None:
    """Swap verl's actor/reference worker for GlooActorRefWorker in every role."""
    for role, worker in role_worker_mapping.items():
        if worker.__ray_actor_class__ is not ActorRolloutRefWorker:
            raise TypeError(f"unexpected worker for {role}: {worker.__ray_actor_class__}")
        role_worker_mapping[role] = ray.remote(GlooActorRefWorker)


@register_trainer(TRAINER_MODE_CPU)
class SealPPOTrainerCPU(SealPPOTrainer):
    _enable_hybrid_replicas = False  # read by PPOTrainer._setup (docs/verl_notes.md, CPU backend)

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        use_gloo_workers(self.role_worker_mapping)

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


TRAINER_MODE_CPU_VLLM = "seal_sync_cpu_vllm"
SERVING_CHECKS_FILE = "vllm_serving_checks.json"
"""{run_dir}/...: what the vLLM server returned for the generation-contract requests."""
PROBE_PROMPT_IDS = list(range(1000, 1048))
"""A fixed sequence whose log-probabilities the vLLM server reports before and after each
weight sync (any ids do: the model is random)."""


@register_trainer(TRAINER_MODE_CPU_VLLM)
class SealPPOTrainerCPUvLLM(SealPPOTrainer):
    """The SEAL trainer with verl's own hybrid vLLM rollout, as GPU runs have it: verl's
    vLLMReplica and vLLMHttpServer (AsyncLLM) on vLLM's CPU build, the weights synced by
    verl's hybrid path (ZMQ + shared memory; the `seal_cpu` platform reports no IPC) into
    the receiver of vllm_worker.py. Only the actor's process group differs from a GPU
    run (gloo, as for SealPPOTrainerCPU).

    It also records what the CPU run must show about the engine, through the vLLM
    server's own `generate` (the method verl's LLM server client calls):
    - around every weight sync, the server's log-probabilities of PROBE_PROMPT_IDS before
      and after (`rollout/probe_logprob_change`: the largest change) and the weight
      version the server reports (`rollout/weight_version`);
    - after the first sync, the generation contract: a request's `max_tokens` and
      `stop_token_ids`, sent in the sampling dict the project's VerlGenerator builds, are
      honoured (SERVING_CHECKS_FILE, read by tests/seal/trainer/verl/test_cpu_rollout_vllm.py).
    """

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        use_gloo_workers(self.role_worker_mapping)

    def _server(self):
        servers = self.llm_server_manager.server_handles
        if len(servers) != 1:
            raise ValueError(f"the CPU vLLM run serves from one replica, not {len(servers)}")
        return servers[0]

    def _generate(self, prompt_ids: list[int], sampling_params: dict):
        request_id = f"seal-cpu-check-{uuid.uuid4().hex}"
        return ray.get(
            self._server().generate.remote(
                prompt_ids=list(prompt_ids),
                sampling_params=dict(sampling_params),
                request_id=request_id,
            )
        )

    def _probe(self) -> tuple[list[float], int | None]:
        """The served log-probability of each probe id after the ids before it (greedy,
        one token generated, prompt log-probs requested) and the server's weight version."""
        output = self._generate(
            PROBE_PROMPT_IDS, {"max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        )
        # One entry per position after the first, then verl's padding entry for the last.
        logprobs = [float(entry[0]) for entry in output.extra_fields["prompt_logprobs"][:-1]]
        if len(logprobs) != len(PROBE_PROMPT_IDS) - 1:
            raise RuntimeError(f"{len(logprobs)} prompt log-probs for {len(PROBE_PROMPT_IDS)} ids")
        return logprobs, output.extra_fields.get("global_steps")

    def on_init_end(self):
        super().on_init_end()  # the first weight sync
        write_json_atomic(Path(self.seal.run_dir) / SERVING_CHECKS_FILE, self._serving_checks())

    def _serving_checks(self) -> dict:
        """Two greedy generations through the sampling dict the agent loop's VerlGenerator
        builds: one with max_tokens only, then the same with the first one's first id as
        the stop token. Until the generator puts stop_token_ids in its dict itself (issue
        20), they are added here; `stop_ids_sent_by_generator` says which it was."""
        max_tokens = 8
        sampling = SamplingParams(max_new_tokens=max_tokens, temperature=0.0)
        params = VerlGenerator(server_manager=None).sampling_dict(sampling)
        free = list(self._generate(PROBE_PROMPT_IDS, params).token_ids)
        stop_id = free[0]
        stop_params = VerlGenerator(server_manager=None, stop_token_ids={stop_id}).sampling_dict(
            sampling
        )
        sent = "stop_token_ids" in stop_params
        stop_params.setdefault("stop_token_ids", [stop_id])
        stopped = list(self._generate(PROBE_PROMPT_IDS, stop_params).token_ids)
        return {
            "max_tokens": max_tokens,
            "free_ids": free,
            "stop_token_id": stop_id,
            "stopped_ids": stopped,
            "stop_ids_sent_by_generator": sent,
        }

    def _compute_old_log_prob(self, batch, metrics: dict):
        """verl's, then the largest |vLLM's log-prob - the actor's| over the response
        tokens (`rollout/actor_logprob_diff_max`). verl's own `training/rollout_probs_diff_*`
        compare probabilities, which on a random model (each id ~1/151,665) are too small
        to show a difference of log-probs."""
        batch = super()._compute_old_log_prob(batch, metrics)
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["old_log_probs", "rollout_log_probs", "response_mask", "responses"],
        ).to_padded_tensor()
        mask = data["response_mask"].bool()
        diff = (data["rollout_log_probs"].double() - data["old_log_probs"].double()).abs()
        metrics["rollout/actor_logprob_diff_max"] = float(diff[mask].max())
        return batch

    def on_step_end(self):
        before, _ = self._probe()
        super().on_step_end()  # the weight sync, then the SEAL trainer's epoch summary
        after, version = self._probe()
        # Logged with the step (verl's stash for weight-sync metrics).
        self._pending_sync_metrics = {
            "rollout/weight_version": -1 if version is None else version,
            "rollout/probe_logprob_change": max(
                abs(a - b) for a, b in zip(after, before, strict=True)
            ),
        }
