"""One actor-update gradient of verl 0.9.1's own FSDP engine on CPU, for
tests/seal/trainer/verl/test_dynamic_batching.py (a script: verl resolves its platform once per process
and the engine needs a process group, so it runs in a process of its own).

    python tests/verl_update_probe.py MODEL_DIR OUT.pt dynamic|micro1 [BUDGET]

The engine is built from the CPU smoke config as verl's ActorRolloutRefWorker builds the
actor's (the actor section as a dataclass, the engine from verl's EngineRegistry, the loss
`ppo_loss` with the actor config); one mini-batch of 8 samples of different lengths goes
through `forward_backward_batch`, micro-batched by token budget (`dynamic`) or one sample
at a time (`micro1`). Saves the loss reported per micro-batch and every parameter's
gradient.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

os.environ.update(
    VERL_PLATFORM="seal_cpu", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
    MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("PROBE_PORT", "29617"),
)  # fmt: skip

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from omegaconf import open_dict  # noqa: E402
from tensordict import TensorDict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SAMPLES = 8
LENGTHS = [(40, 25), (180, 60), (22, 11), (96, 140), (300, 30), (15, 7), (64, 64), (120, 200)]
"""(prompt, response) tokens of each sample: short and long ones mixed, as in BFCL."""


def batch(vocab: int, mode: str, budget: int, fused: bool) -> TensorDict:
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.padding import left_right_2_no_padding

    g = torch.Generator().manual_seed(0)
    p_len = max(p for p, _ in LENGTHS)
    r_len = max(r for _, r in LENGTHS)
    prompts = torch.zeros(SAMPLES, p_len, dtype=torch.long)
    responses = torch.zeros(SAMPLES, r_len, dtype=torch.long)
    attention = torch.zeros(SAMPLES, p_len + r_len, dtype=torch.long)
    response_mask = torch.zeros(SAMPLES, r_len)
    for i, (p, r) in enumerate(LENGTHS):  # prompts left-padded, responses right-padded
        prompts[i, p_len - p :] = torch.randint(0, vocab, (p,), generator=g)
        responses[i, :r] = torch.randint(0, vocab, (r,), generator=g)
        attention[i, p_len - p : p_len + r] = 1
        response_mask[i, :r] = (torch.rand(r, generator=g) > 0.3).float()  # observations: 0
    position = (attention.cumsum(-1) - 1).clamp(min=0)
    data = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention,
            "position_ids": position,
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(SAMPLES, r_len, generator=g) * 4,
            "advantages": torch.randn(SAMPLES, 1, generator=g).expand(SAMPLES, r_len).contiguous(),
        },
        batch_size=SAMPLES,
    )
    data = left_right_2_no_padding(data)
    tu.assign_non_tensor(
        data,
        use_dynamic_bsz=mode == "dynamic",
        max_token_len_per_gpu=budget,
        micro_batch_size_per_gpu=1,
        use_remove_padding=False,
        use_fused_kernels=fused,  # as verl's worker: the model config's
        temperature=1.0,
        calculate_entropy=True,
        global_batch_size=SAMPLES,
    )
    return data


def main() -> None:
    model_dir, out, mode, loss_agg_mode = sys.argv[1:5]
    budget = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    # isort: off
    import seal.trainer.verl.cpu.platform  # noqa: F401  (before verl resolves its platform)
    import seal.trainer.verl.cpu.engine  # noqa: F401

    # isort: on
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.engine import EngineRegistry
    from verl.workers.utils.losses import ppo_loss

    import launcher
    from seal.trainer.verl.verl_config import compose_verl_config

    torch.manual_seed(0)
    dist.init_process_group("gloo")
    run_cfg = launcher.compose(
        ROOT / "exp/verl_cpu_smoke.yaml", [f"trainer.loss.loss_agg_mode={loss_agg_mode}"]
    )
    config = compose_verl_config(run_cfg, "http://127.0.0.1:1", Path(out).parent / "run")
    arr = config.actor_rollout_ref
    with open_dict(arr):
        arr.model.path = model_dir
    actor = omega_conf_to_dataclass(arr.actor)
    actor.model_config = omega_conf_to_dataclass(arr.model)
    engine_config = actor.engine
    engine_config.use_dynamic_bsz = mode == "dynamic"
    engine_config.max_token_len_per_gpu = budget or None
    engine_config.micro_batch_size_per_gpu = 1
    engine = EngineRegistry.new(
        model_type="language_model",
        backend=engine_config.strategy,
        model_config=actor.model_config,
        engine_config=engine_config,
        optimizer_config=actor.optim,
        checkpoint_config=actor.checkpoint,
    )
    engine.initialize()
    vocab = actor.model_config.hf_config.vocab_size
    with engine.train_mode():
        engine.optimizer_zero_grad()
        output = engine.forward_backward_batch(
            batch(vocab, mode, budget, actor.model_config.use_fused_kernels),
            partial(ppo_loss, config=actor),
        )
        grads = {  # read inside train_mode: leaving it may offload or free them
            name: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).clone()
            for name, p in engine.module.named_parameters()
            if p.grad is not None
        }
    losses = [float(x) for x in output["loss"]]
    torch.save({"grads": grads, "losses": losses}, out)
    print(f"{mode}: {len(losses)} micro-batches, loss {sum(losses):.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
