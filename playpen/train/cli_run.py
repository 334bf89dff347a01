"""`playpen run FILE -l LEARNER [-p PARTNER] [-L MAX_NEW_TOKENS] [-T TEMPERATURE]` (light at import)."""
from __future__ import annotations

import argparse

from playpen.defaults import TEMPERATURE, OldSpelling, add_max_new_tokens


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a Python file defining a BasePlaypenTrainer subclass")
    parser.add_argument("-l", "--learner", required=True, help="learner model name (`playpen list models`)")
    parser.add_argument("-p", "--partner", default=None, help="optional partner model name (plays the other roles)")
    # upstream playpen's spelling: still read as the partner, with a note
    parser.add_argument("-t", "--teacher", dest="partner", action=OldSpelling, help=argparse.SUPPRESS)
    add_max_new_tokens(parser, help="token limit per reply (default %(default)s)")
    parser.add_argument("-T", "--temperature", type=float, default=TEMPERATURE,
                        help="sampling temperature (default %(default)s)")


def main(args: argparse.Namespace) -> int:
    from playpen.defaults import check_flags
    from playpen.train.base import run_trainer

    check_flags(args)  # -L and -T mean what they mean in `playpen eval`

    run_trainer(args.file, args.learner, args.partner, args.max_new_tokens, args.temperature)
    return 0
