"""The state of the engine's episodes while they play: a job (an instance to play, maybe a branch), a live
episode (its game master, recorder and conversations), a snapshot before a learner reply (for branching) and the
session of one `play` or `branch` call (playpen.rollout.engine runs them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from clemcore.clemgame import GameInteractionsRecorder

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
