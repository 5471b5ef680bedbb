"""The weight receiver of verl's vLLM rollout on the CPU: verl's receive, inside vLLM's
layer-wise reload. Used only by the vLLM CPU smoke run (exp/verl_cpu_vllm_smoke.yaml),
which names it through vLLM's public `worker_extension_cls` engine argument
(`actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls`; verl merges those
keyword arguments after its own, so this class replaces verl's). GPU runs keep verl's
`vLLMColocateWorkerExtension` as it is.

Why: after loading, vLLM's CPU build hands each unquantized linear layer's weight to a
oneDNN (or sgl-kernel) matmul that keeps a packed copy, and replaces the layer's
`weight` with an empty Parameter that has no `weight_loader`
(`UnquantizedLinearMethod.process_weights_after_loading`,
vllm/model_executor/layers/linear.py:220, calling `dispatch_cpu_unquantized_gemm(...,
remove_weight=True)`, vllm/model_executor/layers/utils.py:321 for oneDNN, 307 and 290 for
the other CPU kernels). verl's receiver (`update_weights_from_ipc` -> `model.load_weights`)
then fails at the first linear weight ("'Parameter' object has no attribute
'weight_loader'", linear.py:1417). vLLM's own in-place
reload, the one its `reload_weights` and IPC weight-transfer engine use, handles this:
`initialize_layerwise_reload` puts each layer back in its checkpoint layout (on the meta
device, original loaders wrapped), `model.load_weights` fills a layer and, once all of a
layer's weights arrived, reruns its `process_weights_after_loading` (a new packed
matmul) and copies the result into the old tensors; `finalize_layerwise_reload` does the
layers left (attention). So this receiver is verl's, step for step (the same
BucketedWeightReceiver over ZMQ + shared memory, the same `_update_weights`), with the
reload around it and without verl's final `process_weights_after_loading` over the whole
model, which the reload has already run layer by layer (running it again would re-pack
the now empty weights).

What the CPU run therefore does not cover of verl's GPU receiver:
seal/trainer/verl/NOTES.md, "vLLM on the CPU".
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
