"""playpen-records: every episode in clem's results layout, written atomically by a background thread.

    <records_dir>/<models>/<records_tag>/<game>/<experiment>/experiment.json
                                                       .../instance_00012/{instance.json, interactions.json,
                                                                            scores.json}

`<models>` is clemcore's name for the players (`learner`, or `learner--teacher`); without a tag the tag level
is left out, which is exactly `clem run`'s layout. `clem score`, `clem transcribe` and `clem eval` read these.

No clobbering: an episode folder is claimed with `mkdir` (atomic, also on NFS), so each claimed folder has
exactly one writer. The preferred name is `instance_<game_id>` (`_g<k>` for the k-th copy of a group, `_b<k>`
for the k-th branch); if another episode, another job, or an earlier run of the same tag already holds it, the
name gets `.1`, `.2`, ... Files are written to a temp file and renamed, so readers never see a partial file.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from playpen.errors import PlaypenError
from playpen.storage import atomic_write_json


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


def preferred_name(game_id: int, group_index: int = 0, branch_index: int = 0) -> str:
    name = f"instance_{int(game_id):05d}"
    if group_index:
        name += f"_g{group_index}"
    if branch_index:
        name += f"_b{branch_index}"
    return name


def claim_dir(parent: Path, preferred: str) -> Path:
    parent.mkdir(parents=True, exist_ok=True)
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
        self.root = Path(records_dir) / models
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
                self.written.append(path)
                if record.target is not None:
                    record.target.record_path = path
            except OSError as e:
                self._errors.append(f"{e.filename or ''}: {e.strerror or e}")
            except Exception as e:  # noqa: BLE001 - keep writing the others, report at close()
                self._errors.append(f"{type(e).__name__}: {e}")

    def write(self, record: EpisodeRecord) -> Path:
        experiment_dir = self.root / record.game / record.experiment["name"]
        experiment_file = experiment_dir / "experiment.json"
        if not experiment_file.is_file():
            experiment_dir.mkdir(parents=True, exist_ok=True)
            config = {k: v for k, v in record.experiment.items() if k != "game_instances"}
            config.update(timestamp=datetime.now().isoformat(), game_name=record.game, game_path=self.game_path,
                          player_models=self.infos)
            atomic_write_json(experiment_file, config)
        path = claim_dir(experiment_dir, record.preferred)
        atomic_write_json(path / "instance.json", record.instance)
        atomic_write_json(path / "interactions.json", record.interactions)
        if record.scores is not None:
            atomic_write_json(path / "scores.json", record.scores)
        if record.error:
            atomic_write_json(path / "error.json", {"timestamp": datetime.now().isoformat(), "message": record.error})
        return path


