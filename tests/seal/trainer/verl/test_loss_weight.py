"""The paper config's actor loss on verl 0.9.1 weighs each episode as the release's actor
does: verl's own `ppo_loss`, with the global batch numbers its trainer and FSDP engine
give it (the mini-batch of `ppo_mini_batch_size` x n samples over the config's GPUs), summed
over each rank's micro-batches and averaged over the ranks as FSDP averages gradients,
equals the mean over the episodes of each one's token mean (the release: a token mean per
one-sample micro-batch, divided by its 16 micro-batches per GPU, over 4 GPUs)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl")

from tensordict import TensorDict  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

import launcher  # noqa: E402
from seal.trainer.verl.verl_config import compose_verl_config  # noqa: E402

REPO = Path(__file__).resolve().parents[4]
LOG_PROB = -1.0
# (prompt tokens, response mask, advantage, reference above the policy on each token)
LONG = (3, [1, 1, 0, 0, 1, 1, 0, 0, 1, 1], 0.5, math.log(2))
SHORT = (2, [1, 1], -1.5, 0.0)
K3_LOG2 = 2 - math.log(2) - 1
RELEASE_LOSS = (-0.5 + 1.5) / 2 + 0.001 * (K3_LOG2 + 0.0) / 2
"""Half of the mini-batch long episodes, half short: each episode's token mean of the
clipped loss (ratio 1: -advantage) and of the KL, averaged over the episodes."""


def micro_batch(episodes, dp_size: int, global_batch_size: int, batch_num_tokens: int):
    """`episodes` as one micro-batch of verl's actor (prompts left-padded, responses
    right-padded), with the policy's log-probs as the engine returns them: one value per
    token of each sequence, shifted by one."""
    width_p = max(p for p, *_ in episodes)
    width_r = max(len(m) for _, m, *_ in episodes)
    n = len(episodes)
    attention = torch.zeros(n, width_p + width_r, dtype=torch.long)
    mask, advantages, ref = (torch.zeros(n, width_r) for _ in range(3))
    values = []
    for i, (p, m, advantage, above) in enumerate(episodes):
        attention[i, width_p - p : width_p + len(m)] = 1
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
        advantages[i], ref[i] = advantage, LOG_PROB + above
        row = torch.zeros(p + len(m))
        row[p - 1 : p + len(m) - 1] = LOG_PROB
        values.append(row)
    data = TensorDict(
        {
            "prompts": torch.zeros(n, width_p, dtype=torch.long),
            "responses": torch.zeros(n, width_r, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": mask,
            "old_log_probs": torch.full((n, width_r), LOG_PROB),
            "advantages": advantages,
            "ref_log_prob": ref,
        },
        batch_size=n,
    )
    tu.assign_non_tensor(
        data,
        dp_size=dp_size,
        global_batch_size=global_batch_size,
        batch_num_tokens=batch_num_tokens,
    )
    return {"log_probs": torch.cat(values)}, data


def paper_actor(*overrides: str):
    """exp/SEAL.yaml's actor config as verl's worker builds it, the global batch of one
    update (trainer_base._update_actor) and the data-parallel ranks the FSDP engine divides
    it over."""
    run_cfg = launcher.compose(REPO / "exp/SEAL.yaml", list(overrides))
    config = compose_verl_config(run_cfg, "http://127.0.0.1:1", Path("/nonexistent/run"))
    arr = config.actor_rollout_ref
    global_batch = arr.actor.ppo_mini_batch_size * arr.rollout.n
    dp_size = config.trainer.n_gpus_per_node * config.trainer.nnodes
    return omega_conf_to_dataclass(arr.actor), global_batch, dp_size


def objective(actor, ranks: list[list[list[tuple]]], global_batch: int, dp_size: int) -> float:
    """What the ranks' gradients average to: each rank's micro-batch losses summed (its
    accumulated gradient), the mean over the ranks (FSDP's reduction)."""
    episodes = [e for rank in ranks for micro in rank for e in micro]
    assert len(episodes) == global_batch and len(ranks) == dp_size
    tokens = sum(sum(m) for _, m, *_ in episodes)  # the engine's all-reduced token count
    total = 0.0
    for rank in ranks:
        for micro in rank:
            output, data = micro_batch(micro, dp_size, global_batch, tokens)
            loss, _ = ppo_loss(actor, output, data)
            total += float(loss)
    return total / dp_size


def test_the_paper_config_weighs_each_episode_as_the_release_does():
    actor, global_batch, dp_size = paper_actor()
    assert (global_batch, dp_size) == (64, 4)  # 8 tasks x 8 samples, 4 GPUs
    per_rank = global_batch // dp_size
    # Each rank 8 long and 8 short, in one micro-batch (dynamic batching packs them) or one
    # sample per micro-batch; or the long episodes all on two ranks.
    mixed = [[LONG, SHORT] * (per_rank // 2)] * dp_size
    layouts = {
        "packed": [[rank] for rank in mixed],
        "one per micro-batch": [[[e] for e in rank] for rank in mixed],
        "long on two ranks": [[[LONG] * per_rank]] * 2 + [[[SHORT] * per_rank]] * 2,
    }
    for name, ranks in layouts.items():
        loss = objective(actor, ranks, global_batch, dp_size)
        assert loss == pytest.approx(RELEASE_LOSS, abs=1e-6), name
    # One mean over the tokens instead (token-mean) weighs the long episodes 3 to 1.
    actor, _, _ = paper_actor("trainer.loss.loss_agg_mode=token-mean")
    token_mean = (6 * -0.5 + 2 * 1.5) / 8 + 0.001 * 6 * K3_LOG2 / 8
    assert objective(actor, layouts["packed"], global_batch, dp_size) == pytest.approx(token_mean)
    assert abs(token_mean - RELEASE_LOSS) > 0.1
