"""Run directories on shared storage: the storage root, run ids, checkpoints and the RunDir layout
    <storage_root>/<experiment>/<run_id>/{config.yaml, checkpoints/, playpen-records/, logs/, metrics.jsonl}"""
from __future__ import annotations

import os
import re
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage.folders import close_to_others, make_folder
from playpen.storage.names import (NAME_RULE, absolute_location, check_location, check_name, is_safe_name, not_a_link,
                                   path_under)

STORAGE_ENV = "PLAYPEN_STORAGE"
DEFAULT_STORAGE = "runs"
CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")  # the Hugging Face Trainer's checkpoints/checkpoint-<step>/


def check_output_file(path: str | Path, what: str) -> Path:
    """An output file a user named (`-o out.jsonl`), checked before anything runs: a plain path (as
    `check_location`), not a symbolic link, not a folder, socket or block device (a FIFO or character device is
    written as a stream: `write_output`), in a folder where a file can be created. Written by `write_output`."""
    path = not_a_link(Path(check_location(str(path), what)).expanduser(), what)
    if path.is_dir():
        raise PlaypenError(f"{what} {path} is a folder; give a file, e.g. {what} {path / 'out.json'}")
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # (a new name; a file on the way is said below)
        mode = stat.S_IFREG
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
        return path
    if not stat.S_ISREG(mode):
        raise PlaypenError(f"{what} {path} is a socket or block device; give a file")
    if why := unwritable(path.parent):
        raise PlaypenError(f"{what} {path} cannot be written ({why}); give {what} a file in a writable folder")
    return path


def resolve_storage_root(configured: str | Path | None = None) -> Path:
    """Config value, else $PLAYPEN_STORAGE, else ./runs; must be writable (checked before anything runs)."""
    root = absolute_location(str(configured or os.environ.get(STORAGE_ENV) or DEFAULT_STORAGE), "storage_root")
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
        model_registry.json may define (playpen.model_registry)."""
        return f"{self.path.parent.name}-{self.path.name}"

    def create(self) -> "RunDir":
        """The run folder and its checkpoints/, records and logs, each this user's and closed to others' writes
        (`close_to_others`): the Trainer, TensorBoard and the trackers write files there by name (README.md,
        checkpoint-N, event files), and run ids are predictable, so nobody else may create a name in them."""
        if not os.path.lexists(self.path):  # (a run that exists already keeps its name: it is resumed)
            if other := self.same_model_name():
                raise PlaypenError(f"run folder {self.path} would register the model {self.model_name!r}, which "
                                   f"run folder {other} spells too (<experiment>-<run_id>); pick another run_id "
                                   f"or experiment")
        make_folder(not_a_link(self.path, "run folder"), "run folder")
        for d in (self.checkpoints, self.records, self.logs):  # (old checkpoints are deleted in there)
            make_folder(d, "run folder", root=self.path)
        for d in (self.path, self.checkpoints, self.records, self.logs):
            close_to_others(d, "run folder")
        return self

    def same_model_name(self) -> Path | None:
        """Another run folder under the same root whose `<experiment>-<run_id>` is this run's model name
        (`a-b/c` and `a/b-c`), if there is one."""
        root, name = self.path.parent.parent, self.model_name
        for cut in (i for i, char in enumerate(name) if char == "-"):
            experiment, run_id = name[:cut], name[cut + 1:]
            other = root / experiment / run_id
            if is_safe_name(experiment) and is_safe_name(run_id) and other != self.path and is_run_dir(other):
                return other
        return None

    @classmethod
    def for_experiment(cls, storage_root: str | Path | None, experiment: str, run_id: str | None = None) -> "RunDir":
        """<storage_root>/<experiment>/<run_id>, by `path_under`: safe names, no link followed, inside the root."""
        run_id = _check_run_names(experiment, run_id or new_run_id())
        return cls(path_under(resolve_storage_root(storage_root), experiment, run_id, what="run folder"))

    @classmethod
    def under(cls, root: Path, experiment: str, run_id: str) -> "RunDir":
        """As `for_experiment`, under a root that is already resolved and checked (nothing is created)."""
        return cls(path_under(root, experiment, _check_run_names(experiment, run_id), what="run folder"))


def _check_run_names(experiment: str, run_id: str) -> str:
    """`run_id` if it and `experiment` are safe names that together make a model name (no '--')."""
    run_id = check_name(run_id, "run_id")
    check_name(experiment, "experiment")
    model_name = f"{experiment}-{run_id}"
    if "--" in model_name or not is_safe_name(model_name):  # (`a--b`: model a's results with partner b)
        raise PlaypenError(f"experiment and run_id make the model name {model_name!r}, which names results "
                           f"folders and must be {NAME_RULE} without '--'; shorten or rename them")
    return run_id
