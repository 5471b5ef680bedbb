"""`seal_hf_cpu`: a verl rollout replica that generates with a Hugging Face model on CPU.

What verl's vLLM replica is to a GPU run, this is to the CPU smoke run: registered with
verl's RolloutReplicaRegistry and called through the same methods (token-in/token-out
`generate`, the lifecycle calls). New weights arrive through verl's own checkpoint-engine
path, and a generate call while asleep is an error, so a rollout only runs on weights the
actor sent. Generation is the local trainer's HFGenerator. Details:
docs/verl_notes.md, "How the CPU backend is built".
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import ray
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from verl.checkpoint_engine.base import CheckpointEngineWorker
from verl.single_controller.ray import RayClassWithInitArgs
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

from seal.rollout.generation import SamplingParams
from seal.rollout.hf_generator import HFGenerator

ROLLOUT_NAME = "seal_hf_cpu"
MAX_BATCH_SIZE = 8
"""Most concurrent requests per model.generate call."""


class WeightsReleasedError(RuntimeError):
    """A generate call reached the replica while its weights were released (asleep)."""


class HFServerAdapter(BaseRollout):
    """The model the replica serves; verl's checkpoint-engine worker writes into it."""

    def __init__(self, config, model_config, device_mesh=None, **_kwargs):
        super().__init__(config, model_config, device_mesh)
        path = self.model_config.local_path
        self.hf_config = AutoConfig.from_pretrained(path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model: torch.nn.Module | None = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32
        ).eval()
        self.snapshot: dict[str, torch.Tensor] | None = None
        """A copy of the weights as of the last update, to measure the next one's change."""

    def take_snapshot(self) -> dict[str, torch.Tensor]:
        self.snapshot = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return self.snapshot

    async def update_weights(self, weights, **kwargs) -> None:
        if self.model is None:  # released by sleep: rebuild the structure, then fill it
            self.model = AutoModelForCausalLM.from_config(self.hf_config, dtype=torch.float32)
            self.model.eval()
        # state_dict names every alias of a tied weight (lm_head.weight of a model with
        # tied embeddings), as the actor's export does; a tensor counts as updated when
        # any of its names arrived.
        tensors = self.model.state_dict(keep_vars=True)
        written = set()
        async for name, tensor in _aiter(weights):
            if name not in tensors:
                raise KeyError(f"the actor sent {name!r}, which the rollout model has not")
            with torch.no_grad():
                tensors[name].copy_(tensor.to(tensors[name].dtype))
            written.add(tensors[name].data_ptr())
        stale = sorted(n for n, t in tensors.items() if t.data_ptr() not in written)
        if stale:
            raise RuntimeError(f"weight update left {len(stale)} tensors stale: {stale[:5]}")

    async def release(self) -> None:
        self.model = None

    async def resume(self, tags: list[str]) -> None:
        pass  # weights come back through update_weights; a CPU model has no KV cache pool

    def model_or_raise(self) -> torch.nn.Module:
        if self.model is None:
            raise WeightsReleasedError(
                "generate called while the replica is asleep (its weights are released until "
                "the next update_weights)"
            )
        return self.model


def _l2_distance(a: dict[str, torch.Tensor] | None, b: dict[str, torch.Tensor]) -> float:
    if a is None:
        return float("nan")
    return sum(float((b[k].double() - a[k].double()).pow(2).sum()) for k in b) ** 0.5


async def _aiter(weights):
    if inspect.isasyncgen(weights) or hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item


class HFRolloutServer(CheckpointEngineWorker):
    """One Ray actor: verl's rollout-side weight receiver and the generation server."""

    def __init__(self, rollout_config, model_config, replica_rank: int = 0):
        self.adapter = HFServerAdapter(rollout_config, model_config)
        super().__init__(rollout_config, model_config, server_adapter=self.adapter)
        self.replica_rank = replica_rank
        max_model_len = self.adapter.config.max_model_len
        self.max_model_len = max_model_len or (
            self.adapter.config.prompt_length + self.adapter.config.response_length
        )
        self.generators: dict[tuple[int, ...], HFGenerator] = {}
        """One micro-batching generator per set of stop ids a request asks for (vLLM's
        `stop_token_ids`; the tokenizer's eos when none)."""
        self._open = asyncio.Event()
        self._open.set()
        self.probe_ids: tuple[list[int], list[int]] | None = None
        """The first request's prompt and output: a fixed sequence to score at each sync."""
        self.probe_before: list[float] | None = None
        self.sync_stats: dict[str, float] = {}

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data=None,
        video_data=None,
        **_kwargs,
    ) -> TokenOutput:
        if image_data or video_data:
            raise ValueError(f"{ROLLOUT_NAME} serves text only")
        await self._open.wait()  # closed between abort_all_requests and resume_generation
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room within max_model_len "
                f"{self.max_model_len}"
            )
        stop = tuple(sampling_params.get("stop_token_ids") or [self.adapter.tokenizer.eos_token_id])
        if stop not in self.generators:
            self.generators[stop] = HFGenerator(
                model=None,
                tokenizer=self.adapter.tokenizer,
                max_batch_size=MAX_BATCH_SIZE,
                stop_token_ids=list(stop),
            )
        generator = self.generators[stop]
        generator.set_model(self.adapter.model_or_raise())
        temperature = float(sampling_params.get("temperature", 1.0))
        sampling = SamplingParams(
            max_new_tokens=min(int(sampling_params.get("max_tokens", room)), room),
            temperature=temperature,
            top_p=float(sampling_params.get("top_p", 1.0)),
        )
        generation = await generator.generate(prompt_ids, sampling)
        if self.probe_ids is None:
            self.probe_ids = (list(prompt_ids), list(generation.token_ids))
        return TokenOutput(
            token_ids=generation.token_ids,
            log_probs=generation.logprobs,
            stop_reason="completed",  # as vLLM reports both stop and length
            extra_fields={"global_steps": self.sync_stats.get("rollout/weight_version")},
        )

    async def score(self, probe: tuple[list[int], list[int]]) -> list[float]:
        """Log-probability of each response id of `probe` (prompt ids, response ids) after
        the ids before it, under the served weights: the plain softmax of the logits, as
        the actor's compute_log_prob at temperature 1."""
        prompt, response = probe
        model = self.adapter.model_or_raise()
        with torch.inference_mode():
            # Logits only where the response is predicted: a vocabulary-wide row for every
            # prompt position would cost gigabytes on a BFCL prompt.
            output = model(torch.tensor([prompt + response]), logits_to_keep=len(response) + 1)
            logprobs = torch.log_softmax(output.logits[0, :-1].float(), dim=-1)
            return logprobs.gather(1, torch.tensor(response)[:, None])[:, 0].tolist()

    async def sleep(self) -> None:
        if self.adapter.model is not None and self.probe_ids is not None:
            self.probe_before = await self.score(self.probe_ids)
        await self.adapter.release()

    async def update_weights(self, global_steps: int | None = None):
        previous = self.adapter.snapshot
        await super().update_weights(global_steps=global_steps)
        current = self.adapter.take_snapshot()
        self.sync_stats = {
            "rollout/weight_version": -1 if global_steps is None else global_steps,
            "rollout/weight_update_l2": _l2_distance(previous, current),
        }
        if self.probe_ids is not None and self.probe_before is not None:
            after = await self.score(self.probe_ids)
            change = max(abs(a - b) for a, b in zip(after, self.probe_before, strict=True))
            self.sync_stats["rollout/probe_logprob_change"] = change

    async def weight_sync_stats(self) -> dict[str, float]:
        """What the last weight update changed: the L2 norm of the change of all weights
        (NaN for the first update) and, once a request has been served, the largest change
        of the log-probability of that request's ids (the probe) between the weights held
        before the sleep and the new ones."""
        return dict(self.sync_stats)

    async def wake_up(self) -> None:
        pass  # the next update_weights restores the weights

    async def abort_all_requests(self, reject_request: bool = False) -> dict:
        self._open.clear()  # requests already running finish; new ones wait for resume
        return {}

    async def resume_generation(self) -> None:
        self._open.set()

    async def clear_kv_cache(self) -> None:
        pass  # HF generate keeps no cache between requests

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def start_profile(self, **_kwargs) -> None:
        pass

    async def stop_profile(self) -> None:
        pass


class HFCPUReplica(RolloutReplica):
    """A standalone replica of one HFRolloutServer (tensor/data/pipeline parallel 1)."""

    def get_ray_class_with_init_args(self) -> RayClassWithInitArgs:
        return RayClassWithInitArgs(
            cls=ray.remote(HFRolloutServer),
            rollout_config=self.config,
            model_config=self.model_config,
            replica_rank=self.replica_rank,
        )

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(f"{ROLLOUT_NAME} runs one process per replica (TP = DP = PP = 1)")
        if not self.workers:
            raise RuntimeError(f"{ROLLOUT_NAME} runs as a standalone replica only")
        self.servers = list(self.workers)
        self._server_handle = self.workers[0]
        self._server_address = f"{ROLLOUT_NAME}-{self.replica_rank}"


RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: HFCPUReplica)
