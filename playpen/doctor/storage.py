"""Storage: the storage root (run folders) and the scratch/cache folders writable, their free space, and file locks
(flock, what keeps two trainings out of one run folder) enforced there."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from playpen.doctor.report import FAILED, WARN, Check, Finding, attempt
from playpen.errors import PlaypenError
from playpen.storage import resolve_storage_root, unwritable

LOW_SPACE_GIB = 20  # below this a checkpointing run may fill the disk: WARN


def scratch_folders() -> dict[str, str]:
    """Where caches go: $PLAYPEN_HOME (built models) and $HF_HOME (Hugging Face), as the job sees them."""
    home = os.environ.get("PLAYPEN_HOME") or str(Path("~/.cache/playpen").expanduser())
    hf = os.environ.get("HF_HOME") or str(Path("~/.cache/huggingface").expanduser())
    return {"PLAYPEN_HOME": home, "HF_HOME": hf}


def free_gib(folder: Path) -> float:
    existing = folder
    while not existing.exists():
        existing = existing.parent
    return shutil.disk_usage(existing).free / 2**30


def _space(folder: Path, what: str) -> tuple[str, dict]:
    free = free_gib(folder)
    data = {"path": str(folder), "free_gib": round(free, 1)}
    if free < LOW_SPACE_GIB:
        raise Finding(WARN, f"{folder}: writable, only {free:.1f} GiB free", f"free space or point {what} elsewhere",
                      **data)
    return f"{folder}: writable, {free:.0f} GiB free", data


def _root(configured: str | None):
    def check() -> tuple[str, dict]:
        try:
            root = resolve_storage_root(configured)
        except PlaypenError as e:
            raise Finding(FAILED, str(e).split(";")[0], "set storage_root (config or cluster profile) or "
                          "$PLAYPEN_STORAGE to a writable folder on shared storage") from None
        return _space(root, "storage_root")
    return check


def _scratch(name: str, folder: str):
    def check() -> tuple[str, dict]:
        if why := unwritable(folder):
            raise Finding(FAILED, f"${name} {folder} is not writable ({why})",
                          f"export {name}=<a writable folder on scratch> (cluster profile env:)")
        return _space(Path(folder).expanduser(), f"${name}")
    return check


def flock_works(folder: Path) -> tuple[str, dict]:
    """Two open file descriptions of one lock file: the second exclusive flock must be refused while the first
    holds it (on NFS, flock maps onto POSIX locks; a mount with `nolock`/`local_lock` does not share them). The
    lock file is a new one of this check's own (mkstemp: a fresh name, no link followed), so another doctor's
    lock is neither taken for a failure nor deleted."""
    try:
        first, name = tempfile.mkstemp(dir=folder, prefix=".playpen-doctor.", suffix=".lock")
    except OSError as e:
        raise Finding(FAILED, f"no lock file can be made in {folder}: {e.strerror}",
                      "set storage_root to a writable folder with free space") from None
    path = Path(name)
    second = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        try:
            fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise Finding(FAILED, f"flock on {folder} fails: {e.strerror}",
                          "run folders need working file locks: use another filesystem for storage_root") from None
        try:
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return f"{folder}: a held lock refuses a second holder", {"path": str(folder)}
        raise Finding(FAILED, f"flock on {folder} does not exclude: two holders got the same lock",
                      "a filesystem without shared locks: two trainings could write one run folder; use another")
    finally:
        os.close(second)
        os.close(first)
        path.unlink(missing_ok=True)


def storage_checks(configured: str | None = None) -> list[Check]:
    checks = [attempt("storage", "storage_root", _root(configured))]
    if checks[0].status != FAILED:
        root = Path(checks[0].data["path"])
        checks.append(attempt("storage", "file locks", lambda: flock_works(root)))
    for name, folder in scratch_folders().items():
        checks.append(attempt("storage", name, _scratch(name, folder)))
    return checks
