"""submitit executors from a cluster profile: SLURM (sbatch) or local processes, the same job either way.

The sbatch script is submitit's own (`SlurmExecutor._make_submission_file_text`); a profile only fills its
parameters, and `--dry-run` prints that same text without needing SLURM. With an image, submitit's python
command becomes `<runtime> exec [--nv] --bind ... <image> python`, so submitit's pickled-callable machinery
itself runs inside the container.
"""
from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import submitit
from submitit.slurm.slurm import SlurmExecutor

from playpen.errors import PlaypenError
from playpen.storage import check_location, make_folder, open_append
from playpen.submit.container import exec_prefix, find_runtime
from playpen.submit.profiles import ClusterProfile, job_submission_env, parse_time_min

EXECUTORS = ("slurm", "local")


@dataclass(frozen=True)
class Resources:
    nodes: int = 1
    gpus_per_node: int = 0
    one_task: bool = False  # a single process that uses all GPUs of its node (eval, sweep cells)

    @property
    def tasks_per_node(self) -> int:
        """Training: one task (rank) per GPU, one per node on CPU."""
        return 1 if self.one_task else max(self.gpus_per_node, 1)


# ---------------------------------------------------------------- which executor

def sbatch_path() -> str | None:
    return shutil.which("sbatch")


def slurm_reachable(timeout: float = 10) -> bool:
    """sbatch is on PATH and a controller answers (`sinfo` exits 0)."""
    if sbatch_path() is None or shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolve_executor(requested: str | None) -> str:
    """--executor slurm|local; without it SLURM when a controller answers, else local processes."""
    if requested in (None, "auto"):
        return "slurm" if slurm_reachable() else "local"
    if requested not in EXECUTORS:
        raise PlaypenError(f"unknown executor {requested!r}; use one of: {', '.join(EXECUTORS)}")
    if requested == "slurm":
        if sbatch_path() is None or shutil.which("srun") is None:
            raise PlaypenError("--executor slurm, but there is no sbatch/srun on PATH; run on a SLURM login node, "
                               "use --executor local, or start the local dev cluster (make devcluster)")
        if not slurm_reachable():
            raise PlaypenError("--executor slurm, but no SLURM controller answers `sinfo` (is SLURM_CONF set? "
                               "for the dev cluster: eval \"$(bash slurm/devcluster.sh env)\"); "
                               "or use --executor local")
    return requested


# ---------------------------------------------------------------- checks before submission

@dataclass(frozen=True)
class PartitionLimits:
    name: str
    max_nodes: int | None  # MaxNodes, capped by the nodes it has
    max_time_min: int | None  # MaxTime; None: UNLIMITED


def partition_limits(partition: str | None) -> PartitionLimits | None:
    """What one job may get in `partition` (None: the default partition), from scontrol."""
    name = partition
    if name is None:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=10).stdout
        defaults = [p.rstrip("*") for p in out.split() if p.endswith("*")]
        if not defaults:
            return None
        name = defaults[0]
    proc = subprocess.run(["scontrol", "show", "partition", name], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise PlaypenError(f"partition {name!r} does not exist on this cluster "
                           f"({proc.stderr.strip() or proc.stdout.strip()}); see `sinfo -s`")
    fields = dict(re.findall(r"(\w+)=(\S+)", proc.stdout))
    nodes = [int(fields[k]) for k in ("MaxNodes", "TotalNodes") if fields.get(k, "").isdigit()]
    max_time = fields.get("MaxTime", "UNLIMITED")
    try:
        time_min = None if max_time in ("UNLIMITED", "INFINITE") else parse_time_min(max_time, "MaxTime")
    except PlaypenError:
        time_min = None
    return PartitionLimits(name, min(nodes) if nodes else None, time_min)


def check_resources(kind: str, profile: ClusterProfile, res: Resources, ask_slurm: bool = True) -> None:
    """The resources asked for against the profile and the executor; `ask_slurm`: against the partition's limits
    too (scontrol; a dry run may be rendered where no SLURM answers)."""
    if res.nodes < 1 or res.gpus_per_node < 0:
        raise PlaypenError(f"--nodes must be ≥ 1 and --gpus-per-node ≥ 0 (got {res.nodes}, {res.gpus_per_node})")
    if profile.max_nodes is not None and res.nodes > profile.max_nodes:
        raise PlaypenError(f"--nodes {res.nodes} is above the cluster profile {profile.name}'s "
                           f"max_nodes={profile.max_nodes}")
    if kind == "local" and res.nodes > 1:
        raise PlaypenError(f"--nodes {res.nodes} needs SLURM: the local executor runs on this machine only "
                           f"(use --executor slurm, or --gpus-per-node for several processes)")
    if kind == "slurm" and ask_slurm:
        limits = partition_limits(profile.partition)
        if limits is None:
            return
        where = profile.partition or f"{limits.name} (the default)"
        if limits.max_nodes is not None and res.nodes > limits.max_nodes:
            raise PlaypenError(f"--nodes {res.nodes} is above what partition {where} allows "
                               f"({limits.max_nodes} nodes, from scontrol)")
        if limits.max_time_min is not None and profile.time_min > limits.max_time_min:
            raise PlaypenError(f"cluster profile {profile.name}: time {profile.time_min} min is above partition "
                               f"{where}'s MaxTime ({limits.max_time_min} min); lower `time` in the profile")


def check_container(profile: ClusterProfile) -> ClusterProfile:
    """The image file and a runtime binary must exist where the job is submitted from (the login node).
    Where the profile's runtime is missing but the other one is there (singularity on older clusters), that
    one is used: both take the same `exec --nv --bind` arguments."""
    image = profile.container.image
    if image is None:
        return profile
    if not Path(image).expanduser().is_file():
        raise PlaypenError(f"container image {image} not found (build it with `make image`, or pass "
                           f"--container none to run without one)")
    if shutil.which(profile.container.runtime) is None:
        found = find_runtime()
        if found is None:
            raise PlaypenError("container image given, but neither apptainer nor singularity is on PATH "
                               "(module load apptainer? or --container none)")
        return replace(profile, container=replace(profile.container, runtime=found))
    return profile


# ---------------------------------------------------------------- what runs in the job

def container_binds(profile: ClusterProfile, storage_root: Path) -> list[str]:
    binds = [str(storage_root)] + ([profile.scratch] if profile.scratch else []) + list(profile.container.binds)
    return list(dict.fromkeys(binds))


def python_command(profile: ClusterProfile, storage_root: Path, gpus: bool, local: bool = False) -> str | None:
    """The command submitit runs its job module with: None (this venv's python) or the container's python.

    No --cleanenv: the job's variables (SLURM_*, the profile's exports, the rendezvous) reach the image, whose
    %environment keeps values set on the host. A $VAR in a bind expands on the compute node (the local
    executor runs the command without a shell: there it is expanded now)."""
    c = profile.container
    if c.image is None:
        return None
    binds = container_binds(profile, storage_root)
    if local:
        binds = [os.path.expandvars(b) for b in binds]
    try:
        prefix = exec_prefix(c.image, binds, gpus, runtime=c.runtime)
    except ValueError as e:
        raise PlaypenError(f"cluster profile {profile.name}: container: {e}") from None
    return shell_join([*prefix, c.python])


def shell_join(argv: list[str]) -> str:
    """shlex.join, except that words holding a $VAR are double-quoted so the job's shell expands them."""
    return " ".join(f'"{_dq(a)}"' if "$" in a else shlex.quote(a) for a in argv)


def job_exports(profile: ClusterProfile, storage_root: Path) -> dict[str, str]:
    """Variables every job gets: the storage root and the profile's env/nccl (values may use $VARS)."""
    env = {"PLAYPEN_STORAGE": str(storage_root), **profile.job_env()}
    for name in env:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise PlaypenError(f"cluster profile {profile.name}: {name!r} is not a valid environment variable name")
    return {k: str(v) for k, v in env.items()}


def setup_lines(profile: ClusterProfile, storage_root: Path) -> list[str]:
    """Shell lines before a SLURM job: the profile's (module loads), then its variables, exported; $VARS in
    values expand on the compute node (e.g. HF_HOME: /scratch/$USER/hf)."""
    exports = job_exports(profile, storage_root)
    return list(profile.setup) + [f'export {name}="{_dq(value)}"' for name, value in exports.items()]


def _dq(value: str) -> str:
    """Escape for double quotes, keeping $VAR expansion."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")


def slurm_parameters(profile: ClusterProfile, res: Resources, job_name: str, storage_root: Path) -> dict[str, Any]:
    """SlurmExecutor parameters (submitit's names); submitit validates them and writes the #SBATCH lines."""
    p = profile
    params: dict[str, Any] = dict(
        job_name=job_name, partition=p.partition, account=p.account, qos=p.qos, time=p.time_min, mem=p.mem,
        cpus_per_task=p.cpus_per_task, constraint=p.constraint, exclude=p.exclude, nodes=res.nodes,
        ntasks_per_node=res.tasks_per_node, signal_delay_s=p.signal_delay_s,
        setup=setup_lines(p, storage_root), array_parallelism=p.array_parallelism,
        additional_parameters={"requeue": True, **p.sbatch}, srun_args=list(p.srun_args) or None,
    )
    if res.gpus_per_node:  # the profile's typed GRES string where it has one, else --gpus-per-node
        params.update({"gres": p.gres} if p.gres else {"gpus_per_node": res.gpus_per_node})
    return {k: v for k, v in params.items() if v is not None}


def local_parameters(profile: ClusterProfile, res: Resources) -> dict[str, Any]:
    """No `setup`: submitit would then start the job through `sh -c`, and its job id (a pid) would be the
    shell's, which a signal does not stop. The profile's variables come from `submission_env` instead."""
    return dict(timeout_min=profile.time_min, tasks_per_node=res.tasks_per_node, gpus_per_node=res.gpus_per_node,
                signal_delay_s=profile.signal_delay_s)


class _PreviewSlurmExecutor(SlurmExecutor):
    """A SlurmExecutor that exists without SLURM: only used to render the script for --dry-run."""

    @classmethod
    def affinity(cls) -> int:
        return 2


def make_executor(kind: str, folder: Path, profile: ClusterProfile, res: Resources, job_name: str,
                  storage_root: Path, preview: bool = False) -> submitit.Executor:
    # the last gate before a script is written: every path in it was checked where it was read; this is the
    # check that no new source of a path skipped that (#SBATCH lines honour no quoting)
    check_location(str(folder), "job log folder")
    check_location(str(storage_root), "storage_root")
    python = python_command(profile, storage_root, gpus=res.gpus_per_node > 0, local=kind == "local")
    if kind == "slurm":
        cls = _PreviewSlurmExecutor if preview else SlurmExecutor
        ex: submitit.Executor = cls(folder=folder, max_num_timeout=profile.max_requeues, python=python)
        params = slurm_parameters(profile, res, job_name, storage_root)
    else:
        ex = submitit.LocalExecutor(folder=folder, max_num_timeout=profile.max_requeues, python=python)
        params = local_parameters(profile, res)
    try:
        ex.update_parameters(**params)
    except ValueError as e:  # submitit lists the valid parameters
        raise PlaypenError(f"cluster profile {profile.name}: {str(e).splitlines()[0]}") from None
    return ex


def sbatch_script(ex: submitit.Executor, array_size: int | None = None) -> str:
    """The exact text submitit would hand to sbatch (for a job array of `array_size` tasks if given)."""
    assert isinstance(ex, SlurmExecutor)
    if array_size and array_size > 1:  # what SlurmExecutor does for map_array/batch
        array_ex = _PreviewSlurmExecutor(folder=ex.folder, max_num_timeout=ex.max_num_timeout, python=ex.python)
        array_ex.update_parameters(**ex.parameters)
        array_ex.parameters["map_count"] = array_size
        ex = array_ex
    return ex._make_submission_file_text(ex._submitit_command_str, "dry-run")


@contextlib.contextmanager
def submission_env(profile: ClusterProfile, kind: str = "slurm", storage_root: Path | None = None,
                   output: Path | None = None) -> Iterator[None]:
    """While submitting, the process environment holds only what a job may inherit (sbatch exports it all;
    the local executor copies it): no SLURM_*/SBATCH_* of the submitting shell, no secrets.

    Local jobs also get the profile's variables here (expanded now), and `output` (a file) replaces the
    stdout/stderr that the job's controller process would otherwise inherit: a job running in the
    background must not hold the submitting terminal's pipe open (`out=$(python -m playpen.submit ...)`)."""
    saved = dict(os.environ)
    clean = job_submission_env(saved, profile)
    if kind == "local" and storage_root is not None:
        clean.update({k: os.path.expandvars(v) for k, v in job_exports(profile, storage_root).items()})
    os.environ.clear()
    os.environ.update(clean)
    try:
        with contextlib.ExitStack() as stack:
            if kind == "local" and output is not None:
                stack.enter_context(_redirected_output(output))
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _redirected_output(path: Path) -> Iterator[None]:
    sys.stdout.flush()
    sys.stderr.flush()
    make_folder(path.parent, "job log folder")
    fd = open_append(path, "job log")
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
