"""Step 1 of `playpen submit`: read and check everything a submission needs, once, into one Plan.

Every value that becomes a path or a line of the job script is checked here, where it is read: the cluster
profile (profiles.py), the executor and the resources against the profile and the partition, the image and its
runtime, the config (by the command's own checks), the storage root, the folders, the job's variables and the
command submitit starts the job's python with. render.py turns a Plan into submitit executors without checking
anything again. Nothing here submits, and nothing is written beyond creating the storage root (a dry run
creates nothing).
"""
from __future__ import annotations

import argparse
import os
import secrets
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from playpen.config import config_file, find_config, load_config, packaged_configs
from playpen.errors import PlaypenError
from playpen.storage import (DEFAULT_STORAGE, STORAGE_ENV, RunDir, absolute_location, not_a_link, path_under,
                             resolve_storage_root, slug, slug_joined, timestamp)
from playpen.submit import jobs
from playpen.submit.jobs import LOGS
from playpen.submit.container import exec_prefix, find_runtime
from playpen.submit.profiles import CONTROL, ClusterProfile, load_profile, parse_time_min, with_container
from playpen.submit.watch import ACTIVE_STATES, job_states, load_submissions
from playpen.train import METHODS

EXECUTORS = ("slurm", "local")
TRAIN_METHODS = tuple(METHODS)  # the one list: playpen.train.METHODS
SUBMIT_COMMANDS = (*TRAIN_METHODS, "eval", "meter", "sweep", "tournament")
DOCTOR_TIME_MIN = 15  # a doctor job's time limit at most: the scheduler backfills it sooner
# with no --config: the embedded default of each command, on playpen-tiny (the demo's GRPO config for grpo)
DEFAULT_CONFIGS = {"sft": "sft/tiny_lora.yaml", "dpo": "dpo/tiny_rollouts.yaml", "grpo": "grpo/demo.yaml",
                   "rloo": "grpo/tiny_reward_model.yaml", "reward": "reward/tiny_sentiment.yaml",
                   "eval": "eval/tiny.yaml", "meter": "meter/tiny_vader.yaml", "sweep": "sweeps/tiny.yaml",
                   "tournament": "debate/tournament_tiny.yaml", "rft": "rft/tiny_wordle.yaml",
                   "distill": "distill/tiny_wordle.yaml"}


@dataclass(frozen=True)
class Resources:
    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: int = 1  # training: one task (rank) per GPU, one per node on CPU; eval, sweep cells: one


@dataclass(frozen=True)
class VLLMServer:
    """use_vllm with vllm_mode server and no URL given: the job's own vLLM server, on its first node (TRL's server
    placement); training runs on the other nodes (render.py writes both job steps)."""

    model: str  # the trainer's model: a registry name or a folder (checked: one shell word)
    port: int  # 0: a free one
    dtype: str  # bfloat16 on GPUs, float32 on CPU


@dataclass(frozen=True)
class Launch:
    """How one job starts, every value checked: what render.py turns into a submitit executor."""

    executor: str  # slurm | local
    name: str  # the job's name (playpen-<command>)
    folder: Path  # submitit's folder (job logs, pickles): <directory>/logs/submitit/<time>-<pid>
    profile: ClusterProfile  # checked when read; its image's runtime the one found here
    time_min: int  # the profile's time limit
    resources: Resources
    python: list[str] | None  # `<runtime> exec ... <image> <python>`; None: this venv's python
    exports: dict[str, str]  # every job's variables: PLAYPEN_STORAGE, the profile's env and nccl ($VARS kept)
    vllm_server: VLLMServer | None = None  # a vLLM server on the first node, training on the others

    @property
    def training_nodes(self) -> int:
        return self.resources.nodes - (1 if self.vllm_server is not None else 0)

    @property
    def tasks(self) -> int:
        """The job's tasks, each a rank of the training (or the one task of an eval, a cell)."""
        return self.training_nodes * self.resources.tasks_per_node


@dataclass(frozen=True)
class Plan:
    """One submission, read and checked: the job, where it runs, where its results and logs go."""

    command: str  # sft ... distill, eval, meter, sweep, tournament, doctor
    kind: str  # train | eval | meter | doctor | sweep | tournament
    config: str  # the --config file, absolute ("" for doctor)
    storage_root: Path  # created and writable (a dry run: only named, it is the cluster's path)
    directory: Path  # run dir, eval results dir, meter folder, doctor folder, sweep or tournament dir
    launch: Launch
    job: jobs.PlaypenJob
    dry_run: bool = False
    array: list[list] | None = None  # sweep/tournament: the cells (matches) of each job (one job per entry)
    aggregate: tuple[Callable, Any] | None = None  # after the array: on SLURM a dependent job, with --wait here
    after: Launch | None = None  # SLURM: how the aggregating job starts


@dataclass(frozen=True)
class _Read:
    """What a command's own reader returns: its job, the folder its results go to, the storage root."""

    kind: str
    directory: Path
    storage_root: Path
    job: jobs.PlaypenJob
    array: list[list] | None = None
    aggregate: tuple[Callable, Any] | None = None
    vllm_server: VLLMServer | None = None


def read_plan(args: argparse.Namespace) -> Plan | None:
    """Every check (profile, executor, nodes, image, storage, config) before anything is submitted; None when
    there is nothing to submit (a sweep or tournament whose cells are all done)."""
    command, dry_run = args.command, args.dry_run
    profile = with_container(load_profile(args.cluster), args.container)
    if command == "doctor":  # (the signal stays before the shorter end)
        profile = replace(profile, time=min(profile.time_min, DOCTOR_TIME_MIN),
                          signal_delay_s=min(profile.signal_delay_s, DOCTOR_TIME_MIN * 30))
    time_min = profile.time_min
    executor = (args.executor or "slurm") if dry_run else resolve_executor(args.executor)
    gpus = profile.gpus_per_node if args.gpus_per_node is None else args.gpus_per_node
    res = resources(args.nodes, gpus, one_task=command not in (*TRAIN_METHODS, "doctor"))
    check_resources(executor, profile, time_min, res, ask_slurm=not dry_run)
    if not dry_run:
        profile = check_container(profile)
    config = "" if command == "doctor" else \
        str(find_config(args.config).absolute()) if args.config else default_config(command)
    if command == "doctor":
        read = read_doctor(args, profile, res)
    elif command in TRAIN_METHODS:
        read = read_train(args, profile, config, res)
    elif command == "eval":
        read = read_eval(args, profile, config, res)
    elif command == "meter":
        read = read_meter(args, profile, config, res)
    else:
        read = (read_sweep if command == "sweep" else read_tournament)(args, profile, config, res, executor)
        if read is None:
            return None
    if dry_run and profile.container.image and not Path(profile.container.image).expanduser().is_file():
        # the script may be meant for another machine, where the image is: print it, but say so
        print(f"playpen: warning: container image {profile.container.image} not found here; the script "
              f"names it (build it with `make image`, or pass --container none)", file=sys.stderr, flush=True)
    # the folders as the job script gets them, whichever command read them (the job's logs go below directory)
    for what, path in (("storage_root", read.storage_root), (f"{read.kind} folder", read.directory)):
        absolute_location(str(path), what)
    # submitit's folder, fresh per submission (job ids, and a local job's pids, recur): made of checked parts
    # (a random part: a name nobody can guess and make first; send.make_job_folder makes it, 0700)
    folder = read.directory / LOGS / "submitit" / f"{timestamp()}-{os.getpid()}-{secrets.token_hex(4)}"
    name = f"playpen-{command}"
    job_launch = replace(launch(executor, folder, profile, read.storage_root, name, res, time_min),
                         vllm_server=read.vllm_server)
    after = launch(executor, folder, profile, read.storage_root, f"{name}-aggregate", Resources(), time_min) \
        if read.aggregate is not None and executor == "slurm" else None
    plan = Plan(command, read.kind, config, read.storage_root, read.directory, job_launch, read.job, dry_run,
                read.array, read.aggregate, after)
    if plan.kind == "train" and not dry_run:
        refuse_concurrent(plan.directory)
    return plan


def default_config(command: str) -> str:
    path = packaged_configs() / DEFAULT_CONFIGS[command]
    if not path.is_file():
        raise PlaypenError(f"no --config given and the default {path} is not there (a broken install?); "
                           f"pass --config FILE")
    print(f"playpen: no --config: submitting the default {path}", file=sys.stderr, flush=True)
    return str(path)


# ---------------------------------------------------------------- which executor, what resources

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


def resources(nodes: int, gpus_per_node: int, one_task: bool = False) -> Resources:
    """`one_task`: a single process that uses all GPUs of its node (eval, sweep cells); else one per GPU."""
    return Resources(nodes, gpus_per_node, 1 if one_task else max(gpus_per_node, 1))


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


def check_resources(executor: str, profile: ClusterProfile, time_min: int, res: Resources,
                    ask_slurm: bool = True) -> None:
    """The resources asked for against the profile and the executor; `ask_slurm`: against the partition's limits
    too (scontrol; a dry run may be rendered where no SLURM answers)."""
    if res.nodes < 1 or res.gpus_per_node < 0:
        raise PlaypenError(f"--nodes must be ≥ 1 and --gpus-per-node ≥ 0 (got {res.nodes}, {res.gpus_per_node})")
    if profile.max_nodes is not None and res.nodes > profile.max_nodes:
        raise PlaypenError(f"--nodes {res.nodes} is above the cluster profile {profile.name}'s "
                           f"max_nodes={profile.max_nodes}")
    if executor == "local" and res.nodes > 1:
        raise PlaypenError(f"--nodes {res.nodes} needs SLURM: the local executor runs on this machine only "
                           f"(use --executor slurm, or --gpus-per-node for several processes)")
    if executor == "slurm" and ask_slurm:
        limits = partition_limits(profile.partition)
        if limits is None:
            return
        where = profile.partition or f"{limits.name} (the default)"
        if limits.max_nodes is not None and res.nodes > limits.max_nodes:
            raise PlaypenError(f"--nodes {res.nodes} is above what partition {where} allows "
                               f"({limits.max_nodes} nodes, from scontrol)")
        if limits.max_time_min is not None and time_min > limits.max_time_min:
            raise PlaypenError(f"cluster profile {profile.name}: time {time_min} min is above partition "
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


def refuse_concurrent(run_dir: Path) -> None:
    """Two jobs training into one run dir would corrupt it: refuse while an earlier one is queued or running (the
    run dir's last submission and its jobs' states, as `playpen submit status` reads them)."""
    try:
        previous = load_submissions(run_dir)[-1]
    except PlaypenError:
        return
    active = {j: s for j, (s, _) in job_states(previous).items() if s in ACTIVE_STATES}
    if active:
        job_id, state = next(iter(active.items()))
        raise PlaypenError(f"run dir {run_dir} already has job {job_id} {state}; wait for it, cancel it "
                           f"({previous.cancel_command()}), or pass run_id=<new id> for a separate run")


# ---------------------------------------------------------------- how a job starts

def launch(executor: str, folder: Path, profile: ClusterProfile, storage_root: Path, name: str,
           res: Resources = Resources(), time_min: int | None = None) -> Launch:
    """A job of `profile` writing its logs to `folder` (a path made of checked parts), its results under
    `storage_root` (checked where it was read): its variables and the command submitit runs its python with."""
    exports = {"PLAYPEN_STORAGE": str(storage_root), **{k: str(v) for k, v in {**profile.env, **profile.nccl}.items()}}
    return Launch(executor, name, folder, profile, profile.time_min if time_min is None else time_min, res,
                  container_python(profile, storage_root, gpus=res.gpus_per_node > 0, local=executor == "local"),
                  exports)


def container_python(profile: ClusterProfile, storage_root: Path, gpus: bool, local: bool = False) \
        -> list[str] | None:
    """The image's `<runtime> exec [--nv] --bind ... <image> <python>`, or None without an image.

    No --cleanenv: the job's variables (SLURM_*, the profile's exports, the rendezvous) reach the image, whose
    %environment keeps values set on the host. A $VAR in a bind expands on the compute node (the local
    executor runs the command without a shell: there it is expanded now)."""
    c = profile.container
    if c.image is None:
        return None
    image = os.path.expanduser(c.image)  # as the submission checked it (the script quotes it: no node expands ~)
    if CONTROL.search(image):  # ($HOME's own characters)
        raise PlaypenError(f"cluster profile {profile.name}: container.image {c.image!r} is {image!r} with ~ "
                           f"filled in, which holds a control character; give the image's path")
    binds = list(dict.fromkeys([str(storage_root)] + ([profile.scratch] if profile.scratch else [])
                               + list(c.binds)))
    if local:
        binds = [os.path.expandvars(b) for b in binds]
    try:
        return [*exec_prefix(image, binds, gpus, runtime=c.runtime), c.python]
    except ValueError as e:
        raise PlaypenError(f"cluster profile {profile.name}: container: {e}") from None


# ---------------------------------------------------------------- each command's job

def storage_root_for(profile: ClusterProfile, configured: str | None, check: bool) -> Path:
    """The config's storage_root, else the profile's, else $PLAYPEN_STORAGE or ./runs. A real submission
    creates it and checks that it is writable; a dry run only names it (it is the cluster's path)."""
    root = configured or profile.storage_root
    if check:
        return resolve_storage_root(root)
    return absolute_location(str(root or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE), "storage_root")


def read_train(args: argparse.Namespace, profile: ClusterProfile, config: str, res: Resources) -> _Read:
    """The trainer's own config class checks keys and types now; the run id is pinned so the job, its
    requeues and a resubmission of the same command all use one run dir (the trainer's default id)."""
    from playpen.train.runner import check_config, keys_help, load_recipe, run_id_of

    recipe = load_recipe(args.command)
    cfg = load_config(recipe.Config, config, list(args.overrides), keys_help=keys_help(args.command))
    check_config(recipe, cfg, config)  # trainer values, key.json: refused now, not after the job started
    from playpen.games.registry import resolve_game
    from playpen.model_registry import resolve_model

    if "/" not in cfg.model:  # a registry name (a folder may exist on the cluster only); its weights load in the job
        resolve_model(cfg.model)
    if getattr(cfg, "game", None):  # (data files are read by the job: they may exist on the cluster only)
        resolve_game(cfg.game)
    run_id = run_id_of(args.command, cfg)
    root = storage_root_for(profile, cfg.storage_root, check=not args.dry_run)
    run_dir = RunDir.under(root, cfg.experiment, run_id).path

    job = jobs.TrainJob(args.command, config, list(args.overrides), run_id, str(run_dir / LOGS),
                        profile.max_requeues, use_gpus=res.gpus_per_node > 0)
    return _Read("train", run_dir, root, job, vllm_server=vllm_server(cfg, res))


def vllm_server(cfg: Any, res: Resources) -> VLLMServer | None:
    """The job's own vLLM server, where the config asks for the server placement without a URL."""
    if not getattr(cfg, "use_vllm", False) or cfg.vllm_mode != "server" or cfg.vllm_server_base_url:
        return None
    if res.nodes < 2:
        raise PlaypenError(f"vllm_mode: server puts a vLLM server on the job's first node and trains on the others: "
                           f"submit with --nodes 2 or more (got --nodes {res.nodes}), or set vllm_server_base_url "
                           f"to a server you started, or vllm_mode: colocate")
    if not re.fullmatch(r"[\w.+/@-]+", cfg.model):
        raise PlaypenError(f"model {cfg.model!r}: the job script starts the vLLM server with it, so it must be a "
                           f"registry name or a folder without spaces or shell characters")
    return VLLMServer(cfg.model, cfg.vllm_server_port, "bfloat16" if res.gpus_per_node else "float32")


def read_eval(args: argparse.Namespace, profile: ClusterProfile, config: str, res: Resources) -> _Read:
    if res.nodes > 1:
        raise PlaypenError("eval runs on one node; drop --nodes (use a sweep to spread models over nodes)")
    from playpen.eval.partners import pair_games, resolve_partner
    from playpen.games.registry import select_games
    from playpen.models.specs import model_folder, resolve_eval_model

    spec = load_config(jobs.EvalSpec, config, list(args.overrides), keys_help="every key: `playpen submit eval --help`")
    try:  # the model and games now, as a sweep's are, not when the job starts
        model_folder(resolve_eval_model(spec.model))  # (a mapping's model_name names the results folder too)
        entries = select_games(spec.games, spec.suite)
        if spec.partner is not None:  # as `playpen eval MODEL PARTNER` and a sweep's partners: key.json, 2 seats
            pair_games(entries, resolve_partner(spec.partner), named=bool(spec.games))
    except PlaypenError as e:
        raise PlaypenError(f"{config}: {e}") from None
    root = storage_root_for(profile, spec.storage_root, check=not args.dry_run)
    # the pair in the default folder's name, as clem names the records inside (MODEL--PARTNER)
    safe = slug_joined([m["model_name"] if isinstance(m, dict) else Path(m).name
                        for m in (spec.model, spec.partner) if m is not None], "--")
    results = not_a_link(absolute_location(spec.results_dir, "results_dir"), "results_dir") if spec.results_dir else \
        path_under(root, "eval", f"{safe}-{timestamp()}", what="results folder")

    job = jobs.EvalJob(spec, str(results), str(results / LOGS), profile.max_requeues,
                       use_gpus=res.gpus_per_node > 0)
    return _Read("eval", results, root, job)


def read_meter(args: argparse.Namespace, profile: ClusterProfile, config: str, res: Resources) -> _Read:
    """`playpen meter` with the YAML's keys as its flags; checked now by the command's own parser and checks."""
    from playpen.config import load_yaml, merge, parse_overrides
    from playpen.reward.meter import check_inputs, parse_config

    if res.nodes > 1:
        raise PlaypenError("meter runs on one node; drop --nodes")
    settings = merge(load_yaml(config), parse_overrides(list(args.overrides)))
    root = storage_root_for(profile, settings.pop("storage_root", None), check=not args.dry_run)
    prompts = config_file(str(settings.get("prompts", "")))  # here, else the packaged copy (as deepspeed: files)
    if settings.get("prompts") and prompts.is_file():
        settings["prompts"] = str(prompts.absolute())  # the job may start elsewhere
    safe = slug(Path(str(settings.get("model", ""))).name)
    settings["output"] = str(absolute_location(str(settings["output"]), "output")) if settings.get("output") else \
        str(path_under(root, "meter", f"{safe}-{timestamp()}", what="meter folder"))
    check_inputs(parse_config(settings, config))  # prompts, models and the classifier: before anything is submitted

    job = jobs.MeterJob(settings, str(Path(settings["output"]) / LOGS), profile.max_requeues,
                        use_gpus=res.gpus_per_node > 0)
    return _Read("meter", Path(settings["output"]), root, job)


def read_doctor(args: argparse.Namespace, profile: ClusterProfile, res: Resources) -> _Read:
    """`playpen doctor` as a job: one task per GPU (one per node on CPU), as training runs, so the rendezvous
    and all-reduce are the ones a training job would do. The report goes to <storage_root>/doctor/<time>-job-<host>/."""
    from playpen.doctor import output_folder

    if args.overrides:
        raise PlaypenError(f"doctor takes no key=value overrides (got {' '.join(args.overrides)}); "
                           f"use --storage-root and --skip")
    root = storage_root_for(profile, args.storage_root, check=not args.dry_run)
    folder = output_folder(root, "job")

    job = jobs.DoctorJob(str(folder), str(folder / LOGS), submitted=time.time(), skip=tuple(args.skip),
                         storage_root=str(root), timeout_s=args.timeout, use_gpus=res.gpus_per_node > 0)
    return _Read("doctor", folder, root, job)


def read_sweep(args: argparse.Namespace, profile: ClusterProfile, config: str, res: Resources,
               executor: str) -> _Read | None:
    """Pending cells only (done ones are skipped): one array task each on SLURM; on the local executor
    `array_parallelism` worker processes share them."""
    from playpen.eval import sweep as sweep_mod

    if res.nodes > 1:
        raise PlaypenError("sweep cells run on one node each; drop --nodes")
    sweep = sweep_mod.load_sweep(config, list(args.overrides))
    root = storage_root_for(profile, sweep.config.storage_root, check=not args.dry_run)
    cells = sweep.cells if args.dry_run else sweep.pending_cells()
    if not cells:
        sweep_mod.aggregate(sweep.dir)
        counts = sweep_mod.status(sweep.dir)["counts"]
        state = f"all {len(sweep.cells)} cells are done" if not counts["running"] else \
            f"{counts['done']} of {len(sweep.cells)} cells are done and {counts['running']} still running " \
            f"(`playpen submit status {sweep.dir}`)"
        print(f"sweep {sweep.config.name}: {state}; nothing submitted (aggregate refreshed in {sweep.dir})")
        return None
    workers = 1 if executor == "slurm" else max(1, min(profile.array_parallelism, len(cells)))
    array = [[c] for c in cells] if executor == "slurm" else [cells[i::workers] for i in range(workers)]

    job = jobs.SweepCellsJob(str(sweep.dir), str(sweep.dir / LOGS), profile.max_requeues,
                             use_gpus=res.gpus_per_node > 0, aggregate=executor == "local")
    return _Read("sweep", sweep.dir, root, job, array, aggregate=(jobs.aggregate_sweep, str(sweep.dir)))


def read_tournament(args: argparse.Namespace, profile: ClusterProfile, config: str, res: Resources,
                    executor: str) -> _Read | None:
    """The matches not yet played (every model and key checked first): one array task each on SLURM; on the
    local executor `array_parallelism` workers share them. A dependent job writes the table and heatmap."""
    from dataclasses import asdict

    from playpen.debate_tools import tournament

    if res.nodes > 1:
        raise PlaypenError("tournament matches run on one node each; drop --nodes")
    cfg = load_config(tournament.TournamentConfig, config, list(args.overrides), keys_help=tournament.KEYS_HELP)
    tournament.check(cfg, config)
    root = storage_root_for(profile, None, check=not args.dry_run)
    cfg.output_dir = str(absolute_location(cfg.output_dir, "output_dir"))  # jobs run in another working directory
    folder = tournament.tournament_dir(cfg)
    seatings = [list(s) for s in (tournament.matches(cfg) if args.dry_run else tournament.pending_matches(cfg))]
    if not seatings:
        tournament.aggregate(cfg)
        print(f"tournament {cfg.name}: all {len(tournament.matches(cfg))} matches are played; nothing submitted "
              f"(results refreshed in {folder})")
        return None
    workers = 1 if executor == "slurm" else max(1, min(profile.array_parallelism, len(seatings)))
    array = [[s] for s in seatings] if executor == "slurm" else [seatings[i::workers] for i in range(workers)]

    job = jobs.TournamentMatchesJob(asdict(cfg), str(folder / LOGS), profile.max_requeues,
                                    use_gpus=res.gpus_per_node > 0, aggregate=executor == "local")
    return _Read("tournament", folder, root, job, array, aggregate=(jobs.aggregate_tournament, asdict(cfg)))
