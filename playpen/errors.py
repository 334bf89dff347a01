"""The one exception type users see: a single line saying what is wrong and how to fix it, and the one error
boundary every entry point runs its command inside (`playpen ...` and the `python -m` aliases alike).

It lives at the bottom layer so that a module's own `python -m` alias can use it without importing the command
line above it."""
from __future__ import annotations

import argparse
import re
import sys


class PlaypenError(Exception):
    """Bad input or environment. The CLI prints `playpen: error: <message>` and exits 2, nothing else."""


def one_line(message: str) -> str:
    """A message quoting a value with a newline or other control character (a hostile run_id, a file name) stays
    one line: the characters are shown escaped, as repr() shows them."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], message)


def guarded(command, *args) -> int:
    """The one error boundary of every entry point: a PlaypenError is one line and exit 2, Ctrl-C one line and
    exit 130; anything else is a bug and keeps its traceback."""
    try:
        return command(*args)
    except PlaypenError as e:
        print(f"playpen: error: {one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # a training run says which checkpoint the rerun resumes from
        print(f"playpen: interrupted; {e.args[0] if e.args else 'rerun the same command to resume'}",
              file=sys.stderr)
        return 130


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes (a missing argument, `-L abc`) are one line too, like every other bad input."""

    def error(self, message: str):
        self.exit(2, f"playpen: error: {self.prog}: {message} (see `{self.prog} -h`)\n")


def run_command(prog: str, add_arguments, main, argv: list[str] | None = None, description: str | None = None) -> int:
    """A `python -m` alias of a `playpen` subcommand: the subcommand's own arguments and main, the same error
    boundary. (Modules below the command line use this; those above it call playpen.cli.main directly.)"""
    parser = OneLineParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return guarded(main, args) or 0
