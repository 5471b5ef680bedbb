"""The weight receiver of verl's vLLM rollout on the CPU: verl's receive, inside vLLM's
layer-wise reload. Used only by the vLLM CPU smoke run (exp/verl_cpu_vllm_smoke.yaml),
which names it through vLLM's public `worker_extension_cls` engine argument; GPU runs keep
verl's `vLLMColocateWorkerExtension` as it is.

Why: vLLM's CPU build replaces each linear layer's weight with one that has no
`weight_loader`, so verl's receiver fails; vLLM's own layer-wise reload handles that.
The vLLM lines involved, and what the CPU run does not cover of verl's GPU receiver:
docs/verl_notes.md, "vLLM on the CPU".
"""

from __future__ import annotations

import torch
from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

EXTENSION_CLASS = f"{__name__}.LayerwiseReloadWorkerExtension"
"""The value of `worker_extension_cls` (vLLM imports the class by this name)."""


class LayerwiseReloadWorkerExtension(vLLMColocateWorkerExtension):
    def update_weights_from_ipc(
        self, peft_config: dict | None = None, base_sync_done=False, use_shm: bool = False
    ):
        if peft_config or self._is_qat_model or self._is_modelopt_qat:
            raise NotImplementedError(
                "the CPU receiver reloads full, unquantized weights only (no LoRA, no QAT)"
            )
        if self.device is None:  # as verl's receiver: vLLM's CPU worker may leave it unset
            self.device = torch.device("cpu")
        models = list(self._iter_all_models_with_config())
        for model, _ in models:
            initialize_layerwise_reload(model)
        receiver = BucketedWeightReceiver(
            zmq_handle=self._get_zmq_handle(), device=self.device, use_shm=use_shm
        )
        # Copies: the reload keeps a layer's tensors until all of them arrived (to the end,
        # in finalize, for a layer with padding the checkpoint lacks: the embedding of a
        # vocabulary that is not a multiple of 64), while the receiver reuses its one
        # shared-memory bucket and cannot close it while views of it live (BufferError,
        # bucketed_weight_transfer.py:340).
        receiver.receive_weights(
            on_bucket_received=lambda weights, _is_last: self._update_weights(
                [(name, tensor.clone()) for name, tensor in weights],
                peft_config=None,
                base_sync_done=base_sync_done,
            )
        )
        for model, model_config in models:
            finalize_layerwise_reload(model, model_config)
