"""`seal_gloo`: a verl checkpoint engine that moves the actor's weights to the rollout
replicas over a gloo process group (CPU), registered with verl's CheckpointEngineRegistry.

verl's CheckpointEngineManager drives it as it drives its NCCL engine; weights travel from
the actor's rank 0 in size-bounded buckets of gloo broadcasts. Hand-written rather than
taken from verl: verl's engines need NCCL, NIXL, Mooncake or HCCL, none of which runs
without an accelerator. The protocol: docs/verl_notes.md, "How the CPU backend is
built".
"""

from __future__ import annotations

import datetime
import pickle
import socket
from collections.abc import AsyncIterator, Iterable
from typing import Any

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

BACKEND = "seal_gloo"
TIMEOUT = datetime.timedelta(minutes=10)
"""How long a rank waits for its peers (store connection and each broadcast)."""


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    def __init__(self, bucket_size: int, is_master: bool = False, host: str = "127.0.0.1"):
        self.bucket_size = bucket_size
        """Most bytes per broadcast (checkpoint_engine.update_weights_bucket_megabytes)."""
        self.is_master = is_master
        """True on the actor's rank 0, which sends; set by verl on actor workers only."""
        self.host = host
        """Address of the master's TCP store: loopback on one node."""
        self.rank = -1
        self.group: dist.ProcessGroup | None = None
        self.store: dist.TCPStore | None = None

    def prepare(self) -> dict[str, Any]:
        return {"host": self.host, "port": free_port(self.host)} if self.is_master else {}

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        master = metadata[0]  # the actor's rank 0 comes first (CheckpointEngineManager)
        world_size = 1 + rollout_world_size
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: dict) -> None:
        self.rank = rank
        if rank < 0:
            return
        self.store = dist.TCPStore(
            master["host"], master["port"], world_size, is_master=rank == 0, timeout=TIMEOUT
        )
        self.group = dist.ProcessGroupGloo(self.store, rank, world_size, TIMEOUT)

    def finalize(self) -> None:
        self.group = None  # the gloo group closes its sockets when released
        self.store = None
        self.rank = -1

    def _broadcast(self, tensor: torch.Tensor) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.group.broadcast([tensor], options).wait()

    def _broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's `obj` on every rank: its length, then its pickled bytes."""
        payload = pickle.dumps(obj) if self.rank == 0 else b""
        length = torch.tensor([len(payload)], dtype=torch.int64)
        self._broadcast(length)
        data = (
            torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            if self.rank == 0
            else torch.empty(int(length), dtype=torch.uint8)
        )
        self._broadcast(data)
        return obj if self.rank == 0 else pickle.loads(data.numpy().tobytes())

    @torch.no_grad()
    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps=None):
        if self.rank < 0:
            for _ in weights:  # each full tensor is gathered collectively: take part
                pass
            return {}
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in weights:
            tensor = tensor.detach().to("cpu").contiguous()
            if bucket and size + tensor.nbytes > self.bucket_size:
                self._send_bucket(bucket, last=False)
                bucket, size = [], 0
            bucket.append((name, tensor))
            size += tensor.nbytes
        self._send_bucket(bucket, last=True)
        return {}

    def _send_bucket(self, bucket: list[tuple[str, torch.Tensor]], last: bool) -> None:
        meta = [(name, tuple(t.shape), t.dtype) for name, t in bucket]
        self._broadcast_object({"tensors": meta, "last": last})
        if bucket:
            self._broadcast(torch.cat([t.reshape(-1).view(torch.uint8) for _, t in bucket]))

    @torch.no_grad()
    async def receive_weights(self, global_steps=None) -> AsyncIterator[tuple[str, torch.Tensor]]:
        while True:
            header = self._broadcast_object()
            meta = header["tensors"]
            if meta:
                nbytes = [_nbytes(shape, dtype) for _, shape, dtype in meta]
                buffer = torch.empty(sum(nbytes), dtype=torch.uint8)
                self._broadcast(buffer)
                offset = 0
                for (name, shape, dtype), n in zip(meta, nbytes, strict=True):
                    # A copy starts at offset 0, so any dtype can view it (a slice of
                    # the byte buffer may be misaligned for a wider element).
                    yield name, buffer[offset : offset + n].clone().view(dtype).reshape(shape)
                    offset += n
            if header["last"]:
                return


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
