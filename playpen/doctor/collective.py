"""The doctor as a job: every rank runs the local checks, then the ranks meet (torch.distributed's env:// from
SLURM's environment, exported by the job layer), all-reduce over NCCL (GPUs) or gloo (CPU) with the bus bandwidth
nccl-tests reports, and write one report per rank into the job's folder on shared storage; rank 0 merges them
into doctor.json. Merging goes through files, so a rendezvous that fails still leaves every rank's report."""
from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from playpen.doctor.report import FAILED, OK, SKIPPED, Check, Finding, as_json, attempt, from_dicts, worst
from playpen.reading import read_json
from playpen.storage import atomic_write_json, atomic_write_text

IFNAME_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def backend(use_gpus: bool) -> str:
    import torch

    return "nccl" if use_gpus and torch.cuda.is_available() else "gloo"


def _rendezvous_advice(kind: str) -> str:
    set_vars = ", ".join(f"{v}={os.environ[v]}" for v in IFNAME_VARS if os.environ.get(v))
    return (f"{'this job set ' + set_vars + '; ' if set_vars else ''}set the cluster profile's nccl: "
            f"{'NCCL_SOCKET_IFNAME' if kind == 'nccl' else 'GLOO_SOCKET_IFNAME'} to an interface every node has "
            f"(here: {', '.join(interfaces()) or '?'}; ask the admins which one is the fast network)")


def rendezvous(use_gpus: bool, timeout_s: float):
    def check() -> tuple[str, dict]:
        import torch
        import torch.distributed as dist

        kind = backend(use_gpus)
        env = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")}
        start = time.perf_counter()
        try:
            if kind == "nccl":
                torch.cuda.set_device(0)  # the job layer shows each task only its own GPU
            dist.init_process_group(kind, timeout=timedelta(seconds=timeout_s))
            probe = torch.ones(1, device="cuda" if kind == "nccl" else "cpu")
            dist.all_reduce(probe)  # NCCL builds its communicator here: a bad interface fails now
        except Exception as e:  # noqa: BLE001
            first = (str(e).strip().splitlines() or [""])[0][:240]
            raise Finding(FAILED, f"{kind} rendezvous at {env['MASTER_ADDR']}:{env['MASTER_PORT']} failed: "
                                  f"{type(e).__name__}: {first}", _rendezvous_advice(kind), backend=kind,
                          **env) from None
        seconds = time.perf_counter() - start
        return (f"{kind}, {dist.get_world_size()} ranks met at {env['MASTER_ADDR']}:{env['MASTER_PORT']} in "
                f"{seconds:.2f} s", {"backend": kind, "seconds": round(seconds, 3), **env})
    return check


def all_reduce_bandwidth() -> tuple[str, dict]:
    """Sum-all-reduce of float32 tensors, 1 MiB up to 256 MiB on GPUs (16 MiB on CPU); algbw = bytes / time and
    busbw = algbw × 2(n-1)/n (nccl-tests' convention), best of a few after a warm-up; the sum is checked."""
    import torch
    import torch.distributed as dist

    n = dist.get_world_size()
    gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    sizes = [2**20, 2**24, 2**28] if gpu else [2**20, 2**24]
    repeats = 10 if gpu else 3
    rows = []
    for size in sizes:
        x = torch.full((size // 4,), float(dist.get_rank() + 1), device=device)
        dist.all_reduce(x)  # warm-up, and the check
        expected = n * (n + 1) / 2
        if abs(x[0].item() - expected) > 1e-3 or abs(x[-1].item() - expected) > 1e-3:
            raise Finding(FAILED, f"all-reduce of {size >> 20} MiB summed to {x[0].item()}, expected {expected}",
                          "a broken interconnect or library: try other nodes and tell the admins")
        best = float("inf")
        for _ in range(repeats):
            dist.barrier()
            if gpu:
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.all_reduce(x)
            if gpu:
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        algbw = size / best / 1e9
        rows.append({"bytes": size, "seconds": round(best, 6), "algbw_gbs": round(algbw, 3),
                     "busbw_gbs": round(algbw * 2 * (n - 1) / n, 3)})
    top = rows[-1]
    each = ", ".join("{:.3g} GB/s at {} MiB".format(r["busbw_gbs"], r["bytes"] >> 20) for r in rows)
    return (f"{dist.get_backend()}, {n} ranks: bus bandwidth {top['busbw_gbs']:.3g} GB/s at {top['bytes'] >> 20} MiB "
            f"({each})", {"sizes": rows, "world_size": n})


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return f"cuda:0 {torch.cuda.get_device_name(0)}"
    return f"cpu ({torch.get_num_threads()} threads)"


def run_rank(folder: str, rank: int, world_size: int, local_rank: int, *, use_gpus: bool, submitted: float,
             storage_root: str | None, skip: tuple[str, ...], timeout_s: float) -> dict:
    """One rank's part: local checks, rendezvous, all-reduce, features (DeepSpeed over the job's group), its
    report file; rank 0 then merges every rank's report into doctor.json. Returns the summary."""
    import torch.distributed as dist

    started = time.time()
    out = Path(folder)
    checks: list[Check] = []
    distributed: list[Check] = []
    if world_size > 1:
        distributed.append(attempt("distributed", "rendezvous", rendezvous(use_gpus, timeout_s)))
        if distributed[-1].status == OK:
            distributed.append(attempt("distributed", "all-reduce", all_reduce_bandwidth))
    else:
        distributed.append(Check("distributed", "rendezvous", SKIPPED, "one task: nothing to meet",
                                 "--nodes 2 (or --gpus-per-node 2) tests the rendezvous and the all-reduce"))
    group_failed = world_size > 1 and distributed[0].status == FAILED
    from playpen.doctor import local_checks

    checks = local_checks(storage_root, skip, group_failed=group_failed)
    me = {"rank": rank, "local_rank": local_rank, "host": socket.gethostname(), "device": device_name(),
          "start_latency_s": round(started - submitted, 2), "seconds": round(time.time() - started, 2),
          "checks": [asdict(c) for c in distributed + checks]}
    atomic_write_json(out / "ranks" / f"rank-{rank}.json", me)
    if world_size > 1 and not group_failed:
        dist.barrier()
    if rank != 0:
        _close_group()
        return {"rank": rank, "overall": worst(distributed + checks)}
    reports = _collect(out, world_size, wait_s=5 if not group_failed else timeout_s)
    _close_group()
    merged = merge(reports, world_size, submitted)
    meta = {"kind": "job", "world_size": world_size, "submitted": submitted,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "ranks": [{k: v for k, v in r.items() if k != "checks"} for r in reports]}
    atomic_write_text(out / "doctor.json", as_json(merged, **meta))
    return {"doctor": str(out / "doctor.json"), "overall": worst(merged),
            "failed": [c.name for c in merged if c.status == FAILED]}


def _close_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _collect(folder: Path, world_size: int, wait_s: float) -> list[dict]:
    """Every rank's report from the shared folder, waiting up to `wait_s` for late ones."""
    deadline = time.monotonic() + wait_s
    while True:
        found = {int(p.stem.split("-")[1]): p for p in (folder / "ranks").glob("rank-*.json")}
        if len(found) >= world_size or time.monotonic() > deadline:
            return [read_json(found[r], "rank report") for r in sorted(found)]
        time.sleep(0.5)


def merge(reports: list[dict], world_size: int, submitted: float) -> list[Check]:
    """Rank 0's checks, then: the ranks' hosts and devices, whether every rank's report reached the shared folder,
    the start latency, and any other rank's check whose status differs from rank 0's."""
    first = from_dicts(reports[0]["checks"])
    hosts = sorted({r["host"] for r in reports})
    placed = "; ".join(f"{r['rank']}: {r['host']} {r['device']}" for r in reports)
    ranks = Check("distributed", "ranks", OK, f"{len(reports)} rank(s) on {len(hosts)} node(s): {placed}",
                  data={"hosts": hosts})
    seen = {r["rank"] for r in reports}
    if len(seen) < world_size:
        missing = sorted(set(range(world_size)) - seen)
        shared = Check("distributed", "shared storage", FAILED,
                       f"rank(s) {missing} wrote no report rank 0 can see",
                       "storage_root must be the same shared path on every node (or those ranks died: see the logs)")
    else:
        shared = Check("distributed", "shared storage", OK if world_size > 1 else SKIPPED,
                       f"every rank's report reached {len(reports)} file(s) in one folder" if world_size > 1 else
                       "one task")
    latency = max(r["start_latency_s"] for r in reports)
    start = Check("distributed", "start latency", OK, f"{latency:.1f} s from submission to the last rank's start",
                  data={"per_rank": {r["rank"]: r["start_latency_s"] for r in reports}})
    others = []
    by_name = {(c.section, c.name): c.status for c in first}
    for r in reports[1:]:
        for c in from_dicts(r["checks"]):
            if c.status != by_name.get((c.section, c.name)) and c.status in (FAILED, "WARN", OK):
                c.name = f"{c.name} (rank {r['rank']}, {r['host']})"
                others.append(c)
    dist_first = [c for c in first if c.section == "distributed"]
    rest = [c for c in first if c.section != "distributed"]
    return [*dist_first, ranks, shared, start, *others, *rest]
