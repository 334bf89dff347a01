"""The container runtime a submitted job runs behind: which of apptainer or singularity is on PATH, and the
`<runtime> exec [--nv] --bind ... --env ... <image>` prefix the job's python command is appended to.

The images themselves are defined and checked against the lockfile by playpen.containers (`make image`).
"""
from __future__ import annotations

import re
import shutil

RUNTIMES = ("apptainer", "singularity")


def exec_prefix(image: str, binds: list[str], gpus: bool, runtime: str = "apptainer",
                env: dict[str, str] | None = None) -> list[str]:
    """`apptainer exec` argv a job command is appended to.

    No --cleanenv, on purpose: submitit, torch.distributed and NCCL read SLURM_*, MASTER_ADDR etc. from the
    job's environment, which must reach the container. The image guards its own Python instead (%environment:
    PYTHONNOUSERSITE=1, PYTHONPATH unset), and `env` (--env, which wins over %environment) sets the rest.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"container runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    argv = [runtime, "exec"] + (["--nv"] if gpus else [])
    for bind in binds:
        if "," in bind or not bind:  # apptainer splits --bind on commas
            raise ValueError(f"bind {bind!r}: expected src[:dest[:opts]] without commas")
    if binds:
        argv += ["--bind", ",".join(binds)]
    for key, value in (env or {}).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or re.search(r"[,\n]", value):
            # --env splits on commas too; such values belong in an --env-file
            raise ValueError(f"env {key}={value!r}: a variable name and a value without commas or newlines")
        argv += ["--env", f"{key}={value}"]
    return argv + [image]


def find_runtime() -> str | None:
    """apptainer, else singularity (older clusters), else None."""
    return next((name for name in RUNTIMES if shutil.which(name)), None)
