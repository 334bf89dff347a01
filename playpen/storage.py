"""Run directories on shared storage, and the one way playpen writes under a folder there.

Layout: <storage_root>/<experiment>/<run_id>/{config.yaml, checkpoints/, playpen-records/, logs/, metrics.jsonl}

Anyone with write access to the shared storage may plant a symbolic or hard link inside a folder playpen writes
(default names are predictable), so nothing is written through a name playpen did not make itself:
- a folder playpen creates or enters is checked to be a real folder, never a link (`make_folder`);
- a new or replaced file is written to a temporary file and renamed over the name (`atomic_write_*`,
  `write_figure`, `publish`): a link there is replaced, never followed; a file other jobs read is therefore
  never seen cut off either;
- a file appended to, logged into or locked is opened with O_NOFOLLOW and must be a regular file with one link
  (`open_append`, `exclusive_folder`), and is never truncated;
- what a library writes by name (clemcore's tables, a model's files) is written into a fresh private folder
  (`private_folder`) and moved into place.
A folder one process writes into (a training run, an eval results folder) is held with `exclusive_folder`, so a
second process on it stops instead of mixing files.
"""
from __future__ import annotations

import errno
import fcntl
import io
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from playpen.config import CONFIG_MAX_BYTES, DATA_MAX_BYTES, Checked, read_bytes
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
    try:  # (bytes that are not UTF-8 arrive as surrogates: every JSON and CSV written about them would fail)
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PlaypenError(f"{what}: path {value!r} holds bytes that are not UTF-8; rename it with UTF-8 "
                           f"characters only") from None
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


LINK_ADVICE = "playpen does not write through links it did not create: remove the link or give the real folder"


def not_a_link(folder: str | Path, what: str) -> Path:
    """`folder`, unless it is a symbolic link: on shared storage anyone with write access next to a folder playpen
    writes into could point it elsewhere (default names are predictable), so a link is never followed there."""
    folder = Path(folder)
    if folder.is_symlink():
        raise PlaypenError(f"{what} {folder} is a symbolic link (to {os.readlink(folder)}); {LINK_ADVICE}")
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
    elif path.is_dir():
        shutil.rmtree(inside(path, root), ignore_errors=True)  # (rmtree removes links inside, never follows them)
    elif path.exists():  # a file (or FIFO) where playpen's folder belongs
        inside(path, root).unlink()


def move_tree(source: str | Path, target: str | Path, root: str | Path) -> Path:
    """rename `source` to `target`, both proven inside `root`."""
    return Path(inside(source, root)).rename(inside(target, root))


# ---------------------------------------------------------------- folders

def _real_folder(level: Path, what: str) -> None:
    """`level` is a folder itself (lstat): not a link to one, not a file."""
    try:
        mode = os.lstat(level).st_mode
    except FileNotFoundError:
        raise PlaypenError(f"{what} {level} vanished while playpen created it; rerun") from None
    if stat.S_ISLNK(mode):
        raise PlaypenError(f"{what} {level} is a symbolic link (to {os.readlink(level)}); {LINK_ADVICE}")
    if not stat.S_ISDIR(mode):
        raise PlaypenError(f"{what} {level} is a file, not a folder; move it away or pick another folder")


def make_folder(folder: str | Path, what: str = "folder", root: str | Path | None = None) -> Path:
    """The one way playpen creates or enters a folder it writes into: `folder` and its missing parents are made,
    and each level is checked to be a real folder, never a link (a link planted there would take every file
    written below it elsewhere). With `root` (a run, results, sweep or tournament folder, itself checked), every
    level from `root` down to `folder` is checked, existing ones too; without it, the levels made and `folder`."""
    folder = Path(folder)
    if root is not None:
        root = make_folder(root, what)
        try:
            parts = folder.absolute().relative_to(root.absolute()).parts
        except ValueError:
            raise PlaypenError(f"{what} {folder} is not inside {root}; refusing to write there") from None
        levels = [root.joinpath(*parts[:i + 1]) for i in range(len(parts))]
    else:
        levels = [folder]
        while not os.path.lexists(levels[0]) and levels[0].parent != levels[0]:
            levels.insert(0, levels[0].parent)
        if len(levels) > 1:  # (the first existing ancestor is the user's: a link there is theirs to have)
            levels.pop(0)
    for level in levels:
        try:
            level.mkdir()
        except FileExistsError:
            pass
        except OSError as e:  # read-only mount, another user's folder
            raise PlaypenError(f"{what} {level} cannot be written ({e.strerror}); pick a writable folder") from None
        _real_folder(level, what)
    return folder


@contextmanager
def private_folder(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A new folder in `parent` that only this user can enter (mkdtemp: a fresh random name, mode 0700), removed
    on exit: where a library writes files by name (clemcore's tables and records, a model's files), nothing can
    be planted before it writes. What it wrote is moved out with `publish` or `replace_folder`."""
    parent = make_folder(parent)
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def staging_folder(target: str | Path, root: str | Path, create: bool = True) -> Path:
    """`.<name>.partial` beside `target`: where a library writes a whole folder by name (a model's files) before
    `replace_folder` puts it at `target`. Made new and private (mode 0700: nothing can be planted in it while it
    is written), an earlier one (a killed job's) removed first. The name is fixed, so every rank of a job names
    the same folder; `create=False` only names it (the ranks that rank 0 writes for)."""
    target = Path(target)
    staged = target.with_name(f".{target.name}.partial")
    if create:
        remove_tree(staged, root)
        make_folder(target.parent, "folder", root)
        try:
            os.mkdir(staged, 0o700)
        except FileExistsError:
            raise PlaypenError(f"{staged} was created by someone else while playpen prepared it; rerun") from None
        _real_folder(staged, "folder")
    return staged


def share_as_umask(folder: str | Path) -> None:
    """Give `folder` and everything in it the modes the umask gives new folders and files: libraries write some
    files 0600 (safetensors saves through a private temporary file) and mkdtemp makes 0700 folders, which would
    let teammates resolve a model (`umask 002` for a shared group) but not load it. Links are left alone."""
    umask = current_umask()
    for here, folders, files in os.walk(folder):
        os.chmod(here, 0o777 & ~umask)
        for name in files:
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, (0o777 if mode & 0o100 else 0o666) & ~umask)


def replace_folder(staged: str | Path, target: str | Path, root: str | Path) -> Path:
    """Move a folder written in a `private_folder` to `target` (inside `root`), replacing what was there; its
    modes become the umask's (`share_as_umask`)."""
    staged, target = Path(staged), Path(target)
    share_as_umask(staged)
    remove_tree(target, root)
    make_folder(target.parent, "folder", root)
    return move_tree(staged, target, root)


# ---------------------------------------------------------------- files

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


STALE_TEMP_S = 3600  # a temporary file this old beside its target was left by a killed writer


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None) -> Path:
    """Write `path` whole or not at all: a temporary file in the same folder (a new name: O_EXCL), then rename
    over `path`. A link planted at `path` is replaced, never written through. The folder is made or entered by
    `make_folder` (`root`: every level below it checked). Temporary files of `path` that a killed writer left
    are removed."""
    path = Path(path)
    make_folder(path.parent, "folder", root)
    if path.is_dir() and not path.is_symlink():
        raise PlaypenError(f"{path} is a folder where playpen writes a file; move it away")
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
    _remove_stale_temps(path)
    return path


def _remove_stale_temps(path: Path) -> None:
    prefix, now = f".{path.name}.", time.time()
    try:
        with os.scandir(path.parent) as entries:
            for entry in entries:
                if entry.name.startswith(prefix) and entry.name.endswith(".tmp") and \
                        entry.is_file(follow_symlinks=False) and now - entry.stat(follow_symlinks=False).st_mtime \
                        > STALE_TEMP_S:
                    os.unlink(entry.path)
    except OSError:
        pass  # (tidying only)


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


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"), root)


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2, root: str | Path | None = None) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=str), root)


def write_figure(path: str | Path, fig, root: str | Path | None = None, **savefig) -> Path:
    """A matplotlib figure saved as `atomic_write_bytes` saves (its format from the file name)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".") or "png", **savefig)
    return atomic_write_bytes(path, buffer.getvalue(), root)


def publish(source: str | Path, target: str | Path, root: str | Path | None = None) -> Path:
    """Move a file written in a `private_folder` to `target` by rename (a link at `target` is replaced, not
    followed), with the mode the umask gives ordinary files."""
    target = Path(target)
    make_folder(target.parent, "folder", root)
    os.chmod(source, 0o666 & ~current_umask())
    os.replace(source, target)
    return target


def open_append(path: str | Path, what: str = "file") -> int:
    """A file descriptor to append to `path` (created if missing, never truncated): opened with O_NOFOLLOW and
    checked to be a regular file with one link, so a symbolic or hard link planted there is refused in one
    line instead of written through. The caller closes it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PlaypenError(f"{what} {path} is a symbolic link (to {os.readlink(path)}); {LINK_ADVICE}") from None
        if e.errno == errno.ENXIO:  # (a FIFO without a reader, opened without blocking)
            raise PlaypenError(f"{what} {path} is not a regular file (a FIFO, device or socket); remove it") \
                from None
        raise PlaypenError(f"{what} {path} cannot be written ({e.strerror}); pick a writable folder") from None
    try:
        _own_regular_file(fd, path, what)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _own_regular_file(fd: int, path: Path, what: str) -> None:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise PlaypenError(f"{what} {path} is not a regular file (a FIFO, device or socket); remove it")
    if info.st_nlink != 1:
        raise PlaypenError(f"{what} {path} has {info.st_nlink} hard links (another name of the same file is "
                           f"elsewhere); playpen does not write into a file shared that way: remove it")


def written_by_me(path: str | Path) -> bool:
    """`path` is a regular file of this user's with one link (lstat: not a link): for files whose content runs
    code when loaded (submitit's pickles), which must not come from anyone else on shared storage."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_nlink == 1


def append_jsonl(path: str | Path, record: dict, root: str | Path | None = None) -> None:
    """One line per write with O_APPEND (`open_append`): concurrent writers never interleave within a line."""
    line = (json.dumps(record, default=str) + "\n").encode("utf-8")
    make_folder(Path(path).parent, "folder", root)
    fd = open_append(path, "jsonl file")
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def jsonl_lines(text: str) -> list[str]:
    """The lines of a jsonl text: split at newlines only. (str.splitlines also splits at U+2028, U+0085 and
    other characters that JSON strings may hold raw, cutting a row in two.)"""
    return [line.rstrip("\r") for line in text.split("\n")]


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a jsonl file. A last line cut off mid-write (a job killed while appending) is dropped with a
    warning: the row is lost either way, the rows before it are whole. A bad line elsewhere is one error line."""
    path = Path(path)
    if not os.path.lexists(path):
        return []
    text = read_text_lossy(path, "jsonl file")
    lines = jsonl_lines(text)
    if lines and lines[-1] == "":
        lines.pop()
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            if number == len(lines) and not text.endswith("\n"):
                print(f"playpen: warning: {path}:{number}: dropped a cut-off last line (the job stopped while "
                      f"writing it)", file=sys.stderr, flush=True)
                break
            why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deep"
            raise PlaypenError(f"{path}:{number}: not a JSON line ({why}); remove or fix that line") from None
        if not isinstance(row, dict):
            raise PlaypenError(f"{path}:{number}: expected a JSON object per line, got {type(row).__name__}")
        rows.append(row)
    return rows


def read_json_or_none(path: str | Path, limit: int = CONFIG_MAX_BYTES) -> Any:
    """A JSON file's value, or None when it is missing, not a regular file (a FIFO or device planted there),
    above `limit` bytes, or malformed: for state, marker and record files that other jobs write, where such a
    file counts as absent."""
    from playpen.config import parse_json

    try:
        return parse_json(read_bytes(path, "file", limit), str(path))
    except PlaypenError:
        return None


def read_text_lossy(path: str | Path, what: str, limit: int = DATA_MAX_BYTES) -> str:
    """`config.read_text`'s checks (a regular file under `limit`), bytes that are not UTF-8 replaced."""
    return read_bytes(path, what, limit).decode("utf-8", errors="replace")


LOCK_FILE = ".playpen.lock"
LOCK_RECORD_BYTES = 200  # "pid N on HOST", padded: every holder writes the whole record, nothing is truncated
LOCK_RECORD = re.compile(rb"\s*(pid \d+ on \S+)?\s*")


@contextmanager
def exclusive_folder(folder: str | Path, in_use: str, advice: str, lock_file: str = LOCK_FILE) -> Iterator[Path]:
    """Hold `folder` (created if missing) for this process while the block runs; if another process holds it,
    raise one line: "<in_use> (pid N on HOST); <advice>".

    flock on `<folder>/.playpen.lock`, never waiting: the kernel drops the lock when the holder exits, crashes
    or is killed, so there is no stale lock to clean up, and Linux maps flock onto POSIX locks on NFS, so two
    nodes see each other's lock on shared storage. The file stays (deleting a lock file lets a third process
    lock a fresh file while a second still holds the old one); it only says who held it last. It is opened as
    `open_append` opens files (no link followed, one link only) and must hold nothing but such a record, so a
    file playpen did not write is never overwritten. `lock_file` holds one part of a folder that several
    processes share (a tournament's matches).
    """
    folder = make_folder(folder)
    path = folder / lock_file
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:  # read-only mount, another user's folder, a file in the way
        if e.errno == errno.ELOOP:
            raise PlaypenError(f"lock file {path} is a symbolic link (to {os.readlink(path)}); {LINK_ADVICE}") \
                from None
        raise PlaypenError(f"folder {folder} cannot be written ({e.strerror}); pick a writable folder") from None
    try:
        _own_regular_file(fd, path, "lock file")
        held = os.pread(fd, 4096, 0)
        if len(held) > LOCK_RECORD_BYTES or not LOCK_RECORD.fullmatch(held):
            raise PlaypenError(f"lock file {path} holds something other than playpen's lock record; remove it")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = held.decode(errors="replace").strip() or "pid unknown"
            raise PlaypenError(f"{in_use} ({holder}); {advice}") from None
        record = f"pid {os.getpid()} on {socket.gethostname().split('.')[0]}"[:LOCK_RECORD_BYTES - 1]
        os.pwrite(fd, record.ljust(LOCK_RECORD_BYTES - 1).encode() + b"\n", 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock


def check_output_file(path: str | Path, what: str) -> Path:
    """An output file a user named (`-o out.jsonl`), checked before anything runs: a plain path (as
    `check_location`), not a symbolic link, not a folder, in a folder where a file can be created."""
    path = not_a_link(Path(check_location(str(path), what)).expanduser(), what)
    if path.is_dir():
        raise PlaypenError(f"{what} {path} is a folder; give a file, e.g. {what} {path / 'out.json'}")
    if why := unwritable(path.parent):
        raise PlaypenError(f"{what} {path} cannot be written ({why}); give {what} a file in a writable folder")
    return path


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
    """(step, path) of every checkpoint-<step> folder in `folder`, by step. A link named like a checkpoint is not
    one: it points at another run's weights (resumed or finished from, they would become this run's model)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted((step, p) for p in folder.iterdir()
                  if p.is_dir() and not p.is_symlink() and (step := checkpoint_step(p)) is not None)


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

    @property
    def model_name(self) -> str:
        """The one model name this run registers, `<experiment>-<run_id>`: the only name a run folder's
        model_registry.json may define (playpen.registry)."""
        return f"{self.path.parent.name}-{self.path.name}"

    def create(self) -> "RunDir":
        make_folder(not_a_link(self.path, "run folder"), "run folder")
        for d in (self.checkpoints, self.records, self.logs):  # (old checkpoints are deleted in there)
            make_folder(d, "run folder", root=self.path)
        return self

    @classmethod
    def for_experiment(cls, storage_root: str | Path | None, experiment: str, run_id: str | None = None) -> "RunDir":
        """<storage_root>/<experiment>/<run_id>, by `path_under`: safe names, no link followed, inside the root."""
        run_id = check_name(run_id or new_run_id(), "run_id")
        check_name(experiment, "experiment")
        model_name = f"{experiment}-{run_id}"
        if "--" in model_name or not is_safe_name(model_name):  # (`a--b`: model a's results with partner b)
            raise PlaypenError(f"experiment and run_id make the model name {model_name!r}, which names results "
                               f"folders and must be {NAME_RULE} without '--'; shorten or rename them")
        return cls(path_under(resolve_storage_root(storage_root), experiment, run_id, what="run folder"))
