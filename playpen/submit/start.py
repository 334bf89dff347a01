"""How a submitted job starts on its node: submitit's own start (`python -u -m submitit.core._submit FOLDER`), after
the pickled job it is about to load has been checked to be this user's.

Unpickling runs code. The pickle waits in the job's folder on shared storage for the whole queue time, so a job
loads it only from the private folder its submitter made (`make_private_folder`: new per submission, 0700) and
only as a regular file of this user's (`open_private_file`, opened relative to the checked folder). Anything else
stops the job with one line, before anything is loaded. The submission's python command is
`<python> -u -m playpen.submit.start`, to which submitit appends its own `-u -m submitit.core._submit FOLDER`.

This is not a second copy of submitit's job runner: after the check, `submitit.core.submission.process_job` runs
the job as always (signals, requeue, result pickle); it only reads the pickle through the checked file.
"""
from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

SUBMITIT_START = ["-u", "-m", "submitit.core._submit"]
WAIT_S = 60  # what submitit waits for the pickle of a job that started before its submitter renamed it in place


def start_command(python: list[str]) -> list[str]:
    """The python command a job runs with, before submitit's own arguments."""
    return [*python, "-u", "-m", "playpen.submit.start"]


def main(argv: list[str]) -> int:
    from submitit.core import submission, utils

    from playpen.errors import PlaypenError
    from playpen.storage import open_private_file

    if argv[:-1] != SUBMITIT_START or not argv:
        print(f"playpen.submit.start: expected {' '.join(SUBMITIT_START)} FOLDER, got {argv}", file=sys.stderr)
        return 2
    folder = Path(argv[-1])
    os.environ["SUBMITIT_FOLDER"] = str(folder)  # (what process_job sets, for the paths below)
    import submitit

    expected = submitit.JobEnvironment().paths.submitted_pickle
    try:
        checked = open_private_file(expected, wait_s=WAIT_S)
    except PlaypenError as e:
        print(f"playpen: not starting the job: {e}", file=sys.stderr, flush=True)
        return 2
    load = vars(utils.DelayedSubmission)["load"]  # (the classmethod itself, put back below)

    def load_checked(path: str | Path) -> utils.DelayedSubmission:
        if Path(path) != expected:  # (a later load by path, e.g. of a requeued job, is not this process's)
            raise RuntimeError(f"playpen.submit.start: unexpected job pickle {path}")
        with checked:
            obj = pickle.load(checked)  # noqa: S301  (checked: written by this user, in a private folder)
        if type(obj).__name__ != utils.DelayedSubmission.__name__:
            raise RuntimeError(f"{path} holds a {type(obj).__name__}, not a job")
        return obj  # type: ignore[no-any-return]

    utils.DelayedSubmission.load = staticmethod(load_checked)  # type: ignore[assignment,method-assign]
    try:
        submission.process_job(folder)
    finally:
        setattr(utils.DelayedSubmission, "load", load)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
