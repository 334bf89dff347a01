"""What a submission left behind, and `status`/`logs` over it.

Each submission appends one entry to `<dir>/logs/submissions.json` (dir = a run dir or a sweep dir): executor,
job ids, the submitit folder (job logs), the cluster profile and the command line. Jobs append their starts,
requeues and ends to `<dir>/logs/job-events.jsonl` (`jobs.py`). `status` reads both and asks the scheduler
(sacct through submitit) or the local process table for the current state.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from submitit.core.utils import JobPaths
from submitit.slurm.slurm import read_job_id

from playpen.reading import read_json
from playpen.errors import PlaypenError
from playpen.storage import atomic_write_json, checkpoints_in, written_by_me
from playpen.submit.jobs import job_events
from playpen.train.metrics import progress_line

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


def log_dir(directory: str | Path) -> Path:
    return Path(directory) / "logs"


def record_submission(sub: Submission) -> Path:
    path = log_dir(sub.directory) / SUBMISSIONS_FILE
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
    path = log_dir(directory) / SUBMISSIONS_FILE
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
        if not written_by_me(result):  # unpickling runs code: a pickle someone else planted would run as you
            return None
        try:
            import cloudpickle

            with result.open("rb") as f:
                outcomes.append(cloudpickle.load(f)[0])
        except Exception:  # noqa: BLE001  (a half-written pickle: not finished yet)
            return None
    return "FINISHED" if all(o == "success" for o in outcomes) else "FAILED"


def local_state(sub: Submission, job_id: str) -> str:
    done = result_state(sub, job_id)
    if done:
        return done
    try:
        os.kill(int(job_id), 0)
    except (ProcessLookupError, ValueError):
        return "ENDED_WITHOUT_RESULT"  # the controller is gone (cancelled or killed) and left no result
    except PermissionError:
        pass
    return "RUNNING"


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
    events = [e for e in job_events(log_dir(sub.directory)) if str(e.get("job_id", "")).split("_")[0] in ids]
    requeues = sum(e["event"] == "requeued" for e in events)
    gave_up = [e for e in events if e["event"] == "gave-up"]
    text = f"{sum(e['event'] == 'started' for e in events)} start(s), {requeues} requeue(s) (max {sub.max_requeues})"
    return text + (f"; gave up: {gave_up[-1].get('reason', '')}" if gave_up else "")


def render_status(directory: str | Path, lines: int = 10) -> str:
    directory = Path(directory).expanduser().absolute()
    from playpen.eval import sweep as sweep_mod

    if not (log_dir(directory) / SUBMISSIONS_FILE).is_file() and (directory / sweep_mod.SWEEP_FILE).is_file():
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
