"""Step 4 of `playpen submit`: where the job went, its progress while `--wait` waits, its result; and
`playpen submit status|logs` over a run or sweep dir, later.

Each submission appends one entry to `<dir>/logs/submissions.json` (dir = a run dir or a sweep dir): executor,
job ids, the submitit folder (job logs), the cluster profile and the command line. Jobs append their starts,
requeues and ends to `<dir>/logs/job-events.jsonl` (`jobs.py`). `status` reads both and asks the scheduler
(sacct through submitit) or the local process table for the current state.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from submitit.core.utils import JobPaths
from submitit.slurm.slurm import read_job_id

from playpen.errors import PlaypenError
from playpen.reading import read_json
from playpen.storage import atomic_write_json, checkpoints_in, open_private_file, read_json_or_none, read_text_lossy
from playpen.submit.jobs import LOGS, job_events
from playpen.train.metrics import progress_line

if TYPE_CHECKING:  # (plan.py reads this module's records: a run dir's last submission)
    from playpen.submit.plan import Plan, Resources

POLL_S = 1.0
PROGRESS_EVERY_S = 10.0  # a progress line at most this often while waiting

SUBMISSIONS_FILE = "submissions.json"
# Scheduler states of a job that is not over yet (SLURM's, and RUNNING for a local process).
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                 "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "PREEMPTED"}


@dataclass
class Submission:
    kind: str  # "train", "eval", "sweep"
    what: str  # sft/dpo/grpo/eval/sweep
    executor: str  # slurm | local
    profile: str
    job_ids: list[str]
    folder: str  # submitit folder (job logs, pickles): <dir>/logs/submitit/<time>-<pid>
    directory: str  # run dir or sweep dir
    tasks: int  # tasks per job (nodes × tasks per node)
    max_requeues: int
    argv: list[str] = field(default_factory=list)
    time: str = ""
    after: list[str] = field(default_factory=list)  # jobs that run when these have ended (sweep aggregation)

    def log_paths(self, job_id: str, task: int = 0) -> tuple[Path, Path]:
        paths = JobPaths(self.folder, job_id=job_id, task_id=task)
        return paths.stdout, paths.stderr

    def cancel_command(self) -> str:
        if self.executor == "slurm":
            return "scancel " + " ".join(sorted({j.split("_")[0] for j in self.job_ids}))
        return "kill -INT " + " ".join(self.job_ids)  # the local controller stops its tasks on SIGINT


def record_submission(sub: Submission) -> Path:
    path = Path(sub.directory, LOGS) / SUBMISSIONS_FILE
    previous = _read_records(path) if os.path.lexists(path) else []
    return atomic_write_json(path, previous + [asdict(sub)])


def _read_records(path: Path) -> list[dict]:
    """The submission records of logs/submissions.json, or one line saying why the file cannot be read (cut off
    by a full disk, edited by hand)."""
    records = read_json(path, "submission record")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise PlaypenError(f"{path}: expected a JSON list of submission records; fix it or move it away")
    return records


def load_submissions(directory: str | Path) -> list[Submission]:
    path = Path(directory, LOGS) / SUBMISSIONS_FILE
    if not os.path.lexists(path):
        raise PlaypenError(f"{directory} holds no submission record (logs/{SUBMISSIONS_FILE}); "
                           f"give a run or sweep directory that `python -m playpen.submit` printed")
    names = {f.name for f in fields(Submission)}
    try:
        return [Submission(**{k: v for k, v in entry.items() if k in names}) for entry in _read_records(path)]
    except TypeError as e:  # a record missing a field
        raise PlaypenError(f"{path}: a submission record is incomplete ({e}); fix it or move it away") from None


# ---------------------------------------------------------------- state

def slurm_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """job id → (state, node list), from sacct (array tasks one by one); squeue when sacct is not available."""
    base_ids = sorted({j.split("_")[0] for j in job_ids})
    args = [a for j in base_ids for a in ("-j", j)]
    try:
        proc = subprocess.run(["sacct", "-n", "-X", "-P", "-o", "JobID,State,NodeList", *args],
                              capture_output=True, text=True, timeout=30)
        lines = proc.stdout.splitlines() if proc.returncode == 0 else []
        if not lines:
            proc = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%N", *[a for j in base_ids for a in ("-j", j)]],
                                  capture_output=True, text=True, timeout=30)
            lines = proc.stdout.splitlines()
    except (OSError, subprocess.TimeoutExpired):
        return {}
    states: dict[str, tuple[str, str]] = {}
    for line in lines:
        job_id, state, nodes = (line.split("|") + ["", ""])[:3]
        value = (state.split()[0] if state else "UNKNOWN", nodes)  # "CANCELLED by 0" → CANCELLED
        try:
            parts = read_job_id(job_id)  # array tasks not started yet come as one line: 123_[4-99%4]
        except Exception:  # noqa: BLE001  (an id format this SLURM prints differently: keep it as is)
            parts = [(job_id,)]
        for base, *span in parts:
            if len(span) == 2:
                states.update({f"{base}_{i}": value for i in range(int(span[0]), int(span[1]) + 1)})
            else:
                states["_".join([base, *span])] = value
    return states


def result_state(sub: Submission, job_id: str) -> str | None:
    """FINISHED / FAILED from submitit's result pickles of all tasks, None while some are missing."""
    outcomes = []
    for task in range(sub.tasks):
        result = JobPaths(sub.folder, job_id=job_id, task_id=task).result_pickle
        if not result.exists():
            return None
        try:  # unpickling runs code: only a pickle of yours, in your private job folder
            f = open_private_file(result)
        except PlaypenError:
            return None
        try:
            import cloudpickle

            with f:
                outcomes.append(cloudpickle.load(f)[0])
        except Exception:  # noqa: BLE001  (a half-written pickle: not finished yet)
            return None
    return "FINISHED" if all(o == "success" for o in outcomes) else "FAILED"


def local_state(sub: Submission, job_id: str) -> str:
    done = result_state(sub, job_id)
    if done:
        return done
    if not is_local_controller(job_id, sub.folder):
        return "ENDED_WITHOUT_RESULT"  # the controller is gone (cancelled or killed) and left no result
    return "RUNNING"


def is_local_controller(job_id: str, folder: str) -> bool:
    """Whether pid `job_id` is a live submitit controller of this user for the job folder `folder`: a pid that
    was reused, or one a planted submissions.json names (pid 1), is not this submission's job."""
    try:
        pid = int(job_id)
        os.kill(pid, 0)
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    except PermissionError:  # another user's process
        return False
    proc = Path("/proc", str(pid))
    if not proc.is_dir():  # (no /proc: the signal check above is all there is)
        return True
    try:
        if proc.stat().st_uid != os.getuid():
            return False
        argv = [a.decode("utf-8", "replace") for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
    except OSError:  # it ended meanwhile
        return False
    # submitit's local controller: `python -m submitit.local._local <folder>`
    return "submitit.local._local" in argv and os.path.realpath(argv[-1]) == os.path.realpath(folder)


def job_states(sub: Submission) -> dict[str, tuple[str, str]]:
    if sub.executor == "slurm":
        states = slurm_states(sub.job_ids)
        return {j: states.get(j, (result_state(sub, j) or "UNKNOWN", "")) for j in sub.job_ids}
    return {j: (local_state(sub, j), "localhost") for j in sub.job_ids}


# ---------------------------------------------------------------- rendering

def tail(path: Path, lines: int) -> list[str]:
    if not path.is_file():  # (a FIFO or device is not a file: never read)
        return [f"(no {path.name} yet)"]
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 64 * 1024))
        text = f.read(64 * 1024).decode("utf-8", "replace")
    return text.splitlines()[-lines:]


def error_line(error: BaseException) -> str:
    """The last line of the job's traceback (submitit wraps it between dashed lines), or the message."""
    text = str(error)
    parts = text.split("-" * 22)
    trace = parts[1] if len(parts) > 2 else text
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def requeue_summary(sub: Submission) -> str:
    """Starts and requeues of this submission's jobs (the events file of a run dir spans resubmissions)."""
    ids = {j.split("_")[0] for j in sub.job_ids}
    events = [e for e in job_events(Path(sub.directory, LOGS)) if str(e.get("job_id", "")).split("_")[0] in ids]
    requeues = sum(e["event"] == "requeued" for e in events)
    gave_up = [e for e in events if e["event"] == "gave-up"]
    text = f"{sum(e['event'] == 'started' for e in events)} start(s), {requeues} requeue(s) (max {sub.max_requeues})"
    return text + (f"; gave up: {gave_up[-1].get('reason', '')}" if gave_up else "")


def render_status(directory: str | Path, lines: int = 10) -> str:
    directory = Path(directory).expanduser().absolute()
    from playpen.eval import sweep as sweep_mod

    if not (Path(directory, LOGS) / SUBMISSIONS_FILE).is_file() and (directory / sweep_mod.SWEEP_FILE).is_file():
        # a sweep whose cells ran here (`playpen sweep-local`), never submitted: the cells' own view
        return sweep_mod.format_status(sweep_mod.status(directory))
    subs = load_submissions(directory)
    sub = subs[-1]
    title = {"train": f"{sub.what} run", "eval": "eval", "sweep": "sweep"}.get(sub.kind, sub.kind)
    out = [f"{title} {directory}",
           f"  submitted {sub.time} via {sub.executor} (cluster profile {sub.profile})"
           + (f"; {len(subs) - 1} earlier submission(s)" if len(subs) > 1 else "")]
    states = job_states(sub)
    counts: dict[str, int] = {}
    for state, _ in states.values():
        counts[state] = counts.get(state, 0) + 1
    if len(states) == 1:
        (job_id, (state, nodes)), = states.items()
        out.append(f"  job {job_id}: {state}" + (f" on {nodes}" if nodes and nodes != "None assigned" else ""))
    else:
        out.append(f"  {len(states)} array tasks: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    if sub.after:
        after = slurm_states(sub.after) if sub.executor == "slurm" else {}
        out += [f"  then job {j}: {after.get(j, ('UNKNOWN', ''))[0]}" for j in sub.after]
    out.append(f"  {requeue_summary(sub)}")
    if sub.kind == "sweep":  # the sweep's own view of its cells
        out += ["  " + line for line in sweep_mod.format_status(sweep_mod.status(directory)).splitlines()]
    steps = [step for step, _ in checkpoints_in(directory / "checkpoints")]
    if steps:
        out.append(f"  checkpoints: {len(steps)} (latest checkpoint-{steps[-1]})")
    progress = progress_line(directory / "metrics.jsonl")
    if progress:
        out.append(f"  progress: {progress}")
    shown = [j for j, (s, _) in states.items() if s not in ("COMPLETED", "FINISHED")][:1] or sub.job_ids[-1:]
    for job_id in shown:
        stdout, stderr = sub.log_paths(job_id)
        for path in (stdout, stderr):
            out.append(f"--- {path} (last {lines} lines)")
            out += tail(path, lines)
    return "\n".join(out)


# ---------------------------------------------------------------- after submitting

def watch(plan: Plan, sub: Submission, submitted: list, wait_for_end: bool) -> int:
    """Say where the job went; with --wait, follow it to its end, then its results (0, or 1 if a job failed or
    doctor found a check FAILED)."""
    print_submitted(sub, plan.launch.resources)
    if not wait_for_end:
        return 0
    code = wait(sub, submitted)
    if plan.aggregate is not None:
        plan.aggregate[0](plan.aggregate[1])
    report = final_report(plan)
    if report is not None:
        print(report)
    return code or verdict(plan)


def final_report(plan: Plan) -> str | None:
    """What --wait prints at the end: doctor's table, a sweep's cells, a tournament's results."""
    if plan.kind == "doctor":
        from playpen.doctor import DOCTOR_FILE
        from playpen.doctor.report import from_dicts, table

        path = plan.directory / DOCTOR_FILE
        if not path.is_file():
            return (f"no {path}: the job ended before rank 0 wrote it (see its logs: playpen submit logs "
                    f"{plan.directory})")
        return table(from_dicts(read_json(path, "doctor report")["checks"])) + f"\nreport: {path}"
    if plan.kind == "sweep":
        from playpen.eval import sweep as sweep_mod

        return sweep_mod.format_status(sweep_mod.status(plan.directory))
    if plan.kind == "tournament":
        from playpen.config import read_text

        return read_text(plan.directory / "results.md", "tournament results")
    return None


def verdict(plan: Plan) -> int:
    """--wait's exit code once the job succeeded: doctor's 1 if a check FAILED (or no report was written)."""
    if plan.kind != "doctor":
        return 0
    from playpen.doctor import DOCTOR_FILE

    path = plan.directory / DOCTOR_FILE
    return 0 if path.is_file() and (read_json_or_none(path) or {}).get("overall") not in (None, "FAILED") else 1


def print_submitted(sub: Submission, res: Resources) -> None:
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


def wait(sub: Submission, submitted: list) -> int:
    """Block until every job is done; print state changes, a training run's progress as its metrics come in
    (the same line `status` shows), then the results (or the error and the log tail)."""
    last, shown, printed = None, None, 0.0
    metrics = Path(sub.directory) / "metrics.jsonl"
    while True:
        states = job_states(sub)
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
            print(f"job {job.job_id} failed: {error_line(e)}")
            print(f"--- {stderr} (last 20 lines)")
            print("\n".join(tail(stderr, 20)))
            continue
        print(f"job {job.job_id} finished: {results[0] if len(results) == 1 else results}")
    print(f"  {requeue_summary(sub)}")
    return 1 if failed else 0


def show_logs(args: argparse.Namespace) -> int:
    sub = load_submissions(Path(args.path).expanduser().absolute())[-1]
    job_id = args.job or sub.job_ids[-1]
    stdout, stderr = sub.log_paths(job_id, args.task)
    path = stderr if args.err else stdout
    if args.follow:
        os.execvp("tail", ["tail", "-n", "+1", "-F", str(path)])
    if not path.is_file():
        raise PlaypenError(f"no log yet at {path} (job {job_id} may still be pending)")
    sys.stdout.write(read_text_lossy(path, "job log"))
    return 0
