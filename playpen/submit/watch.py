"""What `playpen submit` shows: the script a dry run would send, the submitted jobs, their progress while
`--wait` waits, and `playpen submit logs`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage import read_text_lossy
from playpen.submit import executor as exe
from playpen.submit import status
from playpen.submit.plans import Plan
from playpen.submit.profiles import ClusterProfile

POLL_S = 1.0
PROGRESS_EVERY_S = 10.0  # a progress line at most this often while waiting


def print_dry_run(kind: str, folder: Path, profile: ClusterProfile, res: exe.Resources, plan: Plan,
                  name: str) -> int:
    """What would be submitted; creates nothing (the paths are the cluster's)."""
    n = len(plan.array) if plan.array is not None else None
    what = f"a job array of {n} tasks" if n and kind == "slurm" else f"{n or 1} job(s)"
    label = "run" if plan.kind == "train" else plan.kind
    print(f"# dry run: nothing submitted. {what}, cluster profile {profile.name}, {label} dir {plan.directory}")
    if kind == "slurm":
        ex = exe.make_executor(kind, folder, profile, res, name, plan.storage_root, preview=True)
        print(exe.sbatch_script(ex, n))
        return 0
    python = exe.python_command(profile, plan.storage_root, res.gpus_per_node > 0, local=True) or sys.executable
    params = exe.local_parameters(profile, res)
    print("# local executor: with these variables, the job's python in one process per task")
    print("\n".join(f"{k}={v}" for k, v in exe.job_exports(profile, plan.storage_root).items()))
    print(f"{python} -u -m submitit.core._submit {folder}  "
          f"# tasks={params['tasks_per_node']} timeout_min={params['timeout_min']}")
    return 0


def print_submitted(sub: status.Submission, res: exe.Resources) -> None:
    jobs_text = sub.job_ids[0] if len(sub.job_ids) == 1 else f"{sub.job_ids[0]} … {sub.job_ids[-1]}"
    shape = f"{res.nodes} node(s) × {res.tasks_per_node} task(s)"
    stdout, stderr = sub.log_paths(sub.job_ids[0])
    where = "job" if len(sub.job_ids) == 1 else f"job array of {len(sub.job_ids)}"
    print(f"submitted {sub.what} {where} {jobs_text} ({sub.executor}, cluster profile {sub.profile}, {shape})")
    print(f"  {'run' if sub.kind == 'train' else sub.kind} dir: {sub.directory}")
    print(f"  logs:    {stdout}")
    print(f"           {stderr}")
    print(f"  follow:  tail -f {stdout}")
    print(f"  status:  python -m playpen.submit status {sub.directory}")
    print(f"  cancel:  {sub.cancel_command()}")
    for job_id in sub.after:
        print(f"  then:    job {job_id} aggregates the results once the array has ended")
    sys.stdout.flush()


def wait(sub: status.Submission, submitted: list) -> int:
    """Block until every job is done; print state changes, a training run's progress as its metrics come in
    (the same line `status` shows), then the results (or the error and the log tail)."""
    from playpen.train.metrics import progress_line

    last, shown, printed = None, None, 0.0
    metrics = Path(sub.directory) / "metrics.jsonl"
    while True:
        states = status.job_states(sub)
        summary = ", ".join(sorted({s for s, _ in states.values()}))
        if summary != last:
            print(f"  state: {summary}", flush=True)
            last = summary
        progress = progress_line(metrics) if sub.kind == "train" else None
        if progress and progress != shown and time.time() - printed >= PROGRESS_EVERY_S:
            print(f"  {progress}", flush=True)
            shown, printed = progress, time.time()
        if all(job.done() for job in submitted):
            break
        time.sleep(POLL_S)
    progress = progress_line(metrics) if sub.kind == "train" else None
    if progress and progress != shown:  # where the run ended
        print(f"  {progress}", flush=True)
    failed = 0
    for job in submitted:
        try:
            results = job.results()
        except Exception as e:  # noqa: BLE001  (the job's own error, shown as its log tail)
            failed += 1
            stdout, stderr = sub.log_paths(job.job_id)
            print(f"job {job.job_id} failed: {status.error_line(e)}")
            print(f"--- {stderr} (last 20 lines)")
            print("\n".join(status.tail(stderr, 20)))
            continue
        print(f"job {job.job_id} finished: {results[0] if len(results) == 1 else results}")
    print(f"  {status.requeue_summary(sub)}")
    return 1 if failed else 0


def show_logs(args: argparse.Namespace) -> int:
    sub = status.load_submissions(Path(args.path).expanduser().absolute())[-1]
    job_id = args.job or sub.job_ids[-1]
    stdout, stderr = sub.log_paths(job_id, args.task)
    path = stderr if args.err else stdout
    if args.follow:
        os.execvp("tail", ["tail", "-n", "+1", "-F", str(path)])
    if not path.is_file():
        raise PlaypenError(f"no log yet at {path} (job {job_id} may still be pending)")
    sys.stdout.write(read_text_lossy(path, "job log"))
    return 0
