"""Step 2 of `playpen submit`: the plan as submitit executors, SLURM (sbatch) or local processes; nothing is
checked here again (plan.py did, where each value was read).

The sbatch script is submitit's own (`SlurmExecutor._make_submission_file_text`); a plan only fills its
parameters, and `--dry-run` prints that same text without needing SLURM. With an image, submitit's python
command becomes `<runtime> exec [--nv] --bind ... <image> python`, so submitit's pickled-callable machinery
itself runs inside the container; either way it starts through `playpen.submit.start`, which checks the pickle.
"""
from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from typing import Any

import submitit
from submitit.slurm.slurm import SlurmExecutor

from playpen.errors import PlaypenError
from playpen.submit.plan import Launch, Plan
from playpen.submit.start import start_command


@dataclass(frozen=True)
class Executors:
    job: submitit.Executor  # the job, or the job array
    after: submitit.Executor | None = None  # SLURM: the job that aggregates once the array has ended


def render(plan: Plan) -> Executors:
    return Executors(executor(plan.launch), executor(plan.after) if plan.after is not None else None)


def executor(launch: Launch, preview: bool = False) -> submitit.Executor:
    """`preview`: a SlurmExecutor that exists without SLURM, to print its script."""
    python = job_python(launch)
    requeues = launch.profile.max_requeues
    if launch.executor == "slurm":
        cls = _PreviewSlurmExecutor if preview else TrainingStepExecutor if launch.vllm_server else SlurmExecutor
        ex: submitit.Executor = cls(folder=launch.folder, max_num_timeout=requeues, python=python)
        if isinstance(ex, TrainingStepExecutor):
            ex.tasks = launch.tasks
        params = slurm_parameters(launch)
    else:
        ex = submitit.LocalExecutor(folder=launch.folder, max_num_timeout=requeues, python=python)
        params = local_parameters(launch)
    try:
        ex.update_parameters(**params)
    except ValueError as e:  # submitit lists the valid parameters
        raise PlaypenError(f"cluster profile {launch.profile.name}: {str(e).splitlines()[0]}") from None
    return ex


def job_python(launch: Launch) -> str:
    """The python command a job starts with (the image's, or this one's): playpen.submit.start, which loads the
    pickled job only once it is proven this user's, then hands over to submitit."""
    return shell_join(start_command(launch.python or [sys.executable]))


def slurm_parameters(launch: Launch) -> dict[str, Any]:
    """SlurmExecutor parameters (submitit's names); submitit writes the #SBATCH lines."""
    p, res = launch.profile, launch.resources
    params: dict[str, Any] = dict(
        job_name=launch.name, partition=p.partition, account=p.account, qos=p.qos, time=launch.time_min,
        mem=p.mem, cpus_per_task=p.cpus_per_task, constraint=p.constraint, exclude=p.exclude, nodes=res.nodes,
        ntasks_per_node=res.tasks_per_node, signal_delay_s=p.signal_delay_s, setup=setup_lines(launch),
        array_parallelism=p.array_parallelism, additional_parameters={"requeue": True, **p.sbatch},
        srun_args=list(p.srun_args) + training_step_args(launch) or None,
    )
    if res.gpus_per_node:  # the profile's typed GRES string where it has one, else --gpus-per-node
        params.update({"gres": p.gres} if p.gres else {"gpus_per_node": res.gpus_per_node})
    return {k: v for k, v in params.items() if v is not None}


def local_parameters(launch: Launch) -> dict[str, Any]:
    """No `setup`: submitit would then start the job through `sh -c`, and its job id (a pid) would be the
    shell's, which a signal does not stop. The job's variables come from `send.submission_env` instead."""
    res = launch.resources
    return dict(timeout_min=launch.time_min, tasks_per_node=res.tasks_per_node, gpus_per_node=res.gpus_per_node,
                signal_delay_s=launch.profile.signal_delay_s)


def setup_lines(launch: Launch) -> list[str]:
    """Shell lines before a SLURM job: the profile's (module loads), then the job's variables, exported; $VARS in
    values expand on the compute node (e.g. HF_HOME: /scratch/$USER/hf); then the job's vLLM server, if any."""
    return (list(launch.profile.setup) + [f'export {name}="{_dq(value)}"' for name, value in launch.exports.items()]
            + vllm_server_lines(launch))


def vllm_server_lines(launch: Launch) -> list[str]:
    """The vLLM server as a background job step on the first node; it writes its URL, and later why it ended, to
    a state file in the job folder, which the trainer reads (playpen.models.vllm_server). A requeued job starts
    a new one: the old state file goes first."""
    server = launch.vllm_server
    if server is None:
        return []
    from playpen.models.vllm_server import STATE_ENV

    state = f"{launch.folder}/vllm-server-$SLURM_JOB_ID.json"
    python = launch.python or [sys.executable]
    command = [*python, "-u", "-m", "playpen.models.vllm_server", "--model", server.model, "--state",
               f"${STATE_ENV}", "--port", str(server.port), "--dtype", server.dtype]
    step = ["srun", "--nodes=1", "--ntasks=1", "--relative=0", f"--output={launch.folder}/%j_vllm_server.out"]
    return [f'export {STATE_ENV}="{_dq(state)}"', f'rm -f "${STATE_ENV}"',
            f"{shell_join(step)} {shell_join(command)} &"]


def training_step_args(launch: Launch) -> list[str]:
    """With a vLLM server on the first node, the training step runs on the other nodes."""
    if launch.vllm_server is None:
        return []
    return ["--relative=1", f"--nodes={launch.training_nodes}", f"--ntasks={launch.tasks}"]


class TrainingStepExecutor(SlurmExecutor):
    """A SlurmExecutor whose job has the training step's tasks (the server's node runs none): submitit then
    waits for those tasks' results only."""

    tasks = 1

    def _num_tasks(self) -> int:
        return self.tasks


def shell_join(argv: list[str]) -> str:
    """shlex.join, except that words holding a $VAR are double-quoted so the job's shell expands them."""
    return " ".join(f'"{_dq(a)}"' if "$" in a else shlex.quote(a) for a in argv)


def _dq(value: str) -> str:
    """Escape for double quotes, keeping $VAR expansion."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")


class _PreviewSlurmExecutor(SlurmExecutor):
    """A SlurmExecutor that exists without SLURM: only used to render the script for --dry-run."""

    @classmethod
    def affinity(cls) -> int:
        return 2


def sbatch_script(ex: submitit.Executor, array_size: int | None = None) -> str:
    """The exact text submitit would hand to sbatch (for a job array of `array_size` tasks if given)."""
    assert isinstance(ex, SlurmExecutor)
    if array_size and array_size > 1:  # what SlurmExecutor does for map_array/batch
        array_ex = _PreviewSlurmExecutor(folder=ex.folder, max_num_timeout=ex.max_num_timeout, python=ex.python)
        array_ex.update_parameters(**ex.parameters)
        array_ex.parameters["map_count"] = array_size
        ex = array_ex
    return ex._make_submission_file_text(ex._submitit_command_str, "dry-run")


def print_dry_run(plan: Plan) -> int:
    """What would be submitted; creates nothing (the paths are the cluster's)."""
    launch = plan.launch
    n = len(plan.array) if plan.array is not None else None
    what = f"a job array of {n} tasks" if n and launch.executor == "slurm" else f"{n or 1} job(s)"
    label = "run" if plan.kind == "train" else plan.kind
    print(f"# dry run: nothing submitted. {what}, cluster profile {launch.profile.name}, {label} dir "
          f"{plan.directory}")
    if launch.executor == "slurm":
        print(sbatch_script(executor(launch, preview=True), n))
        return 0
    python = job_python(launch)
    print("# local executor: with these variables, the job's python in one process per task")
    print("\n".join(f"{k}={v}" for k, v in launch.exports.items()))
    print(f"{python} -u -m submitit.core._submit {launch.folder}  "
          f"# tasks={launch.resources.tasks_per_node} timeout_min={launch.time_min}")
    return 0
