"""playpen's model builders and container checks: `playpen` subcommands whose `python -m` forms are aliases; and
every entry point ends quietly when its reader closes the pipe."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_build_tiny_three_ways_print_the_same_folder():
    """Already built (the packaged model): nothing is rebuilt, each prints the folder on stdout."""
    outs = [run("-m", "playpen.cli", "models", "build-tiny"), run("-m", "playpen.cli", "build-tiny"),
            run("-m", "playpen.models.tiny")]
    assert [o.returncode for o in outs] == [0, 0, 0], [o.stderr[-1000:] for o in outs]
    assert len({o.stdout for o in outs}) == 1 and outs[0].stdout.strip().endswith("playpen-tiny")


def test_containers_check_both_ways():
    for argv in (["-m", "playpen.cli", "containers", "check"], ["-m", "playpen.containers", "check"]):
        done = run(*argv)
        assert done.returncode == 0 and done.stderr == "", done.stderr


def test_usage_mistakes_are_one_line_both_ways():
    cases = [(["-m", "playpen.containers", "bogus"], "playpen containers: argument action: invalid choice"),
             (["-m", "playpen.cli", "containers"], "the following arguments are required: action"),
             (["-m", "playpen.models.smol", "--bogus"], "playpen models convert-smol: unrecognized arguments"),
             (["-m", "playpen.cli", "models", "convert-smol", "--bogus"], "unrecognized arguments: --bogus"),
             (["-m", "playpen.cli", "models"], "the following arguments are required: TOOL")]
    for argv, message in cases:
        done = run(*argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("playpen: error: "), done.stderr
        assert message in lines[0], lines[0]


def test_models_help_is_light():
    code = ("import sys; from playpen.cli import build_parser_for; build_parser_for(['models']); "
            "print([m for m in ('torch', 'transformers', 'clemcore') if m in sys.modules])")
    done = run("-c", code)
    assert done.stdout.strip() == "[]", done.stderr[-2000:]


@pytest.mark.parametrize("argv, code", [
    (["-m", "playpen.cli", "configs", "list"], 141), (["-m", "playpen.cli", "list", "games"], 141),
    (["-m", "playpen.submit", "sft", "--dry-run", "--executor", "local"], 141),
    (["-m", "playpen.dataset_from_records", "--help"], 0)])
def test_a_closed_pipe_ends_quietly(argv, code, tmp_path):
    """`playpen configs list | head -1`: the reader is gone before the first line (its end closed at once, so
    the write always fails), and the command ends with 141 (128 + SIGPIPE) and nothing on stderr. (--help ends
    with 0: argparse itself ignores a failed write of the help.)"""
    proc = subprocess.Popen([sys.executable, *argv], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == code and "Traceback" not in err and "BrokenPipe" not in err, err
