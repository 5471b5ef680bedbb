"""verl's own FSDP training engine, registered for the `cpu` device of the `seal_cpu`
platform.

verl picks a training engine by (model type, strategy, device) from its EngineRegistry;
its FSDP engine is registered for cuda and npu only, though nothing in it needs either
(it asks the platform for the device). Registering the same class for `cpu`, through the
registry's public decorator, lets the CPU smoke run train with exactly the engine GPU
runs use.
"""

from __future__ import annotations

from verl.workers.engine import EngineRegistry
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cpu")(
    FSDPEngineWithLMHead
)
