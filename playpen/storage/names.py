"""Names and paths: the one rule for every name that becomes a folder or file name, the check of every path that
reaches a job script, and `path_under`, the one way an output path is made from names (no link followed)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TypeGuard

from playpen.config import Checked
from playpen.errors import PlaypenError

# One rule for every name that becomes a folder or file name (experiment, run id, sweep/meter/tournament names,
# game and model names) and for every path that reaches a job script (storage roots, -r/-o folders): a generated
# sbatch script takes them verbatim into `#SBATCH --output=...` lines, where sbatch honours no shell quoting.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
NAME_MAX = 128
NAME_RULE = f"letters, digits and . _ - (not first), at most {NAME_MAX} characters"
PART_MAX_BYTES = 255  # one name in a path: the file systems' NAME_MAX
UNSAFE_IN_PATH = re.compile(r"[\x00-\x1f\x7f'\"`$\\%]")  # control characters, quotes, $, `, \\, sbatch's %


def is_safe_name(value: object) -> TypeGuard[str]:
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
    bad = UNSAFE_IN_PATH.search(value) if isinstance(value, str) else None
    if not isinstance(value, str) or not value or bad:
        why = "is empty" if value == "" else "is not text" if not isinstance(value, str) else \
            f"contains {bad.group()!r}" if bad else ""
        raise PlaypenError(f"{what}: path {value!r} {why}; use a plain path (no control characters, quotes, "
                           f"$, `, \\ or %)")
    try:  # (bytes that are not UTF-8 arrive as surrogates: every JSON and CSV written about them would fail)
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PlaypenError(f"{what}: path {value!r} holds bytes that are not UTF-8; rename it with UTF-8 "
                           f"characters only") from None
    long = next((part for part in value.split("/") if len(part.encode("utf-8")) > PART_MAX_BYTES), None)
    if long is not None:  # (the file system refuses it: an OSError far from where the name came from)
        raise PlaypenError(f"{what}: path {value!r} has a name of {len(long.encode('utf-8'))} bytes, above the "
                           f"{PART_MAX_BYTES} a file system allows; shorten it")
    return value


def absolute_location(value: object, what: str) -> Path:
    """`value` as a job or a later command gets it: `~` and the working directory filled in, then checked as
    `check_location` checks the value itself (a newline in $HOME or in the working directory's name would
    otherwise reach a job script as a line of its own)."""
    path = Path(check_location(value, what)).expanduser().absolute()
    try:
        return Path(check_location(str(path), what))
    except PlaypenError as e:
        raise PlaypenError(f"{e} (it is {value!r} with ~ and the working directory filled in)") from None


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
