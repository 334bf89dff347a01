"""Defaults defined once: the generation settings that `playpen eval`, `playpen run`, sweeps, tournaments and
re-judging start from, the ranges every one of them checks and what each means (bottom layer: only config and
errors below).
"""
from __future__ import annotations

import argparse

from playpen.config import Bounds, deprecated

MAX_NEW_TOKENS = 300   # per reply when playing games to evaluate (clem's own default)
TEMPERATURE = 0.0      # greedy
BATCH_SIZE = 8         # episodes generated together
SEED = 0

# The ranges of evaluate()'s numeric arguments, wherever they come from: `playpen eval`'s flags, `submit eval`
# specs (playpen.submit.jobs.EvalSpec), sweep files (playpen.eval.sweep) and `playpen run`'s -L/-T.
# Upper bounds are far above any real setting; past them a value is a typo that would exhaust memory or fail deep
# inside a library (numpy takes seeds below 2^32).
MAX_SEED = 2**32 - 1
EVAL_BOUNDS = {
    "max_new_tokens": Bounds(ge=1, le=1 << 17), "temperature": Bounds(ge=0, le=100, hint="0 is greedy"),
    "instances": Bounds(ge=1, le=10**7), "batch_size": Bounds(ge=1, le=1 << 16), "seed": Bounds(ge=0, le=MAX_SEED),
}
FLAGS = {"max_new_tokens": "-L/--max-new-tokens", "temperature": "-T/--temperature", "instances": "--instances",
         "batch_size": "-b/--batch-size", "seed": "--seed"}
# what each of them means, wherever it is a config key (`submit eval` specs, sweep files)
EVAL_HELP = {
    "max_new_tokens": "max new tokens per reply", "temperature": "sampling temperature (0: greedy)",
    "instances": "play at most N instances per game, spread over its experiments (null: all)",
    "batch_size": "episodes generated together",
    "seed": "sampling seed of the rollout engine when temperature > 0 (another seed plays other episodes)",
}


def check_flags(args: argparse.Namespace) -> None:
    """Each numeric flag in its range, before anything is resolved, loaded or written."""
    for name, flag in FLAGS.items():
        if hasattr(args, name):
            EVAL_BOUNDS[name].check(getattr(args, name), flag)


class OldSpelling(argparse.Action):
    """An old flag spelling: still works, with the one deprecation note per process."""

    def __call__(self, parser, namespace, values, option_string=None):
        deprecated(option_string.lstrip("-"), self.dest)
        setattr(namespace, self.dest, values)


def add_max_new_tokens(parser: argparse.ArgumentParser, default: int | None = MAX_NEW_TOKENS,
                       help: str = "max new tokens per reply (default: %(default)s)") -> None:
    """-L/--max-new-tokens, the one spelling of the generation length on every command line (dest max_new_tokens);
    the old --max_tokens is accepted, hidden from --help."""
    parser.add_argument("-L", "--max-new-tokens", dest="max_new_tokens", type=int, default=default, metavar="N",
                        help=help)
    parser.add_argument("--max_tokens", dest="max_new_tokens", type=int, action=OldSpelling,
                        help=argparse.SUPPRESS)

