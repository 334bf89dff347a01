"""The one exception type users see: a single line saying what is wrong and how to fix it, and the one error
boundary every entry point runs its command inside (`playpen ...` and the `python -m` aliases alike).

It lives at the bottom layer so that a module's own `python -m` alias can use it without importing the command
line above it."""
from __future__ import annotations

import argparse
import difflib
import os
import re
import select
import sys
from typing import Callable


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


CLOSED_PIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a tool that stopped at a closed pipe


def ends_quietly_on_closed_pipe(command, *args) -> int:
    """Every entry point runs inside this: a reader that stops early (`playpen configs list | head -1`) closes
    the pipe, and the command ends quietly with 141, as other command-line tools do, not with a BrokenPipeError
    traceback. Only a closed stdout counts: a broken connection to a model server is an error and keeps its
    traceback. (SIGPIPE is not reset to its default for that reason: it would kill the process on any socket.)"""
    try:
        code = command(*args)
        sys.stdout.flush()  # what is still buffered meets the closed pipe here, not at exit
        return code
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # Python flushes stdout once more at exit: give that flush somewhere to go
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return CLOSED_PIPE_EXIT


def _stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: polling it reports an error."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no real file behind stdout (a test's capture)
        return False


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes (a missing argument, `-L abc`) are one line too, like every other bad input.

    Flags are spelled with dashes (`--results-dir`); the same flag with underscores, as clem spells its own
    (`--results_dir`, `--skip_gameplay`), is read as that flag and never shown in --help.

    A command that reads a config sets `keys_help`: --help then lists every config key after the flags, for what
    was parsed before -h (`playpen train grpo -h`: grpo's keys)."""

    keys_help: Callable[[argparse.Namespace], str] | None = None

    def error(self, message: str):
        self.exit(2, f"playpen: error: {self.prog}: {message} (see `{self.prog} -h`)\n")

    def parse_args(self, args=None, namespace=None):
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.refuse_unrecognized(extra)
        return parsed

    def refuse_unrecognized(self, extra: list[str]) -> None:
        """Arguments this command does not take: one line naming them, the flag each mistyped one was close to,
        and this command's own -h."""
        flags = [flag for flag in self._option_string_actions if flag.startswith("--")]
        close = [match[0] for arg in extra if arg.startswith("--")
                 for match in [difflib.get_close_matches(arg.partition("=")[0], flags, n=1, cutoff=0.6)] if match]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        self.error(f"unrecognized arguments: {' '.join(extra)}{hint}")

    def parse_known_args(self, args=None, namespace=None):
        # (a subcommand's parser is called with the rest of the line: each level reads its own flags)
        self._parsed = argparse.Namespace() if namespace is None else namespace
        return super().parse_known_args(self._dashed(sys.argv[1:] if args is None else list(args)), self._parsed)

    def format_help(self) -> str:
        keys = self.keys_help(getattr(self, "_parsed", argparse.Namespace())) if self.keys_help else ""
        return super().format_help() + (f"\n{keys}\n" if keys else "")

    def _dashed(self, args: list[str]) -> list[str]:
        """`--results_dir X` and `--results_dir=X` as `--results-dir`, where this parser has that flag only."""
        out: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":  # what follows is never a flag
                return out + args[i:]
            flag, equals, value = arg.partition("=")
            dashed = flag.replace("_", "-")
            if (flag.startswith("--") and dashed != flag and flag not in self._option_string_actions
                    and dashed in self._option_string_actions):
                arg = dashed + equals + value
            out.append(arg)
        return out


def run_command(prog: str, add_arguments, main, argv: list[str] | None = None, description: str | None = None) -> int:
    """A `python -m` alias of a `playpen` subcommand: the subcommand's own arguments and main, the same error
    boundary. (Modules below the command line use this; those above it call playpen.cli.main directly.)"""
    return ends_quietly_on_closed_pipe(_run_command, prog, add_arguments, main, argv, description)


def _run_command(prog: str, add_arguments, main, argv: list[str] | None, description: str | None) -> int:
    parser = OneLineParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    return guarded(main, args) or 0
