"""playpen.submit.start: a job loads its pickle only when nobody else can have written it.

A neighbour on shared storage plants a pickle whose loading writes an outside canary (unpickling runs code). The
job must refuse in one line without loading it: the canary stays absent. The same pickle in the submitter's own
private folder is loaded (the control: the canary proves the test would see code run)."""
from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from playpen.errors import PlaypenError
from playpen.storage import make_private_folder, open_private_file

REPO = Path(__file__).resolve().parents[1]
JOB_ID = "4242"
NOBODY = 65534


class Planted:
    """Unpickling it writes the canary: what a neighbour's code would do with your rights."""

    def __init__(self, canary: Path):
        self.canary = canary

    def __reduce__(self):
        return Path.write_text, (self.canary, "ran as you")


def plant(folder: Path, canary: Path) -> Path:
    path = folder / f"{JOB_ID}_submitted.pkl"
    path.write_bytes(pickle.dumps(Planted(canary)))
    return path


def start_job(folder: Path) -> subprocess.CompletedProcess:
    """The job's start as submitit's local executor runs it (the same command a SLURM job runs)."""
    env = {**os.environ, "SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": JOB_ID,
           "SUBMITIT_LOCAL_NTASKS": "1", "SUBMITIT_LOCAL_JOB_NUM_NODES": "1", "SUBMITIT_LOCAL_NODEID": "0",
           "SUBMITIT_LOCAL_GLOBALID": "0", "SUBMITIT_LOCAL_LOCALID": "0", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-u", "-m", "playpen.submit.start", "-u", "-m", "submitit.core._submit",
                           str(folder)], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def job_folder(tmp_path) -> Path:
    return make_private_folder(tmp_path / "run" / "logs" / "submitit" / "job", "job folder", root=tmp_path)


def test_the_job_folder_is_new_and_private_under_a_shared_umask(tmp_path):
    old = os.umask(0o002)  # the docs' shared-group setting
    try:
        folder = make_private_folder(tmp_path / "logs" / "submitit" / "a", "job folder", root=tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    with pytest.raises(PlaypenError, match="already exists"):  # a folder made first by anyone is not used
        make_private_folder(folder, "job folder", root=tmp_path)


def test_own_pickle_in_the_private_folder_is_loaded(job_folder, tmp_path):
    canary = tmp_path / "canary"
    plant(job_folder, canary)
    start_job(job_folder)
    assert canary.read_text() == "ran as you"  # the control: this test sees code run when it does


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root (CI runs as root)")
@pytest.mark.parametrize("case", ["pickle of another user", "folder of another user"])
def test_a_neighbours_pickle_is_not_loaded(job_folder, tmp_path, case):
    canary = tmp_path / "canary"
    path = plant(job_folder, canary)
    os.chown(path if case == "pickle of another user" else job_folder, NOBODY, NOBODY)
    proc = start_job(job_folder)
    assert proc.returncode == 2 and not canary.exists()
    assert proc.stderr.strip().splitlines()[-1].startswith("playpen: not starting the job: ")


def test_a_group_writable_job_folder_is_not_trusted(job_folder, tmp_path):
    """umask 002 with the folder left group-writable: a group member could have replaced the pickle."""
    canary = tmp_path / "canary"
    plant(job_folder, canary)
    job_folder.chmod(0o770)
    proc = start_job(job_folder)
    assert proc.returncode == 2 and not canary.exists()
    assert "is not private to you (owner uid" in proc.stderr and "mode 0770" in proc.stderr


def test_a_swapped_in_job_folder_is_not_trusted(job_folder, tmp_path):
    """A neighbour who owns `logs/submitit/` renames the job's folder away and puts a link to theirs in its place."""
    canary = tmp_path / "canary"
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    plant(theirs, canary)
    job_folder.rename(tmp_path / "moved")
    job_folder.symlink_to(theirs)
    proc = start_job(job_folder)
    assert proc.returncode == 2 and not canary.exists()
    assert "cannot be opened as a real folder" in proc.stderr


@pytest.mark.parametrize("kind", ["symbolic link", "hard link"])
def test_a_linked_pickle_is_not_loaded(job_folder, tmp_path, kind):
    canary = tmp_path / "canary"
    elsewhere = plant(tmp_path, canary)
    (os.symlink if kind == "symbolic link" else os.link)(elsewhere, job_folder / elsewhere.name)
    with pytest.raises(PlaypenError):
        open_private_file(job_folder / elsewhere.name)
    proc = start_job(job_folder)
    assert proc.returncode == 2 and not canary.exists()
