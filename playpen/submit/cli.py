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
import sys

from playpen.doctor.features import FEATURES
from playpen.submit import jobs
from playpen.submit.plan import DEFAULT_CONFIGS, EXECUTORS, SUBMIT_COMMANDS, TRAIN_METHODS, read_plan
from playpen.submit.render import print_dry_run, render
from playpen.submit.send import make_job_folder, send
from playpen.submit.watch import render_status, show_logs, watch


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
    job_options(doctor, overrides=False)
    doctor.set_defaults(overrides=[])  # (a key=value given anyway is refused by name, as doctor takes none)
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


def job_options(p: argparse.ArgumentParser, overrides: bool = True) -> None:
    """Where and how a job runs: the options every submit command shares (and its config's key=value overrides,
    for a command that reads a config)."""
    p.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs per node, one task each (default: the profile's gpus_per_node)")
    p.add_argument("--cluster", default=None,
                   help="cluster profile name or YAML file (default: $PLAYPEN_CLUSTER or local)")
    p.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="default: slurm when a SLURM controller answers, else local")
    p.add_argument("--container", default=None, metavar="IMAGE.sif|none",
                   help="run inside this image (default: the profile's), none: without one")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch script, submit nothing")
    p.add_argument("--wait", action="store_true",
                   help="block until the job ends, showing its progress, and print its result")
    if overrides:
        p.add_argument("overrides", nargs="*", default=[], metavar="key=value", help="config overrides")


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
        print(render_status(args.path, args.lines))
        return 0
    if args.submit_command == "logs":
        return show_logs(args)
    args.command = args.submit_command
    return submit(args)


def main(argv: list[str] | None = None) -> int:
    """`python -m playpen.submit ...` is `playpen submit ...`: one parser, one error boundary (playpen.cli)."""
    from playpen.cli import main as playpen_main

    return playpen_main(["submit", *(sys.argv[1:] if argv is None else argv)])


# ---------------------------------------------------------------- submit

def submit(args: argparse.Namespace) -> int:
    """plan → render → send → watch: every check runs while the plan is read, before anything is submitted;
    --dry-run prints the rendered job and submits nothing."""
    plan = read_plan(args)
    if plan is None:  # a sweep or tournament with nothing left to run
        return 0
    if plan.dry_run:
        return print_dry_run(plan)
    make_job_folder(plan)
    submission, submitted = send(plan, render(plan))
    return watch(plan, submission, submitted, args.wait)
