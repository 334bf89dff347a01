"""How `playpen submit` reads: the playpen.submit modules its call path stops in, and how often it goes back into a
module it had already left.

    python bench/submit_path.py [--executor local|slurm|dry-run] [--show]

Runs `submit grpo --config grpo/demo --executor E` in this process under sys.settrace, with a fresh storage root,
and records the module of every function call made in a playpen.submit module (generators and context managers
resuming count as calls; calls into other packages are not recorded). Consecutive calls in one module are one
stop; a "return" is a stop in a module that appeared earlier in the sequence. The submitted job is cancelled at
once (the `cancel:` line it printed). slurm needs the dev cluster (eval "$(bash slurm/devcluster.sh env)").
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "playpen.submit"


def trace_submit(executor: str) -> list[str]:
    from playpen.submit.cli import main

    modules: list[str] = []

    def tracer(frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                modules.append(name.removeprefix(PACKAGE + ".") or "__init__")
        return None

    with tempfile.TemporaryDirectory() as tmp:
        flag = ["--dry-run", "--executor", "slurm"] if executor == "dry-run" else ["--executor", executor]
        out = io.StringIO()
        sys.settrace(tracer)
        try:
            with contextlib.redirect_stdout(out):
                code = main(["grpo", "--config", "grpo/demo", *flag, f"storage_root={tmp}/runs"])
        finally:
            sys.settrace(None)
        cancel = [line.split(":", 1)[1].strip() for line in out.getvalue().splitlines()
                  if line.strip().startswith("cancel:")]
        for command in cancel:  # the job is not wanted, only its submission
            subprocess.run(command.split(), check=False)
        if code != 0:
            raise SystemExit(f"submit exited {code}:\n{out.getvalue()}")
    return modules


def stops(modules: list[str]) -> list[str]:
    return [m for i, m in enumerate(modules) if i == 0 or modules[i - 1] != m]


def returns(path: list[str]) -> int:
    return sum(m in path[:i] for i, m in enumerate(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("local", "slurm", "dry-run"), default="local")
    parser.add_argument("--show", action="store_true", help="print the stops")
    args = parser.parse_args()
    os.chdir(tempfile.gettempdir())
    path = stops(trace_submit(args.executor))
    print(f"submit grpo --executor {args.executor}: {len(path)} stops, {returns(path)} returns to a module already "
          f"left; modules in order of first visit: {' → '.join(dict.fromkeys(path))}")
    if args.show:
        print(" → ".join(path))


if __name__ == "__main__":
    main()
