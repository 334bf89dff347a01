"""What runs inside a job: the callables, and the rendezvous of the job's tasks.

Each callable is a `submitit.helpers.Checkpointable`: on the preemption/timeout signal (USR2) submitit pickles it
and requeues the job; the rerun calls the same entry point with the same run id, and the entry point resumes from
the last checkpoint it wrote. The number of requeues is bounded (`max_requeues`) and every start, preemption and
end is appended to the run's `logs/job-events.jsonl` (what `status` reports).

Jobs call entry points only (`playpen.train.train`, `playpen.eval`); they know nothing of TRL internals.

Multi-node rendezvous: one task per GPU (or one per node on CPU), torch.distributed's env:// variables taken from
the allocation — the first node is the master, the port is derived from the job id (submitit's
`TorchDistributedEnvironment`), so every task of one job computes the same address without talking.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import submitit

from playpen.config import signature_dataclass
from playpen.defaults import EVAL_BOUNDS, EVAL_HELP
from playpen.eval.evaluation import evaluate
from playpen.storage import Location, append_jsonl, read_jsonl

LOGS = "logs"  # <run, results, sweep ... dir>/logs: a submission's records, its jobs' logs and events
EVENTS_FILE = "job-events.jsonl"


def job_events(log_dir: str | Path) -> list[dict]:
    return read_jsonl(Path(log_dir) / EVENTS_FILE)


# ---------------------------------------------------------------- the rendezvous

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
    training_step_nodes_as_the_job()
    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        for name in DIST_VARS:  # a stale rendezvous from an outer launcher must not make us a rank
            os.environ.pop(name, None)
        return TaskInfo(str(job.job_id), 0, 1, 0, socket.gethostname(), "")
    dist = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=use_gpus, overwrite=True)
    return TaskInfo(str(job.job_id), dist.rank, dist.world_size, dist.local_rank, socket.gethostname(),
                    f"{dist.master_addr}:{dist.master_port}")


def training_step_nodes_as_the_job() -> None:
    """With the job's vLLM server on its first node, training runs as a step on the other nodes; submitit's
    rendezvous reads the job's node list (its master is the first node), so it is given the step's."""
    from playpen.models.vllm_server import STATE_ENV

    if os.environ.get(STATE_ENV) and os.environ.get("SLURM_STEP_NODELIST"):
        os.environ["SLURM_JOB_NODELIST"] = os.environ["SLURM_STEP_NODELIST"]
        os.environ["SLURM_JOB_NUM_NODES"] = os.environ.get("SLURM_STEP_NUM_NODES", "1")


# ---------------------------------------------------------------- the callables

class PlaypenJob(submitit.helpers.Checkpointable):
    """Bookkeeping shared by all jobs: event log, bounded requeues, rendezvous of multi-task jobs."""

    def __init__(self, log_dir: str, max_requeues: int, use_gpus: bool = False) -> None:
        self.log_dir = str(log_dir)
        self.max_requeues = max_requeues
        self.use_gpus = use_gpus
        self.requeues = 0  # travels with the pickle that submitit writes at each checkpoint

    def _event(self, event: str, task: TaskInfo | None = None, **extra: Any) -> None:
        job = submitit.JobEnvironment()
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "event": event, "job_id": str(job.job_id),
                  "attempt": self.requeues, "host": socket.gethostname(), **extra}
        if task is not None and task.world_size > 1:
            record.update(world_size=task.world_size, master=task.master)
        append_jsonl(Path(self.log_dir) / EVENTS_FILE, record)

    def __call__(self, *args: Any) -> Any:
        task = setup_distributed(self.use_gpus)
        if task.is_main:
            self._event("started", task)
        try:
            result = self.run(task, *args)
        except Exception as e:
            if task.is_main:
                self._event("failed", task, error=f"{type(e).__name__}: {e}"[:500])
            raise
        if task.is_main:
            self._event("finished", task)
        return result

    def run(self, task: TaskInfo, *args: Any) -> Any:
        raise NotImplementedError

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission | None:
        """Called by submitit (global rank 0 only) on USR2: requeue unless the budget of requeues is spent.

        The entry point checkpoints periodically; the rerun resumes from the last checkpoint on disk."""
        if self.requeues >= self.max_requeues:
            self._event("gave-up", reason=f"preempted/timed out {self.requeues + 1} times "
                                          f"(max_requeues={self.max_requeues})")
            return None  # submitit then ends the job with an error instead of requeueing it
        self._event("requeued")
        self.requeues += 1
        return super().checkpoint(*args, **kwargs)


class TrainJob(PlaypenJob):
    """`playpen.train.train(method, config, overrides + [run_id=...])`: resumes from the run dir's checkpoint."""

    def __init__(self, method: str, config: str | None, overrides: list[str], run_id: str, log_dir: str,
                 max_requeues: int, use_gpus: bool = False) -> None:
        super().__init__(log_dir, max_requeues, use_gpus)
        self.method = method
        self.config = config
        self.overrides = [o for o in overrides if not o.startswith("run_id=")] + [f"run_id={run_id}"]

    def run(self, task: TaskInfo) -> dict:
        from playpen.train import train

        run = train(self.method, self.config, list(self.overrides))
        return {"run_dir": str(run.path), "rank": task.rank, "world_size": task.world_size,
                "host": task.host}


# `submit eval --config FILE`: the arguments of `playpen eval` (playpen.eval.evaluate) as YAML keys, taken from
# its signature; results_dir defaults to <storage_root>/eval/<model>-<time>
EVAL_KEYS_HELP = {
    "model": "registered model name, training run folder or checkpoint folder",
    "games": "games to play (default: every registered game of the suite)",
    "results_dir": "results folder to create or reuse (default: <storage_root>/eval/<model>-<time>)",
    "skip_gameplay": "only rescore the records in results_dir",
    "suite": "dialogue (clemscore), static (statscore), or all",
    "instance_set": "validation, train, or an instances file of the game",
    "player": "who drives the model: engine (playpen's rollout engine, local HF models), clemcore (clemcore's "
              "runner, every backend) or auto (the engine where it can)",
    "verbose": "clemcore's log lines on the job's output too (always in <results_dir>/clembench.log)",
    "partner": "plays the second seat of two-player games, as `clem run -m MODEL PARTNER`: a model name or folder, "
               "mock, or programmatic (the built-in game's expert); null: the model plays every seat",
    "experiments": "play only these experiments of the games, as `clem run -e`",
    "storage_root": "default: the cluster profile's, else $PLAYPEN_STORAGE or ./runs",
    **EVAL_HELP,
}
EvalSpec = signature_dataclass(evaluate, "EvalSpec", skip=("log",), bounds=EVAL_BOUNDS,
                               extra=(("storage_root", Optional[Location], None),),
                               types={"results_dir": Optional[Location]}, helps=EVAL_KEYS_HELP)


class EvalJob(PlaypenJob):
    """`playpen.eval.evaluate` on one model; a requeued job replays the games (results are replaced)."""

    def __init__(self, spec: EvalSpec, results_dir: str, log_dir: str, max_requeues: int,
                 use_gpus: bool = False) -> None:
        super().__init__(log_dir, max_requeues, use_gpus)
        self.kwargs = {k: v for k, v in asdict(spec).items() if k not in ("model", "storage_root")}
        self.kwargs["results_dir"] = results_dir
        self.model = spec.model

    def run(self, task: TaskInfo) -> dict:
        from playpen.eval import evaluate

        val = evaluate(self.model, **self.kwargs)
        return {k: val.get(k) for k in ("clemscore", "statscore", "results_dir")}


class MeterJob(PlaypenJob):
    """`playpen meter` as a job: its own flags (a YAML mapping, see playpen.reward.meter.parse_config)."""

    def __init__(self, config: dict, log_dir: str, max_requeues: int, use_gpus: bool = False) -> None:
        super().__init__(log_dir, max_requeues, use_gpus)
        self.config = config

    def run(self, task: TaskInfo) -> dict:
        from playpen.reward.meter import meter, parse_config

        return {"results_dir": str(meter(parse_config(self.config, "meter job")))}


class SweepCellsJob(PlaypenJob):
    """Sweep cells one after the other: one per job-array task on SLURM, a share of them per local worker.
    A requeued task skips the cells it already finished."""

    def __init__(self, sweep_dir: str, log_dir: str, max_requeues: int, use_gpus: bool = False,
                 aggregate: bool = False) -> None:
        super().__init__(log_dir, max_requeues, use_gpus)
        self.sweep_dir = sweep_dir
        self.aggregate = aggregate  # local workers aggregate at their end (SLURM: a dependent job does)

    def run(self, task: TaskInfo, cells: list[Any]) -> dict:
        from playpen.eval import sweep

        done, failed = [], {}
        for cell in cells:
            if sweep.cell_state(self.sweep_dir, cell)["state"] == "done":  # finished before a requeue
                done.append(cell.key)
                continue
            try:
                done.append(sweep.run_cell(self.sweep_dir, cell)["key"])
            except Exception as e:  # noqa: BLE001  (recorded in the cell's state.json; the next cell runs)
                failed[getattr(cell, "key", "?")] = f"{type(e).__name__}: {e}"[:300]
        if self.aggregate:
            sweep.aggregate(self.sweep_dir)
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(cells)} cell(s) failed: {failed}")
        return {"done": done}


class TournamentMatchesJob(PlaypenJob):
    """Debate/consultancy tournament matches one after the other: one per job-array task on SLURM, a share per
    local worker. A requeued task skips the matches it already played."""

    def __init__(self, config: dict, log_dir: str, max_requeues: int, use_gpus: bool = False,
                 aggregate: bool = False) -> None:
        super().__init__(log_dir, max_requeues, use_gpus)
        self.config = config  # TournamentConfig as a dict, output_dir absolute
        self.aggregate = aggregate

    def run(self, task: TaskInfo, seatings: list[list[str]]) -> dict:
        from playpen.debate_tools import tournament

        cfg = tournament.TournamentConfig(**self.config)
        pending = {tuple(s) for s in tournament.pending_matches(cfg)}
        played, failed, cache = [], {}, {}
        for seating in map(tuple, seatings):
            if seating not in pending:
                continue
            try:
                tournament.play_match(cfg, seating, cache)
                played.append(" vs ".join(seating))
            except Exception as e:  # noqa: BLE001  (the next match runs; a rerun plays this one again)
                failed[" vs ".join(seating)] = f"{type(e).__name__}: {e}"[:300]
        if self.aggregate:
            tournament.aggregate(cfg)
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(seatings)} match(es) failed: {failed}")
        return {"played": played}


class DoctorJob(PlaypenJob):
    """`playpen doctor` on every rank of the job, plus the rendezvous, an all-reduce and the start latency
    (playpen.doctor.collective); rank 0 merges the ranks' reports into <folder>/doctor.json. Never requeued:
    a doctor that was preempted is simply run again."""

    def __init__(self, folder: str, log_dir: str, submitted: float, skip: tuple[str, ...] = (),
                 storage_root: str | None = None, timeout_s: float = 120, use_gpus: bool = False) -> None:
        super().__init__(log_dir, max_requeues=0, use_gpus=use_gpus)
        self.folder, self.submitted, self.skip = folder, submitted, tuple(skip)
        self.storage_root, self.timeout_s = storage_root, timeout_s

    def run(self, task: TaskInfo) -> dict:
        from playpen.doctor.collective import run_rank

        return run_rank(self.folder, task.rank, task.world_size, task.local_rank, use_gpus=self.use_gpus,
                        submitted=self.submitted, storage_root=self.storage_root, skip=self.skip,
                        timeout_s=self.timeout_s)


def aggregate_tournament(config: dict) -> dict:
    """The job that runs after a tournament's job array: results.md, heatmap.png, matches.json."""
    from playpen.debate_tools import tournament

    summary = tournament.aggregate(tournament.TournamentConfig(**config))
    return {"dir": summary["dir"]}


def aggregate_sweep(sweep_dir: str) -> dict:
    """The job that runs after a sweep's job array (SLURM dependency afterany)."""
    from playpen.eval import sweep

    return sweep.aggregate(sweep_dir)
