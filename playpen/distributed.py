"""Processes of one training job: which rank this is, the process group, and the few collectives the recipes use.

Under torchrun (or srun through the job layer) every rank runs the same recipe; a plain process is rank 0 of 1
and every helper here is then a no-op. torch is imported inside the functions.
"""
from __future__ import annotations

import os
import socket



def dist_info() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the launcher's environment (torchrun, srun via the job layer)."""
    env = os.environ
    return int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def group_ready() -> bool:
    """Whether a torch.distributed process group is up (the collectives below need one)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def is_rank_zero() -> bool:
    import torch.distributed as dist

    return not group_ready() or dist.get_rank() == 0


def barrier() -> None:
    import torch.distributed as dist

    if group_ready():
        dist.barrier()


def all_gather(item) -> list:
    """Every rank's `item`, in rank order ([item] in a single process)."""
    import torch.distributed as dist

    if not group_ready() or dist.get_world_size() == 1:
        return [item]
    parts = [None] * dist.get_world_size()
    dist.all_gather_object(parts, item)
    return parts


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_deepspeed_distributed() -> bool:
    """DeepSpeed needs a process group before the model is built (ZeRO-3 partitions at init). A single plain
    process gets a one-rank group on a free port instead of DeepSpeed's mpi4py discovery. Returns True when this
    call created the group (the caller destroys it at the end)."""
    import deepspeed

    if group_ready():
        return False
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    deepspeed.init_distributed(dist_backend="nccl" if has_cuda() else "gloo")
    return True


def teardown() -> None:
    """End of a distributed run: wait for every rank, then close the group (avoids an abort at exit)."""
    import torch.distributed as dist

    if group_ready():
        dist.barrier()
        dist.destroy_process_group()
