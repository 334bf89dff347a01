"""Files under a checked folder: new and replaced ones by temporary file and rename (`atomic_write_*`,
`write_figure`, `publish`), appended ones opened without following links and only when they are regular files with
one link (`open_append`, `append_jsonl`); and reading back what jobs wrote (jsonl, state files) with
playpen.reading's checks."""
from __future__ import annotations

import errno
import io
import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from playpen.reading import CONFIG_MAX_BYTES, DATA_MAX_BYTES, parse_json, read_bytes
from playpen.errors import PlaypenError
from playpen.storage.folders import current_umask, make_folder
from playpen.storage.names import LINK_ADVICE

FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # disk full, quota exceeded, `ulimit -f` (Python ignores SIGXFSZ)


def storage_full(error: BaseException) -> str | None:
    """Why a write failed for want of space, else None. Libraries wrap the OSError (safetensors' SafetensorError,
    torch's "PytorchStreamWriter failed"), so their messages and the exception chain are read too."""
    seen = 0
    current: BaseException | None = error  # None once the chain ends
    while current is not None and seen < 10:
        if isinstance(current, OSError) and current.errno in FULL:
            return current.strerror
        text = str(current)
        for code in FULL:
            if os.strerror(code) in text:
                return os.strerror(code)
        current, seen = current.__cause__ or current.__context__, seen + 1
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
    if target.is_dir() and not target.is_symlink():
        raise PlaypenError(f"{target} is a folder where playpen writes a file; move it away")
    os.chmod(source, 0o666 & ~current_umask())
    os.replace(source, target)
    return target


def write_output(path: str | Path, data: bytes | str, what: str = "output") -> Path:
    """The one writer of an output file a user named (`-o`, `--out`, `configs copy DEST`), checked first by
    `check_output_file`. A regular file (or a new name) is written as `atomic_write_bytes` writes: a symbolic or
    hard link there is replaced, never written through. A FIFO or character device (`-o /dev/null`, a pipe) is
    written to as a stream and never renamed over (as root, a rename would replace the system's /dev/null). A
    symbolic link or any other kind of file is refused in one line."""
    path = Path(path)
    data = data.encode("utf-8") if isinstance(data, str) else data
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # (a new name; a file on the way is said below)
        mode = stat.S_IFREG
    if stat.S_ISLNK(mode):
        raise PlaypenError(f"{what} {path} is a symbolic link (to {os.readlink(path)}); {LINK_ADVICE}")
    if stat.S_ISREG(mode):
        return atomic_write_bytes(path, data)
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise PlaypenError(f"{what} {path} is {'a folder' if stat.S_ISDIR(mode) else 'a socket or block device'}; "
                           f"give a file")
    try:  # (O_NONBLOCK: a FIFO nobody reads is one line, not a hang)
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        why = "a FIFO nobody reads" if e.errno == errno.ENXIO else e.strerror
        raise PlaypenError(f"{what} {path} cannot be written ({why}); give a file, or start its reader first") \
            from None
    try:
        info = os.fstat(fd)
        if not (stat.S_ISFIFO(info.st_mode) or stat.S_ISCHR(info.st_mode)):  # (swapped since the lstat)
            raise PlaypenError(f"{what} {path} changed while playpen opened it; rerun")
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    return path


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


def open_private_file(path: str | Path, wait_s: float = 0.0) -> io.BufferedReader:
    """`path` opened for reading only if nobody else can have written it: its folder is this user's and private
    (no link, mode 0700), the file a regular file of this user's with one link. For files whose content runs code
    when loaded (submitit's pickles). The file is opened relative to the checked folder, so renaming folders
    above it after the check changes nothing. Waits up to `wait_s` for the file to appear (a job may start
    before its submitter has put the pickle in place). Raises PlaypenError naming what is wrong."""
    path = Path(path)
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise PlaypenError(f"folder {path.parent} cannot be opened as a real folder ({e.strerror})") from None
    try:
        info = os.fstat(folder)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PlaypenError(f"folder {path.parent} is not private to you (owner uid {info.st_uid}, mode "
                               f"{stat.S_IMODE(info.st_mode):04o}); someone else could have written {path.name} "
                               f"there, so it is not loaded")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
                break
            except FileNotFoundError:
                if time.monotonic() >= deadline:
                    raise PlaypenError(f"{path} is not there") from None
                time.sleep(0.5)
            except OSError as e:  # ELOOP: a link
                raise PlaypenError(f"{path} cannot be opened as a regular file ({e.strerror})") from None
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_nlink != 1:
        os.close(fd)
        raise PlaypenError(f"{path} is not a regular file of yours with one link (owner uid {info.st_uid}, "
                           f"{info.st_nlink} links), so it is not loaded")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


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
    try:
        return parse_json(read_bytes(path, "file", limit), str(path))
    except PlaypenError:
        return None


def read_text_lossy(path: str | Path, what: str, limit: int = DATA_MAX_BYTES) -> str:
    """`playpen.reading`'s checks (a regular file under `limit`), bytes that are not UTF-8 replaced."""
    return read_bytes(path, what, limit).decode("utf-8", errors="replace")
