"""Submission latency on the local SLURM dev cluster → bench/results/submit.md.

    python bench/bench_submit.py [--repeats 5] [--cells 100]

1. submit → RUNNING for one job: from the call (submitit, playpen's executor and the devcluster profile) until
   squeue reports RUNNING; also for the full CLI (`python -m playpen.submit sft ...`, Python start-up and config
   checks included). Target ≤ 5 s.
2. a 100-cell sweep as ONE job array (`executor.map_array`, one sbatch) versus 100 separate submissions
   (`executor.submit` in a loop, submitit's default path; it waits 0.2 s between sbatch calls so as not to flood
   the controller). Target ≤ 3 s for the array.
Starts the dev cluster when it is not running (and stops it again afterwards).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playpen.storage import make_private_folder
from playpen.submit import plan, render, send
from playpen.submit.profiles import load_profile

REPO = Path(__file__).resolve().parents[1]

RESULTS = REPO / "bench" / "results" / "submit.md"


def cell(i: int) -> int:
    """A trivial array task (the submission cost does not depend on what the task does)."""
    return i


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[0] if out.strip() else ""


def wait_running(job_id: str, t0: float, timeout: float = 60) -> float:
    while time.monotonic() - t0 < timeout:
        if squeue_state(job_id) == "RUNNING":
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError(f"job {job_id} not RUNNING after {timeout} s (state {squeue_state(job_id)!r})")


def scancel(*job_ids: str) -> None:
    subprocess.run(["scancel", *{j.split("_")[0] for j in job_ids}], check=False)


def wait_idle(timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
            return
        time.sleep(0.5)


def executor(folder: Path, profile):
    """A SLURM executor of `profile` writing to `folder` (a new job folder, private as submissions make it: jobs
    load their pickle only from such a folder), and the clean environment to submit it from."""
    make_private_folder(folder, "job folder", root=folder.parent)
    launch = plan.launch("slurm", folder, profile, folder / "runs", "bench")
    return render.executor(launch), send.submission_env(launch)


def bench_to_running(tmp: Path, profile, repeats: int) -> list[float]:
    times = []
    for i in range(repeats):
        ex, env = executor(tmp / f"running-{i}", profile)
        t0 = time.monotonic()
        with env:
            job = ex.submit(sleeper, 30)
        times.append(wait_running(job.job_id, t0))
        scancel(job.job_id)
        wait_idle()
    return times


def bench_cli_to_running(tmp: Path, repeats: int) -> list[float]:
    data = tmp / "sft.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                     {"role": "assistant", "content": "hello"}]}) + "\n"
                            for _ in range(8)))
    config = tmp / "sft.yaml"
    config.write_text(f"experiment: bench\ndata: {data}\nstorage_root: {tmp / 'runs'}\ntrainer: {{max_steps: 1}}\n")
    times = []
    for i in range(repeats):
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "playpen.submit", "sft", "--config", str(config),
                               "--cluster", "devcluster", f"run_id=bench-{i}"], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(proc.stderr)
        job_id = next(line.split()[-1] for line in proc.stdout.splitlines() if "scancel" in line)
        times.append(wait_running(job_id, t0))
        scancel(job_id)
        wait_idle()
    return times


def bench_array(tmp: Path, profile, cells: int) -> tuple[float, float, float]:
    ex, env = executor(tmp / "array", profile)
    t0 = time.monotonic()
    with env:
        jobs = ex.map_array(cell, range(cells))
    array_s = time.monotonic() - t0
    scancel(*[j.job_id for j in jobs])
    wait_idle()
    ex, env = executor(tmp / "separate", profile)
    t0 = time.monotonic()
    with env:
        separate = [ex.submit(cell, i) for i in range(cells)]
    separate_s = time.monotonic() - t0
    scancel(*[j.job_id for j in separate])
    wait_idle()
    # the same 100 separate submissions without submitit's 0.2 s pause between sbatch calls
    ex, env = executor(tmp / "separate-nothrottle", profile)
    ex._throttling = 0.0  # submitit's private pause; only to show what sbatch itself costs
    t0 = time.monotonic()
    with env:
        unthrottled = [ex.submit(cell, i) for i in range(cells)]
    unthrottled_s = time.monotonic() - t0
    scancel(*[j.job_id for j in unthrottled])
    wait_idle()
    return array_s, separate_s, unthrottled_s


def devcluster(command: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """slurm/devcluster.sh COMMAND (start, status, stop, env); start and stop must succeed."""
    done = subprocess.run(["bash", str(REPO / "slurm" / "devcluster.sh"), command], capture_output=True, text=True,
                          timeout=timeout)
    if command in ("start", "stop") and done.returncode != 0:
        raise SystemExit(f"bash slurm/devcluster.sh {command} failed (exit {done.returncode}):\n{done.stdout}\n"
                         f"{done.stderr}")
    return done


def cluster_env() -> dict[str, str]:
    """What `devcluster.sh env` exports (SLURM_CONF=...), for this process and the jobs it submits."""
    lines = devcluster("env").stdout.splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cells", type=int, default=100)
    args = parser.parse_args()
    started_here = devcluster("status", timeout=60).returncode != 0
    if started_here:
        devcluster("start")
    os.environ.update(cluster_env())
    profile = load_profile("devcluster")
    try:
        wait_idle()
        with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp:
            running = bench_to_running(Path(tmp), profile, args.repeats)
            cli = bench_cli_to_running(Path(tmp), args.repeats)
            array_s, separate_s, unthrottled_s = bench_array(Path(tmp), profile, args.cells)
    finally:
        if started_here:
            devcluster("stop", timeout=120)
    med, cli_med = statistics.median(running), statistics.median(cli)
    ok = lambda good: "✅" if good else "❌"  # noqa: E731
    load = os.getloadavg()[0]
    text = f"""# Submission latency on the dev cluster

`python bench/bench_submit.py` (part of `make bench`), {time.strftime('%Y-%m-%d %H:%M')}, {platform.node()},
{os.cpu_count()} cores, load average {load:.1f} at the end; 2-node dev cluster (`slurm/devcluster.sh`, scheduler
settings for tests: `batch_sched_delay=0,sched_min_interval=0`), cluster profile `devcluster`.

| measure | result | target |
|---|---|---|
| submit → RUNNING, one job (submitit call → squeue RUNNING), median of {args.repeats} | {med:.2f} s (max {max(running):.2f} s) | ≤ 5 s {ok(med <= 5)} |
| submit → RUNNING via the CLI (`python -m playpen.submit sft ...`: start-up, config checks, sbatch), median of {args.repeats} | {cli_med:.2f} s (max {max(cli):.2f} s) | ≤ 5 s {ok(cli_med <= 5)} |
| {args.cells}-cell sweep as one job array (`map_array`, one sbatch) | {array_s:.2f} s | ≤ 3 s {ok(array_s <= 3)} |
| {args.cells} separate submissions (`executor.submit` in a loop, submitit's 0.2 s pause between sbatch calls) | {separate_s:.2f} s | — |
| {args.cells} separate submissions without the pause (sbatch cost alone) | {unthrottled_s:.2f} s | — |

One array is {separate_s / array_s:.0f}× faster to submit than separate jobs (and {unthrottled_s / array_s:.0f}× faster
than back-to-back sbatch calls); it is also one entry in `squeue`, one `scancel`, and its tasks are throttled by
`array_parallelism` instead of flooding the queue.
Raw: submit→RUNNING {', '.join(f'{t:.2f}' for t in running)} s; CLI {', '.join(f'{t:.2f}' for t in cli)} s.
"""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
