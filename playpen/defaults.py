"""Defaults defined once: the generation settings that `playpen eval`, `playpen run`, sweeps, tournaments and
re-judging start from, and the ranges every one of them checks (bottom layer: only config and errors below).
"""
from __future__ import annotations

import argparse

from playpen.config import Bounds

MAX_NEW_TOKENS = 300   # per reply when playing games to evaluate (clem's own default)
TEMPERATURE = 0.0      # greedy
BATCH_SIZE = 8         # episodes generated together
SEED = 0

# The ranges of evaluate()'s numeric arguments, wherever they come from: `playpen eval`'s flags, `submit eval`
# specs (playpen.submit.jobs.EvalSpec), sweep files (playpen.eval.sweep) and `playpen run`'s -L/-T.
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
