"""How playpen reads a file: only a regular file under a size bound (a FIFO or a link to /dev/zero, named or planted
where a file belongs, is one line instead of a hang or a machine out of memory), JSON with one-line errors, and YAML
without aliases, deep nesting or duplicate keys."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from playpen.errors import PlaypenError

# Size bounds of the files playpen reads whole into memory: a config-like file far above them is not one (a
# sparse file, a log named by mistake), and reading it would take the machine's memory first.
CONFIG_MAX_BYTES = 16 << 20  # configs, profiles, registries, key.json, state and marker files
DATA_MAX_BYTES = 4 << 30  # training data, prompts, instances files, metrics.jsonl
RECORD_MAX_BYTES = 256 << 20  # one episode's record file (interactions.json, instance.json, experiment.json):
                              # far above a real episode's, while a scorer's parse takes about twice the bytes


def read_bytes(path: str | Path, what: str, limit: int = CONFIG_MAX_BYTES) -> bytes:
    """The bytes of a regular file, or one line saying what the path is instead: missing, a folder, a FIFO, a
    device or a socket (reading those hangs or never ends: a link to /dev/zero), above `limit` bytes, or not
    readable. Opened without blocking, so a FIFO put in the file's place after a check cannot hang the read."""
    path = Path(path).expanduser()
    fd = _open_regular(path, what, limit)
    try:
        chunks, size = [], 0
        while chunk := os.read(fd, min(1 << 24, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # (it grew while being read)
                raise PlaypenError(f"{what} {path} grew above the {limit >> 20} MiB a {what} may have")
        return b"".join(chunks)
    except OSError as e:
        raise PlaypenError(f"{what} {path} cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def _open_regular(path: Path, what: str, limit: int) -> int:
    """A descriptor of `path` opened for reading, checked to be a regular file of at most `limit` bytes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise PlaypenError(f"{what} {path} not found") from None
    except IsADirectoryError:
        raise PlaypenError(f"{what} {path} is a folder, not a file") from None
    except OSError as e:
        raise PlaypenError(f"{what} {path} cannot be read ({e.strerror})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PlaypenError(f"{what} {path} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise PlaypenError(f"{what} {path} is not a regular file (a FIFO, device or socket); playpen reads "
                               f"only regular files: give the file itself")
        if info.st_size > limit:
            raise PlaypenError(f"{what} {path} is {info.st_size} bytes, above the {limit >> 20} MiB a {what} may "
                               f"have; give the right file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_regular_file(path: str | Path, what: str, limit: int = CONFIG_MAX_BYTES) -> None:
    """`read_bytes`'s checks without reading: for files a library opens by name after playpen (clemcore's
    key.json and registries), where a FIFO would block the library's plain open() forever."""
    os.close(_open_regular(Path(path).expanduser(), what, limit))


def read_text(path: str | Path, what: str, limit: int = CONFIG_MAX_BYTES) -> str:
    """The text of a file the user named (or playpen found), checked by `read_bytes`; a binary file is one line."""
    try:
        return read_bytes(path, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise PlaypenError(f"{what} {Path(path).expanduser()} is not a text file (binary?)") from None


def parse_json(text: str | bytes, where: str) -> Any:
    """JSON text parsed, or one line naming `where` and the position: malformed, or nested too deep for Python's
    parser (a RecursionError otherwise)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PlaypenError(f"{where}:{e.lineno}:{e.colno}: malformed JSON: {e.msg}") from None
    except RecursionError:
        raise PlaypenError(f"{where}: JSON nested too deep to read; flatten it") from None
    except UnicodeDecodeError:
        raise PlaypenError(f"{where}: not a text file (binary?)") from None


def read_json(path: str | Path, what: str, limit: int = CONFIG_MAX_BYTES) -> Any:
    """A JSON file's value: `read_text`'s checks, then `parse_json`'s."""
    return parse_json(read_text(path, what, limit), str(Path(path).expanduser()))


# ---------------------------------------------------------------- YAML

YAML_MAX_DEPTH = 64  # far above any config's nesting; far below the composer's recursion limit


class _Refused(yaml.MarkedYAMLError):
    """A YAML construct playpen's loader does not take (an alias, too deep a nesting, a duplicate key)."""


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases (`*name`: eight levels of ten make a 566-byte file expand to 10^8
    values), nested at most YAML_MAX_DEPTH deep (the composer recurses: 50,000 levels are a RecursionError), and
    without duplicate keys (the later one would silently win)."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(problem=f"aliases (*{event.anchor}) are not allowed; write the value out",
                           problem_mark=event.start_mark)
        self.depth += 1
        try:
            if self.depth > YAML_MAX_DEPTH:
                raise _Refused(problem=f"nested deeper than {YAML_MAX_DEPTH} levels",
                               problem_mark=self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor says so itself
                continue
            if duplicate:
                raise _Refused(problem=f"duplicate key {key!r}; keep one", problem_mark=key_node.start_mark)
        return super().construct_mapping(node, deep)


def yaml_value(text: str) -> Any:
    """YAML text as playpen reads every YAML (configs, profiles, overrides): `_BoundedLoader`'s rules."""
    return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506  (a SafeLoader subclass)


def load_yaml(path: str | Path, what: str = "config file") -> dict:
    path = Path(path)
    text = read_text(path, what)
    try:
        data = yaml_value(text)
    except _Refused as e:
        mark = e.problem_mark
        raise PlaypenError(f"{path}:{mark.line + 1}:{mark.column + 1}: {e.problem}") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise PlaypenError(f"{where}: YAML syntax error: {e.problem}") from None
    except yaml.YAMLError as e:  # e.g. control characters: a file that is not YAML at all
        raise PlaypenError(f"{path}: not a YAML file ({' '.join(str(e).split())[:120]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PlaypenError(f"{path}: top level must be a mapping of keys, got {type(data).__name__}")
    return data
