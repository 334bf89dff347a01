"""`playpen submit` (= `python -m playpen.submit`): send a training, eval or sweep job to SLURM (or run it as local
processes).

    python -m playpen.submit {sft,dpo,grpo} [--config grpo/demo] [--nodes N] [--gpus-per-node G]
        [--cluster PROFILE] [--executor slurm|local] [--container IMAGE.sif|none] [--dry-run] [--wait] [key=value ...]
    python -m playpen.submit eval --config EVAL.yaml ...       python -m playpen.submit sweep --config SWEEP.yaml ...
    python -m playpen.submit tournament --config debate/tournament_tiny ...   (one array task per match)
    python -m playpen.submit doctor [--nodes N] [--gpus-per-node G] [--storage-root DIR] [--skip FEATURE] ...
        (`playpen doctor` on every rank, plus the rendezvous, an all-reduce and the start latency)
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
from dataclasses import replace
from pathlib import Path

from playpen.config import find_config, packaged_configs
from playpen.doctor.features import FEATURES
from playpen.errors import PlaypenError
from playpen.storage import make_folder, timestamp
from playpen.submit import executor as exe
from playpen.submit import jobs
from playpen.submit import status
from playpen.submit.plans import Plan, plan_doctor, plan_eval, plan_meter, plan_sweep, plan_tournament, plan_train
from playpen.submit.profiles import ClusterProfile, load_profile, with_container
from playpen.submit.watch import print_dry_run, print_submitted, show_logs, wait
from playpen.train import METHODS

DOCTOR_TIME_MIN = 15
TRAIN_METHODS = tuple(METHODS)  # the one list: playpen.train.METHODS
SUBMIT_COMMANDS = (*TRAIN_METHODS, "eval", "meter", "sweep", "tournament")


# with no --config: the embedded default of each command, on playpen-tiny (the demo's GRPO config for grpo)
DEFAULT_CONFIGS = {"sft": "sft/tiny_lora.yaml", "dpo": "dpo/tiny_rollouts.yaml", "grpo": "grpo/demo.yaml",
                   "rloo": "grpo/tiny_reward_model.yaml", "reward": "reward/tiny_sentiment.yaml",
                   "eval": "eval/tiny.yaml", "meter": "meter/tiny_vader.yaml", "sweep": "sweeps/tiny.yaml",
                   "tournament": "debate/tournament_tiny.yaml", "rft": "rft/tiny_numberguess.yaml",
                   "distill": "distill/tiny_numberguess.yaml"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`playpen submit COMMAND ...` (also `python -m playpen.submit COMMAND ...`)."""
    parser.epilog = "`playpen submit COMMAND -h` lists every key of the command's --config file."
    commands = parser.add_subparsers(dest="submit_command", required=True, metavar="COMMAND")
    helps = {"sft": "supervised fine-tuning", "dpo": "direct preference optimisation",
             "grpo": "GRPO on games", "rloo": "RLOO on prompts against a reward model",
             "reward": "a reward model on preference pairs",
             "rft": "expert iteration on games (keep the wins, SFT)",
             "distill": "on-policy distillation on games (a teacher grades the learner's turns)",
             "eval": "play and score games with a model", "meter": "score a model's generations with a classifier",
             "sweep": "an eval sweep as one job array",
             "tournament": "a debate/consultancy tournament as one job array (a task per match)"}
    for name in SUBMIT_COMMANDS:
        p = commands.add_parser(name, help=helps[name])
        p.add_argument("-c", "--config", default=None,
                       help=f"experiment YAML: a file or a shipped config's name (playpen configs list; "
                            f"default: {DEFAULT_CONFIGS[name].removesuffix('.yaml')}, on playpen-tiny)")
        job_options(p)
        p.keys_help = lambda args, kind=name: kind_keys(kind)
    doctor = commands.add_parser("doctor", help="playpen doctor as a job on N nodes: every rank's checks, the "
                                                "rendezvous, an all-reduce (NCCL or gloo) and the start latency")
    job_options(doctor)
    doctor.add_argument("--storage-root", default=None,
                        help="where the report goes and which storage is checked (default: the profile's "
                             "storage_root, else $PLAYPEN_STORAGE or ./runs)")
    doctor.add_argument("--skip", action="append", default=[], choices=FEATURES,
                        help="a feature not to try (repeatable)")
    doctor.add_argument("--timeout", type=float, default=120,
                        help="seconds the ranks wait for each other (default 120)")
    st = commands.add_parser("status", help="state, requeues, progress and log tail of a run or sweep directory")
    st.add_argument("path")
    st.add_argument("-n", "--lines", type=int, default=10, help="log lines to show (default 10)")
    lg = commands.add_parser("logs", help="print (or follow) a job's log")
    lg.add_argument("path")
    lg.add_argument("--err", action="store_true", help="stderr instead of stdout")
    lg.add_argument("--task", type=int, default=0, help="task (rank) whose log to show")
    lg.add_argument("--job", default=None, help="job id (default: the latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (tail -f)")


def job_options(p: argparse.ArgumentParser) -> None:
    """Where and how a job runs: the options every submit command shares."""
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


def kind_keys(kind: str) -> str:
    """Every key a `submit KIND --config` file takes, with its type, default, range and help."""
    from playpen.config_help import format_keys, key_docs
    from playpen.train.cli import method_keys

    if kind in TRAIN_METHODS:
        return method_keys(kind)
    if kind == "meter":
        from playpen.reward import meter

        docs = meter.key_docs()
    elif kind == "eval":
        docs = key_docs(jobs.EvalSpec)
    elif kind == "sweep":
        from playpen.eval.sweep import SweepConfig

        docs = key_docs(SweepConfig)
    else:
        from playpen.debate_tools.tournament import TournamentConfig

        docs = key_docs(TournamentConfig)
    return format_keys(f"config keys of {kind} (in the --config file, or key=value after it):", docs)


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
    path = packaged_configs() / DEFAULT_CONFIGS[command]
    if not path.is_file():
        raise PlaypenError(f"no --config given and the default {path} is not there (a broken install?); "
                           f"pass --config FILE")
    print(f"playpen: no --config: submitting the default {path}", file=sys.stderr, flush=True)
    return str(path)


# ---------------------------------------------------------------- submit

def submit(args: argparse.Namespace) -> int:
    """Check everything, plan the job(s), then submit (or print the script for --dry-run)."""
    profile = with_container(load_profile(args.cluster), args.container)
    if args.command == "doctor":  # a short time limit: the scheduler backfills it sooner
        profile = replace(profile, time=min(profile.time_min, DOCTOR_TIME_MIN))
    kind = (args.executor or "slurm") if args.dry_run else exe.resolve_executor(args.executor)
    gpus = profile.gpus_per_node if args.gpus_per_node is None else args.gpus_per_node
    res = exe.Resources(nodes=args.nodes, gpus_per_node=gpus,
                        one_task=args.command not in (*TRAIN_METHODS, "doctor"))
    exe.check_resources(kind, profile, res, ask_slurm=not args.dry_run)
    if not args.dry_run:
        profile = exe.check_container(profile)
    config = "" if args.command == "doctor" else \
        str(find_config(args.config).absolute()) if args.config else default_config(args.command)
    if args.command == "doctor":
        plan = plan_doctor(args, profile, res)
    elif args.command in TRAIN_METHODS:
        plan = plan_train(args, profile, config, res)
    elif args.command == "eval":
        plan = plan_eval(args, profile, config, res)
    elif args.command == "meter":
        plan = plan_meter(args, profile, config, res)
    else:
        plan = (plan_sweep if args.command == "sweep" else plan_tournament)(args, profile, config, res, kind)
        if plan is None:
            return 0
    stamp = f"{timestamp()}-{os.getpid()}"
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
    return code or (plan.verdict() if plan.verdict is not None else 0)


def send(args: argparse.Namespace, kind: str, profile: ClusterProfile, res: exe.Resources, plan: Plan,
         ex) -> tuple[status.Submission, list]:
    """Submit from a clean environment and record the submission next to the results."""
    folder = make_folder(ex.folder, "job log folder", root=plan.directory)  # (no level of it a link)
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
