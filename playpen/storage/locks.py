"""One process per folder: `exclusive_folder`, a flock on a lock file that playpen opens as it opens every file it
appends to (no link followed, one link only) and never truncates; `private_folder`, a new folder held that way
while a library writes into it, and `remove_abandoned`, which removes the private folders that killed processes
left (their lock free)."""
from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from playpen.errors import PlaypenError
from playpen.storage.files import STALE_TEMP_S, _own_regular_file
from playpen.storage.folders import make_folder, remove_tree
from playpen.storage.names import LINK_ADVICE

LOCK_FILE = ".playpen.lock"
LOCK_RECORD_BYTES = 200  # "pid N on HOST", padded: every holder writes the whole record, nothing is truncated
LOCK_RECORD = re.compile(rb"\s*(pid \d+ on \S+)?\s*")


@contextmanager
def exclusive_folder(folder: str | Path, in_use: str, advice: str, lock_file: str = LOCK_FILE,
                     waiting: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold `folder` (created if missing) for this process while the block runs; if another process holds it,
    raise one line: "<in_use> (pid N on HOST); <advice>".

    flock on `<folder>/.playpen.lock`, never waiting: the kernel drops the lock when the holder exits, crashes
    or is killed, so there is no stale lock to clean up, and Linux maps flock onto POSIX locks on NFS, so two
    nodes see each other's lock on shared storage. The file stays (deleting a lock file lets a third process
    lock a fresh file while a second still holds the old one); it only says who held it last. It is opened as
    `open_append` opens files (no link followed, one link only) and must hold nothing but such a record, so a
    file playpen did not write is never overwritten. `lock_file` holds one part of a folder that several
    processes share (a tournament's matches, a model built into $PLAYPEN_HOME/models). With `waiting`, a held
    lock is waited for instead (after `waiting(holder)` says so): concurrent jobs building one model.
    """
    folder = make_folder(folder)
    path = folder / lock_file
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as e:  # read-only mount, another user's folder, a file in the way
        if e.errno == errno.ELOOP:
            raise PlaypenError(f"lock file {path} is a symbolic link (to {os.readlink(path)}); {LINK_ADVICE}") \
                from None
        if e.errno == errno.ENXIO or (os.path.lexists(path) and not os.path.isfile(path)):  # (a socket, a FIFO)
            raise PlaypenError(f"lock file {path} is not a regular file (a FIFO, device or socket); remove it") \
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
            if waiting is None:
                raise PlaypenError(f"{in_use} ({holder}); {advice}") from None
            waiting(holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        record = f"pid {os.getpid()} on {socket.gethostname().split('.')[0]}"[:LOCK_RECORD_BYTES - 1]
        os.pwrite(fd, record.ljust(LOCK_RECORD_BYTES - 1).encode() + b"\n", 0)
        yield folder
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def private_folder(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A new folder in `parent` that only this user can enter (mkdtemp: a fresh random name, mode 0700), held with
    `exclusive_folder` while the block runs and removed on exit: where a library writes files by name (clemcore's
    tables and records, a model's files), nothing can be planted before it writes. What it wrote is moved out with
    `publish` or `replace_folder`. A process killed inside the block (SIGKILL) leaves the folder, its lock free:
    `remove_abandoned` removes it on the next run over `parent`."""
    parent = make_folder(parent)
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        with exclusive_folder(folder, f"private folder {folder} is in use", "rerun"):
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_abandoned(parent: str | Path, prefixes: tuple[str, ...]) -> list[Path]:
    """Remove the `private_folder`s named with one of `prefixes` in `parent` that killed processes left: only real
    folders (no link, file or FIFO), only this user's, and only when no live process holds their lock (a concurrent
    run's folder is held for as long as it writes into it). A folder without a lock file is left alone for
    STALE_TEMP_S (its maker takes the lock a moment after mkdtemp). Returns the folders removed."""
    removed: list[Path] = []
    try:
        with os.scandir(parent) as entries:
            names = [e.name for e in entries if e.name.startswith(prefixes)]
    except OSError:
        return removed
    for name in names:
        folder = Path(parent) / name
        try:
            info = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if not os.path.lexists(folder / LOCK_FILE):
            if time.time() - info.st_mtime < STALE_TEMP_S:
                continue
        else:
            try:  # free: its holder is gone (the kernel dropped the lock); released before removing (NFS)
                with exclusive_folder(folder, "in use", "-"):
                    pass
            except PlaypenError:
                continue  # held by a live process, or a lock file that is not playpen's: not ours to judge
        remove_tree(folder, parent)
        removed.append(folder)
    return removed
