"""Multi-node rendezvous inside a job: one task per GPU (or one per node on CPU), torch.distributed's env://
variables taken from the allocation — the first node is the master, the port is derived from the job id
(submitit's `TorchDistributedEnvironment`), so every task of one job computes the same address without talking.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import submitit

DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@dataclass(frozen=True)
class TaskInfo:
    job_id: str
    rank: int
    world_size: int
    local_rank: int
    host: str
    master: str  # "addr:port", or "" for a single-task job

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(use_gpus: bool) -> TaskInfo:
    """Export RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT for this task when the job has several tasks.

    A single-task job exports nothing (the trainer then runs as a plain process). With GPUs each task sees only
    its own device (CUDA_VISIBLE_DEVICES = local rank), so every rank uses `cuda:0`.
    """
    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        for name in DIST_VARS:  # a stale rendezvous from an outer launcher must not make us a rank
            os.environ.pop(name, None)
        return TaskInfo(str(job.job_id), 0, 1, 0, socket.gethostname(), "")
    dist = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=use_gpus, overwrite=True)
    return TaskInfo(str(job.job_id), dist.rank, dist.world_size, dist.local_rank, socket.gethostname(),
                    f"{dist.master_addr}:{dist.master_port}")
