"""Padding rollout samples into tensors for the policy update.

A sample is prompt ids, response ids (generated and observation tokens interleaved)
and a response mask (1 on generated tokens). A micro-batch right-pads each sample's
prompt + response into one row of `input_ids`, and right-pads the response-aligned
tensors (mask, advantages, old and reference log-probs) to a common width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [b, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [b, L]
    response_start: torch.Tensor  # [b] index of each row's first response token
    response_ids: torch.Tensor  # [b, R] right-padded with 0 (masked out)
    response_mask: torch.Tensor  # [b, R] 1 on generated tokens
    index: list[int]  # which samples of the step these rows are

    @property
    def response_len(self) -> int:
        return self.response_ids.shape[1]


def collate(samples: Sequence, index: list[int], pad_id: int, device: torch.device) -> MicroBatch:
    """`samples` are rollout.driver.EpisodeSample-like (prompt_ids, response_ids, response_mask)."""
    rows = [samples[i] for i in index]
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in rows)
    resp_len = max(max(len(s.response_ids) for s in rows), 1)
    input_ids = torch.full((len(rows), seq_len), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), seq_len), dtype=torch.long)
    response_ids = torch.zeros((len(rows), resp_len), dtype=torch.long)
    response_mask = torch.zeros((len(rows), resp_len), dtype=torch.float32)
    for row, s in enumerate(rows):
        ids = list(s.prompt_ids) + list(s.response_ids)
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        response_ids[row, : len(s.response_ids)] = torch.tensor(s.response_ids, dtype=torch.long)
        response_mask[row, : len(s.response_mask)] = torch.tensor(
            s.response_mask, dtype=torch.float32
        )
    starts = torch.tensor([len(s.prompt_ids) for s in rows])
    return MicroBatch(
        input_ids.to(device),
        attention.to(device),
        starts.to(device),
        response_ids.to(device),
        response_mask.to(device),
        list(index),
    )


def pad_rows(rows: Sequence[torch.Tensor], width: int) -> torch.Tensor:
    """Stack 1-D tensors, right-padded with zeros to `width`."""
    out = torch.zeros((len(rows), width), dtype=rows[0].dtype if rows else torch.float32)
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out
