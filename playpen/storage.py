"""Run directories on shared storage and crash-safe file writes.

Layout: <storage_root>/<experiment>/<run_id>/{config.yaml, checkpoints/, playpen-records/, logs/, metrics.jsonl}
Every file other jobs may read is written atomically (temp file in the same folder, then rename), so a job
killed mid-write never leaves a truncated file behind. A folder one process writes into (a training run, an
eval results folder) is held with `exclusive_folder`, so a second process on it stops instead of mixing files.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from playpen.errors import PlaypenError

STORAGE_ENV = "PLAYPEN_STORAGE"
DEFAULT_STORAGE = "runs"
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")  # the Hugging Face Trainer's checkpoints/checkpoint-<step>/


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str))


def append_jsonl(path: str | Path, record: dict) -> None:
    """One line per write with O_APPEND: concurrent writers never interleave within a line."""
    line = (json.dumps(record, default=str) + "\n").encode("utf-8")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_jsonl(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


LOCK_FILE = ".playpen.lock"


@contextmanager
def exclusive_folder(folder: str | Path, in_use: str, advice: str) -> Iterator[Path]:
    """Hold `folder` (created if missing) for this process while the block runs; if another process holds it,
    raise one line: "<in_use> (pid N on HOST); <advice>".

    flock on `<folder>/.playpen.lock`, never waiting: the kernel drops the lock when the holder exits, crashes
    or is killed, so there is no stale lock to clean up, and Linux maps flock onto POSIX locks on NFS, so two
    nodes see each other's lock on shared storage. The file stays (deleting a lock file lets a third process
    lock a fresh file while a second still holds the old one); it only says who held it last.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "pid unknown"
            raise PlaypenError(f"{in_use} ({holder}); {advice}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname().split('.')[0]}\n".encode(), 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock


def resolve_storage_root(configured: str | Path | None = None) -> Path:
    """Config value, else $PLAYPEN_STORAGE, else ./runs; must be writable (checked before anything runs)."""
    root = Path(configured or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE).expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PlaypenError(f"storage root {root} cannot be created ({e.strerror}); "
                           f"set storage_root=<dir> or ${STORAGE_ENV} to a writable folder") from None
    if why := unwritable(root):
        raise PlaypenError(f"storage root {root} is not writable ({why}); "
                           f"set storage_root=<dir> or ${STORAGE_ENV} to a writable folder")
    return root


def unwritable(folder: str | Path) -> str | None:
    """Why no file can be created in `folder` (while it does not exist: in the nearest folder above it that does),
    else None. Found by writing an unnamed temporary file, which leaves no trace: permission bits say nothing for
    root, nor on read-only mounts."""
    existing = Path(folder).expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file"
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        return e.strerror
    return None


def checkpoint_step(path: str | Path) -> int | None:
    """The step of a checkpoint-<step> folder (None for any other name): the one parser of that name."""
    match = CHECKPOINT_NAME.fullmatch(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints_in(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint-<step> folder in `folder`, by step."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((step, p) for p in folder.iterdir() if p.is_dir() and (step := checkpoint_step(p)) is not None)


def is_run_dir(path: str | Path) -> bool:
    """A training run folder (RunDir's layout): config.yaml or checkpoints/. Only such a folder's
    model_registry.json names the model the folder stands for."""
    path = Path(path)
    return (path / "config.yaml").is_file() or (path / "checkpoints").is_dir()


def new_run_id() -> str:
    """Sortable and unique across hosts: two jobs started in the same second still get distinct ids."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname().split('.')[0]}-{os.getpid()}"


@dataclass(frozen=True)
class RunDir:
    """One training or eval run on shared storage. Paths only; creating them is `create()`."""

    path: Path

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def records(self) -> Path:
        return self.path / "playpen-records"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.name}"

    def create(self) -> "RunDir":
        for d in (self.path, self.checkpoints, self.records, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        return self

    @classmethod
    def for_experiment(cls, storage_root: str | Path | None, experiment: str, run_id: str | None = None) -> "RunDir":
        if not experiment or "/" in experiment or experiment.startswith("."):
            raise PlaypenError(f"experiment name {experiment!r} must be a plain folder name (no '/')")
        return cls(resolve_storage_root(storage_root) / experiment / (run_id or new_run_id()))
