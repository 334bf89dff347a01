"""`playpen submit` (= `python -m playpen.submit`): send a training, eval or sweep job to SLURM (or run it as local
processes).

    python -m playpen.submit {sft,dpo,grpo} [--config configs/grpo/demo.yaml] [--nodes N] [--gpus-per-node G]
        [--cluster PROFILE] [--executor slurm|local] [--container IMAGE.sif|none] [--dry-run] [--wait] [key=value ...]
    python -m playpen.submit eval --config EVAL.yaml ...       python -m playpen.submit sweep --config SWEEP.yaml ...
    python -m playpen.submit tournament --config configs/debate/tournament_tiny.yaml ...   (one array task per match)
    python -m playpen.submit status RUN_OR_SWEEP_DIR [-n LINES]
    python -m playpen.submit logs RUN_OR_SWEEP_DIR [--err] [--task N] [-f]

Without --config each command submits its embedded default (DEFAULT_CONFIGS, on playpen-tiny) and says so.
Every check (profile, executor, nodes, image, storage, config) runs before anything is submitted; a failed one
prints one line `playpen: error: ...` and exits 2 (playpen.cli is the one place that does).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from playpen.config import load_config
from playpen.errors import PlaypenError
from playpen.storage import (DEFAULT_STORAGE, STORAGE_ENV, RunDir, check_location, not_a_link, path_under,
                             resolve_storage_root, slug)
from playpen.submit import executor as exe
from playpen.submit import jobs, status
from playpen.submit.profiles import ClusterProfile, load_profile, with_container

TRAIN_METHODS = ("sft", "dpo", "grpo", "rloo", "reward")
SUBMIT_COMMANDS = (*TRAIN_METHODS, "eval", "meter", "sweep", "tournament")
POLL_S = 1.0
PROGRESS_EVERY_S = 10.0  # a progress line at most this often while waiting


CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# with no --config: the embedded default of each command, on playpen-tiny (the demo's GRPO config for grpo)
DEFAULT_CONFIGS = {"sft": "sft/tiny_lora.yaml", "dpo": "dpo/tiny_rollouts.yaml", "grpo": "grpo/demo.yaml",
                   "rloo": "grpo/tiny_reward_model.yaml", "reward": "reward/tiny_sentiment.yaml",
                   "eval": "eval/tiny.yaml", "meter": "meter/tiny_vader.yaml", "sweep": "sweeps/tiny.yaml",
                   "tournament": "debate/tournament_tiny.yaml"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`playpen submit COMMAND ...` (also `python -m playpen.submit COMMAND ...`)."""
    commands = parser.add_subparsers(dest="submit_command", required=True, metavar="COMMAND")
    helps = {"sft": "supervised fine-tuning", "dpo": "direct preference optimisation",
             "grpo": "GRPO on games", "rloo": "RLOO on prompts against a reward model",
             "reward": "a reward model on preference pairs",
             "eval": "play and score games with a model", "meter": "score a model's generations with a classifier",
             "sweep": "an eval sweep as one job array",
             "tournament": "a debate/consultancy tournament as one job array (a task per match)"}
    for name in SUBMIT_COMMANDS:
        p = commands.add_parser(name, help=helps[name])
        p.add_argument("--config", default=None,
                       help=f"experiment YAML (default: configs/{DEFAULT_CONFIGS[name]}, on playpen-tiny)")
        p.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
        p.add_argument("--gpus-per-node", type=int, default=None,
                       help="GPUs per node, one task each (default: the profile's gpus_per_node)")
        p.add_argument("--cluster", default=None,
                       help="cluster profile name or YAML file (default: $PLAYPEN_CLUSTER or local)")
        p.add_argument("--executor", choices=exe.EXECUTORS, default=None,
                       help="default: slurm when a SLURM controller answers, else local")
        p.add_argument("--container", default=None, metavar="IMAGE.sif|none",
                       help="run inside this image (default: the profile's), none: without one")
        p.add_argument("--dry-run", action="store_true", help="print the sbatch script, submit nothing")
        p.add_argument("--wait", action="store_true",
                       help="block until the job ends, showing its progress, and print its result")
        p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides")
    st = commands.add_parser("status", help="state, requeues, progress and log tail of a run or sweep directory")
    st.add_argument("path")
    st.add_argument("-n", "--lines", type=int, default=10, help="log lines to show (default 10)")
    lg = commands.add_parser("logs", help="print (or follow) a job's log")
    lg.add_argument("path")
    lg.add_argument("--err", action="store_true", help="stderr instead of stdout")
    lg.add_argument("--task", type=int, default=0, help="task (rank) whose log to show")
    lg.add_argument("--job", default=None, help="job id (default: the latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (tail -f)")


def run(args: argparse.Namespace) -> int:
    if args.submit_command == "status":
        print(status.render_status(args.path, args.lines))
        return 0
    if args.submit_command == "logs":
        return show_logs(args)
    args.command = args.submit_command
    return submit(args)


def main(argv: list[str] | None = None) -> int:
    """`python -m playpen.submit ...` is `playpen submit ...`: one parser, one error boundary (playpen.cli)."""
    from playpen.cli import main as playpen_main

    return playpen_main(["submit", *(sys.argv[1:] if argv is None else argv)])


def default_config(command: str) -> str:
    path = CONFIGS / DEFAULT_CONFIGS[command]
    if not path.is_file():
        raise PlaypenError(f"no --config given and the default {path} is not there (an installed package has no "
                           f"configs/); pass --config FILE")
    print(f"playpen: no --config: submitting the default {path}", file=sys.stderr, flush=True)
    return str(path)


# ---------------------------------------------------------------- submit

@dataclass
class Plan:
    """What one submission sends: the callable(s), where logs and results go."""

    kind: str  # train | eval | meter | sweep | tournament
    directory: Path  # run dir, eval results dir, sweep or tournament dir
    storage_root: Path
    job: jobs.PlaypenJob
    array: list[list] | None = None  # sweep/tournament: the cells (matches) of each job (one job per entry)
    aggregate: tuple[Callable, Any] | None = None  # after the array: on SLURM a dependent job, with --wait here
    report: Callable[[], str] | None = None  # what --wait prints at the end


def storage_root_for(profile: ClusterProfile, configured: str | None, check: bool) -> Path:
    """The config's storage_root, else the profile's, else $PLAYPEN_STORAGE or ./runs. A real submission
    creates it and checks that it is writable; a dry run only names it (it is the cluster's path)."""
    root = configured or profile.storage_root
    if check:
        return resolve_storage_root(root)
    root = check_location(str(root or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE), "storage_root")
    return Path(root).expanduser().absolute()


def submit(args: argparse.Namespace) -> int:
    """Check everything, plan the job(s), then submit (or print the script for --dry-run)."""
    profile = with_container(load_profile(args.cluster), args.container)
    kind = (args.executor or "slurm") if args.dry_run else exe.resolve_executor(args.executor)
    gpus = profile.gpus_per_node if args.gpus_per_node is None else args.gpus_per_node
    res = exe.Resources(nodes=args.nodes, gpus_per_node=gpus, one_task=args.command not in TRAIN_METHODS)
    exe.check_resources(kind, profile, res, ask_slurm=not args.dry_run)
    if not args.dry_run:
        profile = exe.check_container(profile)
    config = str(Path(args.config).expanduser().absolute()) if args.config else default_config(args.command)
    if args.command in TRAIN_METHODS:
        plan = plan_train(args, profile, config, res)
    elif args.command == "eval":
        plan = plan_eval(args, profile, config, res)
    elif args.command == "meter":
        plan = plan_meter(args, profile, config, res)
    else:
        plan = (plan_sweep if args.command == "sweep" else plan_tournament)(args, profile, config, res, kind)
        if plan is None:
            return 0
    stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    folder = status.log_dir(plan.directory) / "submitit" / stamp  # fresh per submission: job ids (local: pids) recur
    if args.dry_run:
        if profile.container.image and not Path(profile.container.image).expanduser().is_file():
            # the script may be meant for another machine, where the image is: print it, but say so
            print(f"playpen: warning: container image {profile.container.image} not found here; the script "
                  f"names it (build it with `make image`, or pass --container none)", file=sys.stderr, flush=True)
        return print_dry_run(kind, folder, profile, res, plan, f"playpen-{args.command}")
    ex = exe.make_executor(kind, folder, profile, res, f"playpen-{args.command}", plan.storage_root)
    if plan.kind == "train":
        refuse_concurrent(plan.directory)
    sub, submitted = send(args, kind, profile, res, plan, ex)
    print_submitted(sub, res)
    if not args.wait:
        return 0
    code = wait(sub, submitted)
    if plan.aggregate is not None:
        plan.aggregate[0](plan.aggregate[1])
    if plan.report is not None:
        print(plan.report())
    return code


def send(args: argparse.Namespace, kind: str, profile: ClusterProfile, res: exe.Resources, plan: Plan,
         ex) -> tuple[status.Submission, list]:
    """Submit from a clean environment and record the submission next to the results."""
    folder = ex.folder
    folder.mkdir(parents=True, exist_ok=True)
    after = []
    with exe.submission_env(profile, kind, plan.storage_root, folder / "local-controller.log"):
        if plan.array is None:
            submitted = [ex.submit(plan.job)]
        elif kind == "slurm":  # one job array: one sbatch for all cells
            submitted = ex.map_array(plan.job, plan.array)
        else:  # local: `array_parallelism` worker processes share the cells
            submitted = [ex.submit(plan.job, cells) for cells in plan.array]
        if plan.aggregate is not None and kind == "slurm":  # aggregate once the whole array has ended
            agg = exe.make_executor(kind, folder, profile, exe.Resources(), f"playpen-{args.command}-aggregate",
                                    plan.storage_root)
            agg.update_parameters(dependency=f"afterany:{submitted[0].job_id.split('_')[0]}")
            after.append(agg.submit(*plan.aggregate).job_id)
    sub = status.Submission(kind=plan.kind, what=args.command, executor=kind, profile=profile.name,
                            job_ids=[j.job_id for j in submitted], folder=str(folder), directory=str(plan.directory),
                            tasks=1 if plan.array is not None else res.nodes * res.tasks_per_node,
                            max_requeues=profile.max_requeues, argv=sys.argv[:],
                            time=time.strftime("%Y-%m-%dT%H:%M:%S"), after=after)
    status.record_submission(sub)
    return sub, submitted


def plan_train(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    """The trainer's own config class checks keys and types now; the run id is pinned so the job, its
    requeues and a resubmission of the same command all use one run dir (the trainer's default id)."""
    from playpen.train.runner import check_config, load_recipe, run_id_of

    recipe = load_recipe(args.command)
    cfg = load_config(recipe.Config, config, list(args.overrides))
    check_config(recipe, cfg, config)  # trainer values, key.json: refused now, not after the job started
    from playpen.games.registry import resolve_game
    from playpen.registry import resolve_model

    if "/" not in cfg.model:  # a registry name (a folder may exist on the cluster only); its weights load in the job
        resolve_model(cfg.model)
    if getattr(cfg, "game", None):  # (data files are read by the job: they may exist on the cluster only)
        resolve_game(cfg.game)
    run_id = run_id_of(args.command, cfg)
    root = storage_root_for(profile, cfg.storage_root, check=not args.dry_run)
    run_dir = RunDir.for_experiment(root, cfg.experiment, run_id).path if not args.dry_run else \
        path_under(root, cfg.experiment, run_id, what="run folder")
    job = jobs.TrainJob(args.command, config, list(args.overrides), run_id, str(status.log_dir(run_dir)),
                        profile.max_requeues, use_gpus=res.gpus_per_node > 0)
    return Plan("train", run_dir, root, job)


def plan_eval(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    if res.nodes > 1:
        raise PlaypenError("eval runs on one node; drop --nodes (use a sweep to spread models over nodes)")
    from playpen.models.specs import resolve_eval_model
    from playpen.games.registry import select_games

    spec = load_config(jobs.EvalSpec, config, list(args.overrides))
    try:  # the model and games now, as a sweep's are, not when the job starts
        resolve_eval_model(spec.model)
        select_games(spec.games, spec.suite)
    except PlaypenError as e:
        raise PlaypenError(f"{config}: {e}") from None
    root = storage_root_for(profile, spec.storage_root, check=not args.dry_run)
    safe = slug(Path(spec.model).name)
    results = not_a_link(Path(spec.results_dir).expanduser().absolute(), "results_dir") if spec.results_dir else \
        path_under(root, "eval", f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}", what="results folder")
    job = jobs.EvalJob(spec, str(results), str(status.log_dir(results)), profile.max_requeues,
                       use_gpus=res.gpus_per_node > 0)
    return Plan("eval", results, root, job)


def plan_meter(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources) -> Plan:
    """`playpen meter` with the YAML's keys as its flags; checked now by the command's own parser and checks."""
    from playpen.config import load_yaml, merge, parse_overrides
    from playpen.reward.meter import _check, parse_config

    if res.nodes > 1:
        raise PlaypenError("meter runs on one node; drop --nodes")
    settings = merge(load_yaml(config), parse_overrides(list(args.overrides)))
    root = storage_root_for(profile, settings.pop("storage_root", None), check=not args.dry_run)
    prompts = Path(str(settings.get("prompts", ""))).expanduser()
    for candidate in (prompts, CONFIGS.parent / prompts):  # here, else the checkout's (as deepspeed: files)
        if settings.get("prompts") and candidate.is_file():
            settings["prompts"] = str(candidate.absolute())  # the job may start elsewhere
            break
    safe = slug(Path(str(settings.get("model", ""))).name)
    settings["output"] = str(Path(settings["output"]).expanduser().absolute()) if settings.get("output") else \
        str(path_under(root, "meter", f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}", what="meter folder"))
    _check(parse_config(settings, config))  # prompts, models and the classifier: before anything is submitted
    job = jobs.MeterJob(settings, str(status.log_dir(Path(settings["output"]))), profile.max_requeues,
                        use_gpus=res.gpus_per_node > 0)
    return Plan("meter", Path(settings["output"]), root, job)


def plan_sweep(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources,
               kind: str) -> Plan | None:
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
        print(f"sweep {sweep.config.name}: all {len(sweep.cells)} cells are done; nothing submitted "
              f"(aggregate refreshed in {sweep.dir})")
        return None
    workers = 1 if kind == "slurm" else max(1, min(profile.array_parallelism, len(cells)))
    array = [[c] for c in cells] if kind == "slurm" else [cells[i::workers] for i in range(workers)]
    job = jobs.SweepCellsJob(str(sweep.dir), str(status.log_dir(sweep.dir)), profile.max_requeues,
                             use_gpus=res.gpus_per_node > 0, aggregate=kind == "local")
    return Plan("sweep", sweep.dir, root, job, array, aggregate=(jobs.aggregate_sweep, str(sweep.dir)),
                report=lambda: sweep_mod.format_status(sweep_mod.status(sweep.dir)))


def plan_tournament(args: argparse.Namespace, profile: ClusterProfile, config: str, res: exe.Resources,
                    kind: str) -> Plan | None:
    """The matches not yet played (every model and key checked first): one array task each on SLURM; on the
    local executor `array_parallelism` workers share them. A dependent job writes the table and heatmap."""
    from dataclasses import asdict

    from playpen.games.debate import tournament

    if res.nodes > 1:
        raise PlaypenError("tournament matches run on one node each; drop --nodes")
    cfg = load_config(tournament.TournamentConfig, config, list(args.overrides))
    tournament.check(cfg, config)
    root = storage_root_for(profile, None, check=not args.dry_run)
    cfg.output_dir = str(Path(cfg.output_dir).expanduser().absolute())  # jobs run in another working directory
    folder = tournament.tournament_dir(cfg)
    seatings = [list(s) for s in (tournament.matches(cfg) if args.dry_run else tournament.pending_matches(cfg))]
    if not seatings:
        tournament.aggregate(cfg)
        print(f"tournament {cfg.name}: all {len(tournament.matches(cfg))} matches are played; nothing submitted "
              f"(results refreshed in {folder})")
        return None
    workers = 1 if kind == "slurm" else max(1, min(profile.array_parallelism, len(seatings)))
    array = [[s] for s in seatings] if kind == "slurm" else [seatings[i::workers] for i in range(workers)]
    job = jobs.TournamentMatchesJob(asdict(cfg), str(status.log_dir(folder)), profile.max_requeues,
                                    use_gpus=res.gpus_per_node > 0, aggregate=kind == "local")
    return Plan("tournament", folder, root, job, array, aggregate=(jobs.aggregate_tournament, asdict(cfg)),
                report=lambda: (folder / "results.md").read_text())


def refuse_concurrent(run_dir: Path) -> None:
    """Two jobs training into one run dir would corrupt it: refuse while an earlier one is queued or running."""
    try:
        previous = status.load_submissions(run_dir)[-1]
    except PlaypenError:
        return
    active = {j: s for j, (s, _) in status.job_states(previous).items() if s in status.ACTIVE_STATES}
    if active:
        job_id, state = next(iter(active.items()))
        raise PlaypenError(f"run dir {run_dir} already has job {job_id} {state}; wait for it, cancel it "
                           f"({previous.cancel_command()}), or pass run_id=<new id> for a separate run")


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


# ---------------------------------------------------------------- logs

def show_logs(args: argparse.Namespace) -> int:
    sub = status.load_submissions(Path(args.path).expanduser().absolute())[-1]
    job_id = args.job or sub.job_ids[-1]
    stdout, stderr = sub.log_paths(job_id, args.task)
    path = stderr if args.err else stdout
    if args.follow:
        os.execvp("tail", ["tail", "-n", "+1", "-F", str(path)])
    if not path.is_file():
        raise PlaypenError(f"no log yet at {path} (job {job_id} may still be pending)")
    sys.stdout.write(path.read_text(errors="replace"))
    return 0
