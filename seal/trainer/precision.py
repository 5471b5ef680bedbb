"""Mixed precision for the local trainer: float32 master weights, which the optimizer
updates, and a copy in the compute dtype (`trainer.model.dtype`), on which generation and
the update's forward and backward passes run. verl's FSDP mixed precision does the same
(parameters cast to bf16 for compute; gradients reduced and weights updated in float32).

Why: bfloat16 keeps 8 bits of mantissa, so an AdamW step at the paper's lr 1e-6 (about
1e-6 per weight) is below the rounding step of a weight of size 0.02 (~8e-5): updated in
place, bf16 weights keep almost every update from happening (tests/seal/trainer/test_model.py).
Only parameters are cast; buffers (the rotary inverse frequencies) stay float32, as
Hugging Face keeps them when it loads a model in bf16.
"""

from __future__ import annotations

import copy

import torch

MASTER_DTYPE = torch.float32


def cast_parameters(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`module` with its parameters (not its buffers) in `dtype`, in place."""
    for p in module.parameters():
        p.data = p.data.to(dtype)
    return module


class MixedPrecision:
    """The master weights (`master`, float32, the optimizer's and the checkpoints') and the
    compute copy (`compute`: `master` itself when the compute dtype is float32)."""

    def __init__(self, master: torch.nn.Module, dtype: torch.dtype):
        found = {p.dtype for p in master.parameters()}
        if found != {MASTER_DTYPE}:
            raise TypeError(
                f"master weights must be {MASTER_DTYPE}, found {sorted(map(str, found))}"
            )
        self.master, self.dtype = master, dtype
        self.compute = (
            master if dtype == MASTER_DTYPE else cast_parameters(copy.deepcopy(master), dtype)
        )

    @property
    def separate(self) -> bool:
        return self.compute is not self.master

    def accumulate_grads(self) -> None:
        """Add the compute copy's gradients (one micro-batch's) into the master's in
        float32, and clear them: the mini-batch's sum builds up in float32."""
        if not self.separate:
            return
        pairs = zip(self.master.parameters(), self.compute.parameters(), strict=True)
        for master, compute in pairs:
            if compute.grad is None:
                continue
            if master.grad is None:
                master.grad = compute.grad.to(MASTER_DTYPE)
            else:
                master.grad.add_(compute.grad)
            compute.grad = None

    @torch.no_grad()
    def sync(self) -> None:
        """The compute copy takes the master weights (after an optimizer step, or after
        anything changed them)."""
        if self.separate:
            for master, compute in zip(
                self.master.parameters(), self.compute.parameters(), strict=True
            ):
                compute.copy_(master)
