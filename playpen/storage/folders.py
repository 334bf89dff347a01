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
