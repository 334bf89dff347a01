"""`playpen eval MODEL`: clemscore/statscore of one model on the validation games (light at import).

    playpen eval playpen-tiny                         # all games → playpen-eval/<timestamp>/playpen-tiny.val.json
    playpen eval playpen-tiny -g wordle -r DIR        # replay wordle in DIR, recompute the scores
    playpen eval runs/grpo/RUN_ID -r DIR              # a training run (its registered adapter/model)
    playpen eval playpen-tiny -r DIR --skip_gameplay  # rescore the records in DIR only
"""
from __future__ import annotations

import argparse

from playpen.config import Bounds
from playpen.eval.evaluation import DEFAULT_BATCH_SIZE, DEFAULT_MAX_TOKENS, PLAYERS, SUITES  # light: no torch

# The ranges of evaluate()'s numeric arguments, wherever they come from: these flags, `submit eval` specs
# (playpen.submit.jobs.EvalSpec), sweep files (playpen.eval.sweep) and `playpen run`'s -L/-T.
EVAL_BOUNDS = {
    "max_tokens": Bounds(ge=1), "temperature": Bounds(ge=0, hint="0 is greedy"), "instances": Bounds(ge=1),
    "batch_size": Bounds(ge=1), "seed": Bounds(ge=0),
}
FLAGS = {"max_tokens": "-L/--max_tokens", "temperature": "-T/--temperature", "instances": "--instances",
         "batch_size": "-b/--batch_size", "seed": "--seed"}


def check_flags(args: argparse.Namespace) -> None:
    """Each numeric flag in its range, before anything is resolved, loaded or written."""
    for name, flag in FLAGS.items():
        if hasattr(args, name):
            EVAL_BOUNDS[name].check(getattr(args, name), flag)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="registered model name, training run directory, or checkpoint folder")
    parser.add_argument("-g", "--game", dest="games", action="append", metavar="GAME",
                        help="game to play (repeatable; default: every registered game in the suite)")
    parser.add_argument("-r", "--results_dir", default=None,
                        help="results folder to create or reuse (default: playpen-eval/<timestamp>/)")
    parser.add_argument("--skip_gameplay", action="store_true", help="only rescore the records in --results_dir")
    parser.add_argument("--suite", choices=SUITES, default="all",
                        help="dialogue games (clemscore), static games (statscore), or both (default)")
    parser.add_argument("-L", "--max_tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help="max new tokens per response (default: %(default)s)")
    parser.add_argument("-T", "--temperature", type=float, default=0.0, help="sampling temperature (default: 0)")
    parser.add_argument("--instances", type=int, default=None, metavar="N",
                        help="play at most N instances per game, spread over its experiments (default: all)")
    parser.add_argument("--instance_set", default="validation",
                        help="validation (default), train, or an instances file of the game")
    parser.add_argument("--player", choices=PLAYERS, default="auto",
                        help="who drives the model: playpen's rollout engine (local HF models; auto's choice) or "
                             "clemcore's runner (every backend; auto's choice for API models)")
    parser.add_argument("-b", "--batch_size", type=int, default=DEFAULT_BATCH_SIZE,
                        help="episodes generated together (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="sampling seed of the rollout engine when -T > 0 (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="clemcore's log lines and progress bars on screen too (always in <results>/clembench.log)")


def main(args: argparse.Namespace) -> int:
    from playpen.eval.evaluation import evaluate, format_val

    check_flags(args)
    val = evaluate(args.model, games=args.games, results_dir=args.results_dir, skip_gameplay=args.skip_gameplay,
                   suite=args.suite, max_tokens=args.max_tokens, temperature=args.temperature,
                   instances=args.instances, batch_size=args.batch_size, instance_set=args.instance_set,
                   player=args.player, seed=args.seed, verbose=args.verbose)
    print(format_val(val))
    return 0
