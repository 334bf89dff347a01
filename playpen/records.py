"""Episode records in clem's results layout: the one module that writes them (the rollout engine's playpen-records,
eval's results) and says where their parts are (`playpen data`, reward pairs, eval's scoring, the debate tools).

    <records_dir>/<models>/<records_tag>/<game>/<experiment>/experiment.json
                                                       .../instance_00012/{instance.json, interactions.json,
                                                                            scores.json}

`<models>` is clemcore's name for the players (`learner`, or `learner--teacher`: `model_identifier`, read back by
`model_names`); without a tag the tag level is left out, which is exactly `clem run`'s layout (`clem score`,
`clem transcribe` and `clem eval` read these; clembench's runs name episodes `episode_N` and experiments
`N_name`: `episode_location` reads both).

No clobbering: an episode folder is claimed with `mkdir` (atomic, also on NFS), so each claimed folder has
exactly one writer. The preferred name is `instance_<game_id>` (`_g<k>` for the k-th copy of a group, `_b<k>`
for the k-th branch); if another episode, another job, or an earlier run of the same tag already holds it, the
name gets `.1`, `.2`, ... Files are written to a temp file and renamed, so readers never see a partial file.
"""
from __future__ import annotations

import hashlib
import queue
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from playpen.errors import PlaypenError
from playpen.reading import RECORD_MAX_BYTES
from playpen.storage import atomic_write_json, make_folder, read_json_or_none, slug_joined


INTERACTIONS, SCORES, INSTANCE, EXPERIMENT, ERROR = (
    "interactions.json", "scores.json", "instance.json", "experiment.json", "error.json")


# ---------------------------------------------------------------- names and places

def model_identifier(names: list[str]) -> str:
    """clemcore's folder name for the players (Model.to_identifier): 'a', 'a--b', or a hashed group name."""
    joined = "--".join(names)
    if len(names) <= 2:
        return slug_joined(names, "--")
    return f"group-{len(names)}p-{hashlib.sha1(joined.encode()).hexdigest()[:8]}"


def model_names(folder: str) -> list[str]:
    """The players' model names in a results folder name ('a-t0.0--b-t0.0': clembench's runs add the temperature)."""
    return [re.sub(r"-t\d+(\.\d+)?$", "", m) for m in folder.split("--")]


@dataclass(frozen=True)
class EpisodeLocation:
    """What an episode file's place says: <model_dir>/<game>/<experiment>/<episode>/<file>."""
    model_dir: str
    game: str
    experiment: str  # as the folder is named (clembench: "0_high_en")
    episode: str

    @property
    def experiment_name(self) -> str:
        return re.sub(r"^\d+_", "", self.experiment)

    @property
    def task_id(self) -> int | None:
        number = re.search(r"(\d+)", self.episode)
        return int(number.group(1)) if number else None


def episode_location(path: Path) -> EpisodeLocation:
    """The location of an episode's file (interactions.json, scores.json, ...), as clemeval parses it."""
    model_dir, game, experiment, episode = Path(path).parts[-5:-1]
    return EpisodeLocation(model_dir, game, experiment, episode)


def interactions_files(root: str | Path, finished: bool = False) -> list[Path]:
    """Every episode's interactions.json under `root`, in path order; `finished`: not those that broke off with an
    error (error.json from the rollout engine), which clem's runner would not have recorded at all."""
    root = Path(root)
    # (a hidden folder is a game still being played, or one a killed process left: .playing.*)
    files = [p for p in sorted(root.rglob(INTERACTIONS))  # (a FIFO or device there is no record: readers hang)
             if not any(part.startswith(".") for part in p.relative_to(root).parts[:-1]) and p.is_file()]
    return [p for p in files if not (p.parent / ERROR).exists()] if finished else files


def sidecar(path: Path, name: str, default=None):
    """An episode's other file (instance.json, scores.json) beside its interactions.json, parsed; `default` when it
    is missing or unreadable (clemcore writes bare NaN, which Python's json reads)."""
    value = read_json_or_none(Path(path).parent / name, RECORD_MAX_BYTES)  # (a FIFO planted there: absent)
    return default if value is None else value


# ---------------------------------------------------------------- writing

@dataclass
class EpisodeRecord:
    game: str
    experiment: dict
    instance: dict
    interactions: dict
    scores: dict | None
    preferred: str  # preferred folder name
    error: str | None = None
    target: object = None  # the Episode whose record_path is set once written
    after_write: Callable[[Path], None] | None = None  # called with the episode's folder once it is written


def preferred_name(game_id: int, group_index: int = 0, branch_index: int = 0) -> str:
    name = f"instance_{int(game_id):05d}"
    if group_index:
        name += f"_g{group_index}"
    if branch_index:
        name += f"_b{branch_index}"
    return name


def claim_dir(parent: Path, preferred: str) -> Path:
    make_folder(parent, "records folder")
    for n in range(10_000):
        path = parent / (preferred if n == 0 else f"{preferred}.{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise PlaypenError(f"{parent}: could not claim a free folder for {preferred}")


class RecordWriter:
    """Writes episode records on background threads (each file is fsync'ed, so several threads overlap the
    waits); `close()` waits for all of them and reports failures."""

    def __init__(self, records_dir: str | Path, models: str, tag: str | None, player_model_infos: dict,
                 threads: int = 4, game_path: str | Path | None = None):
        self.records_dir = Path(records_dir)
        self.root = self.records_dir / models
        if tag:
            if "/" in tag or tag.startswith("."):
                raise PlaypenError(f"records_tag {tag!r} must be a plain folder name (no '/')")
            self.root = self.root / tag
        self.infos = player_model_infos
        self.game_path = None if game_path is None else str(game_path)  # which folder the game came from
        self.written: list[Path] = []
        self._errors: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._loop, name=f"playpen-records-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, record: EpisodeRecord) -> None:
        self._queue.put(record)

    def close(self) -> list[Path]:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise PlaypenError(f"{len(self._errors)} episode record(s) could not be written under {self.root}: "
                               f"{self._errors[0]}")
        return self.written

    def _loop(self) -> None:
        while True:
            record = self._queue.get()
            if record is None:
                return
            try:
                path = self.write(record)
                if record.after_write is not None:
                    record.after_write(path)
                self.written.append(path)
                if record.target is not None:
                    record.target.record_path = path
            except OSError as e:
                self._errors.append(f"{e.filename or ''}: {e.strerror or e}")
            except Exception as e:  # noqa: BLE001 - keep writing the others, report at close()
                self._errors.append(f"{type(e).__name__}: {e}")

    def write(self, record: EpisodeRecord) -> Path:
        experiment_dir = self.root / record.game / record.experiment["name"]
        experiment_file = experiment_dir / EXPERIMENT
        make_folder(experiment_dir, "records folder", root=self.records_dir)  # (no level of it a link planted there)
        if not experiment_file.is_file():
            config = {k: v for k, v in record.experiment.items() if k != "game_instances"}
            config.update(timestamp=datetime.now().isoformat(), game_name=record.game, game_path=self.game_path,
                          player_models=self.infos)
            atomic_write_json(experiment_file, config)
        path = claim_dir(experiment_dir, record.preferred)
        atomic_write_json(path / INSTANCE, record.instance)
        atomic_write_json(path / INTERACTIONS, record.interactions)
        if record.scores is not None:
            atomic_write_json(path / SCORES, record.scores)
        if record.error:
            atomic_write_json(path / ERROR, {"timestamp": datetime.now().isoformat(), "message": record.error})
        return path


