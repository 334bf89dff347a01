"""Run directories on shared storage and crash-safe file writes.

Layout: <storage_root>/<experiment>/<run_id>/{config.yaml, checkpoints/, playpen-records/, logs/, metrics.jsonl}
Every file other jobs may read is written atomically (temp file in the same folder, then rename), so a job
killed mid-write never leaves a truncated file behind. A folder one process writes into (a training run, an
eval results folder) is held with `exclusive_folder`, so a second process on it stops instead of mixing files.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from playpen.config import Checked
from playpen.errors import PlaypenError

STORAGE_ENV = "PLAYPEN_STORAGE"
DEFAULT_STORAGE = "runs"
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")  # the Hugging Face Trainer's checkpoints/checkpoint-<step>/


# ---------------------------------------------------------------- names and paths
# One rule for every name that becomes a folder or file name (experiment, run id, sweep/meter/tournament names,
# game and model names) and for every path that reaches a job script (storage roots, -r/-o folders): a generated
# sbatch script takes them verbatim into `#SBATCH --output=...` lines, where sbatch honours no shell quoting.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_MAX = 128
NAME_RULE = f"letters, digits and . _ - (not first), at most {NAME_MAX} characters"
UNSAFE_IN_PATH = re.compile(r"[\x00-\x1f\x7f'\"`$\\%]")  # control characters, quotes, $, `, \\, sbatch's %


def is_safe_name(value: object) -> bool:
    """NAME_RULE: never absolute, '..', a separator, hidden or a control character."""
    return isinstance(value, str) and bool(NAME.fullmatch(value)) and len(value) <= NAME_MAX


def check_name(value: object, what: str) -> str:
    """`value` if it is a safe name, else one line naming it."""
    if not is_safe_name(value):
        raise PlaypenError(f"{what}: {value!r} is not a safe name; use {NAME_RULE}")
    return value


def slug(text: str, default: str = "model") -> str:
    """The one rule that turns free text (a model path, a classifier, a label) into a name: the result passes
    check_name. Every folder or file playpen names itself from such text goes through here."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._-")[:NAME_MAX] or default


def slug_joined(parts, sep: str) -> str:
    """A key composed of names (`a--b`, `grpo@step10`): each part a slug, the separator kept (so the folders of
    earlier sweeps, tournaments and records keep their names)."""
    return sep.join(slug(part) for part in parts)


def check_location(value: object, what: str) -> str:
    """`value` if it is a path a job script can carry: no control characters (a newline would start a script
    line of its own), quotes, $, `, backslash or % (sbatch expands %j in log paths)."""
    if not isinstance(value, str) or not value or (bad := UNSAFE_IN_PATH.search(value)):
        why = "is empty" if value == "" else "is not text" if not isinstance(value, str) else \
            f"contains {bad.group()!r}"
        raise PlaypenError(f"{what}: path {value!r} {why}; use a plain path (no control characters, quotes, "
                           f"$, `, \\ or %)")
    return value


class Name(Checked):
    """Config annotation: a value checked by `check_name` when the config is read."""

    @classmethod
    def check(cls, value: str, where: str) -> str:
        return check_name(value, where)


class Location(Checked):
    """Config annotation: a folder path checked by `check_location` when the config is read."""

    @classmethod
    def check(cls, value: str, where: str) -> str:
        return check_location(value, where)


def not_a_link(folder: str | Path, what: str) -> Path:
    """`folder`, unless it is a symbolic link: on shared storage anyone with write access next to a folder playpen
    writes into could point it elsewhere (default names are predictable), so a link is never followed there."""
    folder = Path(folder)
    if folder.is_symlink():
        raise PlaypenError(f"{what} {folder} is a symbolic link (to {os.readlink(folder)}); playpen does not write "
                           f"through links it did not create: remove the link or give the real folder")
    return folder


def path_under(root: str | Path, *names: str, what: str = "folder") -> Path:
    """The one way an output path is made from names: `root/name/...`, each name safe (`check_name`), no existing
    folder below `root` a symbolic link, and the result inside `root`."""
    path = Path(check_location(str(root), f"{what} root"))
    for name in names:
        path = not_a_link(path / check_name(name, f"{what} name"), what)
    return inside(path, root, what)


def inside(path: str | Path, root: str | Path, what: str = "path") -> Path:
    """`path` if it lies strictly inside `root` once both are resolved (links, '..'), else one line."""
    path, root = Path(path), Path(root)
    real, real_root = path.resolve(), root.resolve()
    if real == real_root or not real.is_relative_to(real_root):
        raise PlaypenError(f"{what} {path} resolves to {real}, outside {real_root}; refusing to write or delete it")
    return path


def remove_tree(path: str | Path, root: str | Path) -> None:
    """rmtree, only of a real folder proven inside `root` (a link there is removed, never followed)."""
    path = Path(path)
    if path.is_symlink():
        inside(path.parent / f".{path.name}", root)  # (the link's own folder must be inside `root`)
        path.unlink()
    elif path.exists():
        shutil.rmtree(inside(path, root), ignore_errors=True)


def move_tree(source: str | Path, target: str | Path, root: str | Path) -> Path:
    """rename `source` to `target`, both proven inside `root`."""
    return Path(inside(source, root)).rename(inside(target, root))


FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # disk full, quota exceeded, `ulimit -f` (Python ignores SIGXFSZ)


def storage_full(error: BaseException) -> str | None:
    """Why a write failed for want of space, else None. Libraries wrap the OSError (safetensors' SafetensorError,
    torch's "PytorchStreamWriter failed"), so their messages and the exception chain are read too."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError) and error.errno in FULL:
            return error.strerror
        text = str(error)
        for code in FULL:
            if os.strerror(code) in text:
                return os.strerror(code)
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide the file from teammates
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def current_umask() -> int:
    """The process umask, read without changing it (os.umask would, for a moment, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
    """The rows of a jsonl file. A last line cut off mid-write (a job killed while appending) is dropped with a
    warning: the row is lost either way, the rows before it are whole. A bad line elsewhere is one error line."""
    path = Path(path)
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines) and not text.endswith("\n"):
                print(f"playpen: warning: {path}:{number}: dropped a cut-off last line (the job stopped while "
                      f"writing it)", file=sys.stderr, flush=True)
                break
            raise PlaypenError(f"{path}:{number}: not a JSON line ({e.msg}); remove or fix that line") from None
        if not isinstance(row, dict):
            raise PlaypenError(f"{path}:{number}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return rows


LOCK_FILE = ".playpen.lock"


@contextmanager
def exclusive_folder(folder: str | Path, in_use: str, advice: str, lock_file: str = LOCK_FILE) -> Iterator[Path]:
    """Hold `folder` (created if missing) for this process while the block runs; if another process holds it,
    raise one line: "<in_use> (pid N on HOST); <advice>".

    flock on `<folder>/.playpen.lock`, never waiting: the kernel drops the lock when the holder exits, crashes
    or is killed, so there is no stale lock to clean up, and Linux maps flock onto POSIX locks on NFS, so two
    nodes see each other's lock on shared storage. The file stays (deleting a lock file lets a third process
    lock a fresh file while a second still holds the old one); it only says who held it last. `lock_file` holds
    one part of a folder that several processes share (a tournament's matches).
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:  # read-only mount, another user's folder, a file in the way
        raise PlaypenError(f"folder {folder} cannot be written ({e.strerror}); pick a writable folder") from None
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
    root = Path(check_location(str(configured or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE),
                               "storage_root")).expanduser().absolute()
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


def timestamp() -> str:
    """The one format of the time in a default output folder's name (eval results, meter, submissions): sortable."""
    return time.strftime("%Y%m%d-%H%M%S")


def new_run_id() -> str:
    """Sortable and unique across hosts: two jobs started in the same second still get distinct ids."""
    return f"{timestamp()}-{socket.gethostname().split('.')[0]}-{os.getpid()}"


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
            not_a_link(d, "run folder").mkdir(parents=True, exist_ok=True)  # (old checkpoints are deleted in there)
        return self

    @classmethod
    def for_experiment(cls, storage_root: str | Path | None, experiment: str, run_id: str | None = None) -> "RunDir":
        """<storage_root>/<experiment>/<run_id>, by `path_under`: safe names, no link followed, inside the root."""
        run_id = check_name(run_id or new_run_id(), "run_id")
        check_name(experiment, "experiment")
        return cls(path_under(resolve_storage_root(storage_root), experiment, run_id, what="run folder"))
