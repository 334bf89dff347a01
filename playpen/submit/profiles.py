"""Cluster profiles: one typed YAML file per cluster under `configs/cluster/` (partition, account, time, caches,
container, NCCL, limits). `--cluster NAME` picks `configs/cluster/NAME.yaml` (the working directory's
`configs/cluster/` first, then playpen's packaged ones); `--cluster path/to/file.yaml` takes a file; without the flag,
$PLAYPEN_CLUSTER or `local`.
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from playpen.config import bounded, build, config_file, load_yaml, packaged_configs
from playpen.errors import PlaypenError
from playpen.storage import Location

PROFILE_ENV = "PLAYPEN_CLUSTER"
DEFAULT_PROFILE = "local"
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Values that reach the job script inside double quotes (env, nccl, scratch, the container's image, python and
# binds) may name the job's variables, $NAME or ${NAME}, and nothing else a shell evaluates: $(...), $((...)),
# ${NAME:-...} and backquotes would run on the compute node. (`setup:` lines are shell by contract.)
SHELL_VARIABLE = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})")
VARIABLES_ONLY = "a value may use $NAME or ${NAME} and nothing else a shell evaluates ($(...), $((...)), " \
                 "${NAME:-...}, `...`); put commands in setup:"
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SBATCH_OPTION = re.compile(r"[a-z][a-z0-9_-]*")  # an sbatch long option's name: one lowercase word, no `=`
RESERVED_ENV = {"PLAYPEN_STORAGE": "storage_root:"}  # variables playpen sets in every job: the profile key instead

MAX_TIME_MIN = 365 * 24 * 60  # a year: above any partition's MaxTime


@dataclass(frozen=True)
class ContainerSettings:
    """Run the job's python inside an image: `<runtime> exec [--nv] --bind <binds> <image> <python> ...`."""

    image: str | None = None  # path of the .sif on the cluster; None: run in the submitting environment
    runtime: str = "apptainer"  # or "singularity"
    binds: list[str] = field(default_factory=list)  # storage_root and scratch are added automatically
    python: str = "python"  # the interpreter inside the image


@dataclass(frozen=True)
class ClusterProfile:
    name: str = DEFAULT_PROFILE
    # sbatch resources (None: the cluster's default)
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: int | str = 60  # minutes, or SLURM's "[D-]HH:MM:SS" (at most MAX_TIME_MIN)
    mem: str | None = None  # per node, e.g. "64G"
    cpus_per_task: int | None = bounded(None, ge=1)
    gpus_per_node: int = bounded(0, ge=0)  # default for --gpus-per-node
    gres: str | None = None  # e.g. "gpu:a100:4": replaces --gpus-per-node in jobs that request GPUs
    constraint: str | None = None
    exclude: str | None = None
    sbatch: dict[str, Any] = field(default_factory=dict)  # any other #SBATCH --key=value
    srun_args: list[str] = field(default_factory=list)
    signal_delay_s: int = bounded(120, ge=0, le=MAX_TIME_MIN * 60)  # USR2 this long before the time limit: time
                                                                    # to reach a checkpoint
    # job environment
    setup: list[str] = field(default_factory=list)  # shell lines before the job starts (module load ...)
    storage_root: Location | None = None  # shared storage for run dirs; None: $PLAYPEN_STORAGE or ./runs
    scratch: str | None = None  # node-local or scratch space, bound into the container (may use $VARS)
    env: dict[str, str] = field(default_factory=dict)  # exported in the job (caches: HF_HOME, ...)
    nccl: dict[str, str] = field(default_factory=dict)  # NCCL_* settings, exported in the job
    env_keep: list[str] = field(default_factory=list)  # variables of the submitting shell a job inherits beyond
                                                        # the allow-list (INHERITED_ENV_*)
    container: ContainerSettings = field(default_factory=ContainerSettings)
    # limits
    max_nodes: int | None = bounded(None, ge=1)  # refuse --nodes above this (sinfo is asked too when SLURM is
                                                 # present); null: no limit of the profile's own
    array_parallelism: int = bounded(16, ge=1)  # sweep cells running at once (local executor: parallel workers)
    max_requeues: int = bounded(3, ge=0)  # preemptions/timeouts a job may survive before it fails

    @property
    def time_min(self) -> int:
        return parse_time_min(self.time, f"cluster profile {self.name}: time")

    def job_env(self) -> dict[str, str]:
        """Variables the profile exports in every job (values may use $VARS of the job's shell)."""
        return {**self.env, **self.nccl}


def parse_time_min(value: int | str, where: str) -> int:
    """60, "90", "02:00:00", "1-00:00:00", "30:00" → minutes (rounded up)."""
    if isinstance(value, int):
        minutes = value
    else:
        m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", value.strip())
        if not m:
            raise PlaypenError(f"{where}: {value!r} is not a time; use minutes or [D-]HH:MM:SS")
        days, a, b, c = (int(x) if x else None for x in m.groups())
        if b is None:  # "M" or "D-H"
            minutes = (days or 0) * 1440 + (a * 60 if days is not None else a)
        elif c is None:  # "MM:SS" or "D-HH:MM"
            minutes = (days * 1440 + a * 60 + b) if days is not None else a + (1 if b else 0)
        else:  # "HH:MM:SS"
            minutes = (days or 0) * 1440 + a * 60 + b + (1 if c else 0)
    if minutes <= 0:
        raise PlaypenError(f"{where}: must be positive, got {value!r}")
    if minutes > MAX_TIME_MIN:
        raise PlaypenError(f"{where}: {value!r} is more than a year; give the job's real time limit")
    return minutes


def search_dirs() -> list[Path]:
    dirs = [Path.cwd() / "configs" / "cluster", packaged_configs() / "cluster"]
    return list(dict.fromkeys(d.resolve() for d in dirs if d.is_dir()))


def available() -> list[str]:
    return sorted({p.stem for d in search_dirs() for p in d.glob("*.yaml")})


def profile_path(name: str) -> Path:
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = config_file(name)  # a file, or a shipped one by name (cluster/example_gpu)
        if not path.exists():
            raise PlaypenError(f"cluster profile file {name} not found")
        return path  # (load_profile says when it is a folder, binary or unreadable)
    for d in search_dirs():
        if (d / f"{name}.yaml").is_file():
            return d / f"{name}.yaml"
    raise PlaypenError(f"unknown cluster profile '{name}'; available: {', '.join(available()) or 'none'} "
                       f"(files in configs/cluster/)")


def load_profile(name: str | None = None) -> ClusterProfile:
    name = name or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    path = profile_path(name)
    profile = build(ClusterProfile, {"name": path.stem, **load_yaml(path, "cluster profile")}, str(path))
    profile.time_min  # noqa: B018  (checks the time format now)
    _no_control_characters(asdict(profile), str(path))
    if profile.container.runtime not in ("apptainer", "singularity"):
        raise PlaypenError(f"{path}: container.runtime must be apptainer or singularity, "
                           f"got {profile.container.runtime!r}")
    _no_shell_in_values(profile, str(path))
    _sbatch_options(profile.sbatch, f"{path}: sbatch")
    for key, value in (("container.image", profile.container.image), ("container.python", profile.container.python)):
        _not_an_option(value, f"{path}: {key}")
    if profile.signal_delay_s >= profile.time_min * 60:  # USR2 at the start: the job would requeue at once
        raise PlaypenError(f"{path}: signal_delay_s {profile.signal_delay_s} is not below the job's time limit "
                           f"({profile.time_min} min = {profile.time_min * 60} s); the signal comes that many seconds "
                           f"before the end: give a few minutes, e.g. 120")
    return profile


def _not_an_option(value: str | None, where: str) -> None:
    """The image and the python go where apptainer reads its arguments: a value starting with `-` would be read as
    one of its options (`--bind=/:/host`)."""
    if value is not None and value.startswith("-"):
        raise PlaypenError(f"{where}: {value!r} starts with '-', which the container runtime would read as an "
                           f"option; give a path (./{value} for a file named so)")


def check_variables_only(value: str, where: str) -> str:
    """`value` if the only thing a shell evaluates in it is $NAME / ${NAME} (VARIABLES_ONLY), else one line."""
    rest = SHELL_VARIABLE.sub("", value)
    if "$" in rest or "`" in rest:
        found = re.search(r"\$\(\(|\$\(|\$\{[^}]*\}?|`|\$", rest).group()
        raise PlaypenError(f"{where}: {value!r} holds {found!r}; {VARIABLES_ONLY}")
    return value


def _no_shell_in_values(profile: ClusterProfile, where: str) -> None:
    for section, values in (("env", profile.env), ("nccl", profile.nccl)):
        for name, value in values.items():
            if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
                raise PlaypenError(f"{where}: {section}: {name!r} is not an environment variable name (letters, "
                                   f"digits and _, not starting with a digit)")
            if name in RESERVED_ENV:  # (the job would write elsewhere than its plan, records and status say)
                raise PlaypenError(f"{where}: {section}: {name} is set by playpen in every job; use "
                                   f"{RESERVED_ENV[name]} in the profile instead")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise PlaypenError(f"{where}: {section}: {name}: expected a text or a number, got {value!r}")
            check_variables_only(str(value), f"{where}: {section}: {name}")
    if profile.scratch is not None:
        check_variables_only(profile.scratch, f"{where}: scratch")
    c = profile.container
    for key, value in (("image", c.image), ("python", c.python)):
        if value is not None:
            check_variables_only(value, f"{where}: container.{key}")
    for i, bind in enumerate(c.binds):
        check_variables_only(bind, f"{where}: container.binds[{i}]")


def _sbatch_options(options: dict, where: str) -> None:
    """`sbatch:` keys are option names (`{"chdir=/x --comment": y}` would write two options into one line) and
    values one scalar each (null would be written as the word None)."""
    for key, value in options.items():
        if not isinstance(key, str) or not SBATCH_OPTION.fullmatch(key):
            raise PlaypenError(f"{where}: {key!r} is not an sbatch option name (a lowercase word such as "
                               f"mail-type, without '--', '=' or blanks)")
        if value is None or value is False:
            raise PlaypenError(f"{where}: {key}: {value!r} is not a value; give one (true for a flag) or remove "
                               f"the key")
        if not isinstance(value, (str, int, float)):
            raise PlaypenError(f"{where}: {key}: expected one value (text, a number or true), got {value!r}")


def _no_control_characters(node: Any, where: str) -> None:
    """Every value of a profile reaches the sbatch script (#SBATCH lines, setup, exports, srun): a newline or other
    control character there would write lines of its own."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        at = f"{where}: {key}" if isinstance(node, dict) else f"{where}[{key}]"
        if isinstance(key, str) and CONTROL.search(key) or isinstance(value, str) and CONTROL.search(value):
            raise PlaypenError(f"{at}: {value!r} contains a control character (newline, tab, ...); a job script "
                               f"takes it verbatim: write it on one line")
        _no_control_characters(value, at)


def with_container(profile: ClusterProfile, image: str | None) -> ClusterProfile:
    """`--container IMAGE` replaces the profile's image; `--container none` runs without one."""
    if image is None:
        return profile
    if CONTROL.search(image):  # it goes into the job script's srun line
        raise PlaypenError(f"--container {image!r} contains a control character (newline, tab, ...)")
    check_variables_only(image, "--container")
    _not_an_option(image, "--container")
    return replace(profile, container=replace(profile.container, image=None if image == "none" else image))
