"""The local SLURM dev cluster runs real jobs: submitit, 2 distinct nodes, sacct, USR2 and partition preemption."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import pytest
import submitit

from tests.devcluster import DEFAULT_PARTITION, NODES, URGENT_PARTITION, wait_until  # (fixture: conftest)

pytestmark = pytest.mark.slurm

# Jobs unpickle the functions below: ship them by value so the job does not need to import this test module
# (it would, by reference, only when pytest runs from the repo root).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _sh(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def _executor(folder: Path, **params) -> submitit.SlurmExecutor:
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=3)
    # time >= 12 min: with a shorter limit submitit counts every USR2 as a timeout instead of a preemption.
    ex.update_parameters(partition=DEFAULT_PARTITION, time=15, nodes=1, ntasks_per_node=1, cpus_per_task=1, mem="256M")
    ex.update_parameters(**params)
    return ex


def _result(job: submitit.Job, timeout: float):
    wait_until(job.done, timeout, lambda: f"job {job.job_id} to finish (state {job.state})", interval=0.5)
    return job.result()


def _nodes_state() -> dict[str, set[str]]:
    states: dict[str, set[str]] = {}
    for line in _sh("sinfo", "-h", "-N", "-o", "%N|%P|%t").splitlines():
        node, partition, state = line.split("|")
        states.setdefault(node, set()).add(f"{partition.rstrip('*')}:{state}")
    return states


def test_both_nodes_idle_in_both_partitions(devcluster):
    want = {n: {f"{DEFAULT_PARTITION}:idle", f"{URGENT_PARTITION}:idle"} for n in NODES}
    # Idle unless another test's job still finishes.
    wait_until(lambda: _nodes_state() == want, 20, lambda: f"sinfo to show {want} (now {_nodes_state()})")
    assert "debug*" in _sh("sinfo", "-h", "-o", "%P")  # debug is the default partition


def _where() -> tuple[str, str]:
    return socket.gethostname(), os.environ["SLURM_JOB_ID"]


def test_submitit_job_returns_result_and_sacct_records_it(devcluster, tmp_path):
    t0 = time.monotonic()
    job = _executor(tmp_path).submit(_where)
    host, job_id = _result(job, timeout=30)
    print(f"submit -> result: {time.monotonic() - t0:.2f} s")
    assert host in NODES and job_id == job.job_id
    # Accounting is written asynchronously by slurmctld -> slurmdbd.
    wait_until(
        lambda: _sh("sacct", "-n", "-X", "-P", "-j", job.job_id, "-o", "JobID,State,NodeList").strip()
        == f"{job.job_id}|COMPLETED|{host}",
        15,
        f"sacct to show job {job.job_id} COMPLETED",
    )


def _rank_info() -> tuple[str, int, int, str, str]:
    env = submitit.helpers.TorchDistributedEnvironment()
    # MASTER_ADDR must resolve on every node (gloo/NCCL rendezvous).
    return socket.gethostname(), env.rank, env.world_size, env.master_addr, socket.gethostbyname(env.master_addr)


def test_two_node_job_runs_on_node1_and_node2(devcluster, tmp_path):
    job = _executor(tmp_path, nodes=2, ntasks_per_node=1).submit(_rank_info)
    wait_until(job.done, 30, f"2-node job {job.job_id}", interval=0.5)
    results = job.results()
    assert sorted(r[0] for r in results) == ["node1", "node2"]
    assert sorted(r[1] for r in results) == [0, 1]
    assert {r[2] for r in results} == {2}
    assert {r[3] for r in results} == {"node1"}  # first node of the allocation is the rendezvous master
    assert {r[4] for r in results} == {"127.0.0.1"}


class Counter(submitit.helpers.Checkpointable):
    """Counts to `steps`, one step per 0.2 s; on USR2 submitit pickles it (with `done`) and requeues."""

    def __init__(self) -> None:
        self.done = 0

    def __call__(self, workdir: str, steps: int) -> tuple[int, int]:
        work = Path(workdir)
        with open(work / "starts", "a") as f:  # one line per (re)start: the step it resumed from
            f.write(f"{self.done}\n")
        while self.done < steps:
            time.sleep(0.2)
            self.done += 1
            (work / "progress").write_text(str(self.done))
        return self.done, len((work / "starts").read_text().split())


def test_usr2_requeues_and_resumes_from_checkpoint(devcluster, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    job = _executor(tmp_path / "submitit").submit(Counter(), str(work), 40)
    progress = work / "progress"
    wait_until(lambda: progress.exists() and int(progress.read_text() or 0) >= 5, 30, "the job to make progress")
    _sh("scancel", "--signal=USR2", job.job_id)
    done, starts = _result(job, timeout=60)
    resumed_from = [int(x) for x in (work / "starts").read_text().split()]
    assert done == 40
    assert starts == 2 and resumed_from[0] == 0 and 5 <= resumed_from[1] < 40, resumed_from
    # sacct keeps the interrupted run as a duplicate record in state REQUEUED.
    states = _sh("sacct", "-n", "-X", "-D", "-P", "-j", job.job_id, "-o", "State").split()
    assert "REQUEUED" in states, states


def test_urgent_partition_preempts_debug_job_which_resumes(devcluster, tmp_path):
    cpus = int(_sh("sinfo", "-h", "-n", "node1", "-o", "%c").split()[0])
    work = tmp_path / "work"
    work.mkdir()
    # The debug job fills node1, so an urgent job for node1 can only start by preempting it.
    ex = _executor(tmp_path / "submitit", cpus_per_task=cpus, additional_parameters={"nodelist": "node1"})
    job = ex.submit(Counter(), str(work), 40)
    progress = work / "progress"
    wait_until(lambda: progress.exists() and int(progress.read_text() or 0) >= 5, 30, "the debug job to make progress")
    urgent = _sh(
        "sbatch", "--parsable", f"--partition={URGENT_PARTITION}", "--nodelist=node1", f"--cpus-per-task={cpus}",
        "--output=/dev/null", "--wrap=hostname",
    ).strip()
    done, starts = _result(job, timeout=60)
    resumed_from = [int(x) for x in (work / "starts").read_text().split()]
    assert done == 40
    assert starts == 2 and 5 <= resumed_from[1] < 40, resumed_from
    wait_until(
        lambda: _sh("sacct", "-n", "-X", "-P", "-j", urgent, "-o", "State").strip() == "COMPLETED",
        15,
        f"sacct to show the urgent job {urgent} COMPLETED",
    )
    states = _sh("sacct", "-n", "-X", "-D", "-P", "-j", job.job_id, "-o", "State").split()
    assert {"PREEMPTED", "REQUEUED"} & set(states), states
