"""Folders playpen writes into: made or entered only as real folders (`make_folder`), made new where a library
writes by name (`staging_folder`; `private_folder`, which is held, is in locks.py) and put in place whole
(`replace_folder`), and removed or moved only when proven inside their root."""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage.names import LINK_ADVICE, inside

OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH

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


def make_private_folder(folder: str | Path, what: str, root: str | Path) -> Path:
    """A new folder only this user can enter (0700), made by this call (it must not exist yet: a folder already
    there was made by someone, maybe a neighbour, before this submission), under real folders inside `root`.
    For folders whose files run code when loaded (submitit's pickles): see `open_private_file`."""
    folder = Path(folder)
    make_folder(folder.parent, what, root)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        raise PlaypenError(f"{what} {folder} already exists, made before this submission (by whom: ls -ld it); "
                           f"playpen makes a new one each time: remove it and resubmit") from None
    except OSError as e:
        raise PlaypenError(f"{what} {folder} cannot be made ({e.strerror}); pick a writable folder") from None
    os.chmod(folder, 0o700)  # (mkdir's mode is cut by the umask only; this states it)
    return folder


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


def close_to_others(folder: str | Path, what: str = "folder") -> Path:
    """Make `folder` (a real folder) one that only this user can create names in, for folders a library writes
    files into by name (the Trainer's checkpoints/, its README.md and checkpoint-N; a run's logs): with nobody
    else able to add or rename an entry there, no link can be planted before or during the write. The folder
    must be this user's (someone else's folder at a predictable name is refused in one line); its group and
    other write bits are cleared, the read bits stay (teammates read it). A link, device, FIFO or socket in it, or
    a file of someone else's or with more than one link (planted while it was open, e.g. under an older playpen),
    is refused in one line naming it: the library would write through it."""
    folder = Path(folder)
    _real_folder(folder, what)
    info = os.lstat(folder)
    if info.st_uid != os.getuid():
        raise PlaypenError(f"{what} {folder} belongs to another user (uid {info.st_uid}), who could plant links "
                           f"in it; pick another name (run_id=...) or folder")
    if info.st_mode & OTHERS_WRITE:
        os.chmod(folder, stat.S_IMODE(info.st_mode) & ~OTHERS_WRITE)
    with os.scandir(folder) as entries:
        for entry in entries:
            found = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(found.st_mode):
                raise PlaypenError(f"{entry.path} is a symbolic link (to {os.readlink(entry.path)}) that playpen did "
                                   f"not make; {LINK_ADVICE}")
            if not (stat.S_ISDIR(found.st_mode) or stat.S_ISREG(found.st_mode)):
                raise PlaypenError(f"{entry.path} is not a regular file (a FIFO, device or socket); remove it")
            if stat.S_ISREG(found.st_mode) and (found.st_nlink != 1 or found.st_uid != os.getuid()):
                why = f"uid {found.st_uid}'s" if found.st_uid != os.getuid() else f"{found.st_nlink} hard links'"
                raise PlaypenError(f"{entry.path} is a file playpen did not make ({why}); playpen writes files "
                                   f"there by name and does not write into it: remove it")
    return folder


def check_own_output(folder: str | Path, marker: str, what: str) -> Path:
    """`folder`, a folder a tool replaces whole (`playpen models build-tiny --out DIR`), if it is missing, empty,
    or the tool's own earlier output (it holds the `marker` file the tool writes last); else one line, before
    anything is built: a folder of the user's named by mistake is never deleted."""
    folder = Path(folder)
    if folder.is_symlink():
        raise PlaypenError(f"{what} {folder} is a symbolic link (to {os.readlink(folder)}); {LINK_ADVICE}")
    if os.path.lexists(folder) and not folder.is_dir():
        raise PlaypenError(f"{what} {folder} is a file; give a folder (a new one, or one this tool wrote)")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / marker).is_file():
        raise PlaypenError(f"{what} {folder} holds files this tool did not write (no {marker}); it replaces the "
                           f"whole folder: give a new folder, or move those files away")
    return folder


def share_as_umask(folder: str | Path, closed: bool = False) -> None:
    """Give `folder` and everything in it the modes the umask gives new folders and files: libraries write some
    files 0600 (safetensors saves through a private temporary file) and mkdtemp makes 0700 folders, which would
    let teammates resolve a model (`umask 002` for a shared group) but not load it. `closed`: the folders stay
    closed to others' writes (`close_to_others`: a run's checkpoints and model; teammates read them, nobody else
    adds a name). Links are left alone."""
    umask = current_umask()
    for here, folders, files in os.walk(folder):
        os.chmod(here, 0o777 & ~umask & ~(OTHERS_WRITE if closed else 0))
        for name in files:
            path = os.path.join(here, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode):
                os.chmod(path, (0o777 if mode & 0o100 else 0o666) & ~umask)


def replace_folder(staged: str | Path, target: str | Path, root: str | Path, closed: bool = False) -> Path:
    """Move a folder written in a `private_folder` to `target` (inside `root`), replacing what was there; its
    modes become the umask's (`share_as_umask`, `closed` to others' writes where asked)."""
    staged, target = Path(staged), Path(target)
    share_as_umask(staged, closed)
    remove_tree(target, root)
    make_folder(target.parent, "folder", root)
    return move_tree(staged, target, root)


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
