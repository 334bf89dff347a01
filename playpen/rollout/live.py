"""The state of the engine's episodes while they play: a job (an instance to play, maybe a branch), a live
episode (its game master, recorder and conversations), a snapshot before a learner reply (for branching) and the
session of one `play` or `branch` call (playpen.rollout.engine runs them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from clemcore.clemgame import GameInteractionsRecorder, ResultsFolder

from playpen.rollout.episode import BranchInfo
from playpen.records import RecordWriter


@dataclass
class Job:
    experiment: dict
    instance: dict
    group_index: int = 0
    branch: BranchInfo | None = None
    snapshot: "Snapshot | None" = None


@dataclass
class Snapshot:
    """A live episode just before a learner reply (for branching): game master, conversations, step infos."""
    gm: object
    convs: dict
    step_infos: list
    turn: int


@dataclass
class LiveEpisode:
    index: int
    job: Job
    gm: object
    recorder: GameInteractionsRecorder
    uid: str
    convs: dict = field(default_factory=dict)
    step_infos: list = field(default_factory=list)
    snapshots: list | None = None
    done: bool = False
    error: str | None = None

    def fail(self, message: str) -> None:
        self.error, self.done = message, True


class ClaimedFolders(ResultsFolder):
    """clemcore's results layout where each episode's folder is the one the RecordWriter claimed for it
    (`instance_N`, or `instance_N.1` when that was taken), so that clemcore's own file savers (run.json, player
    requests, completed/error signals) write beside the engine's records."""

    def __init__(self, results_dir: Path, run_dir: str):
        super().__init__(results_dir, run_dir)
        self.claimed: dict[int, Path] = {}  # id(game master) -> its episode's folder, while the savers run

    def to_instance_dir_path(self, game_master, game_instance) -> Path:
        # before the writer claims an episode's folder there is nothing of it to clear: claimed folders are new
        return self.claimed.get(id(game_master), self.to_run_dir_path() / ".unclaimed")


@dataclass
class PlaySession:
    game: str
    bench: object
    seats: list  # clemcore models in seat order (before clemcore's automatic expansion)
    models_id: str
    infos: dict
    writer: RecordWriter | None
    progress: object
    snapshot_turn: int | None | str = None  # "all" for random branch turns, an int, or None (no snapshots)
    snapshots: dict = field(default_factory=dict)  # job index -> snapshots of that episode (branching only)
    prefix_caches: dict = field(default_factory=dict)  # per policy: shared prompt prefix (see generation.py)
    callbacks: object = None  # clemcore's file savers (GameBenchmarkCallbackList) when clem's files are written
    folders: ClaimedFolders | None = None  # where those savers write
