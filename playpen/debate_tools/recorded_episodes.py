"""Reading recorded debate, consultancy and double consultancy episodes (clem's layout: playpen eval results,
playpen-records of a run, tournament records): who sat where, the judge's view of the dialogue, the verdict, the
scores.

It only reads, and only the debate games' episodes: the records' layout and their writer are playpen.records.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from playpen.reading import DATA_MAX_BYTES
from playpen.records import INSTANCE, SCORES, interactions_files, sidecar
from playpen.storage import read_json_or_none

# each game's advocates by seat: two sides (debate, double consultancy: A then B) or one consultant
ADVOCATES = {"debate": ("Debater A", "Debater B"), "consultancy": ("Consultant",),
             "double_consultancy": ("Consultant A", "Consultant B")}
GAMES = tuple(ADVOCATES)


@dataclass
class Episode:
    path: Path                  # its interactions.json
    game: str
    experiment: str
    game_id: int
    seats: dict                 # game role -> model name (ADVOCATES' roles, "Judge")
    correct: str | None
    player_1_side: str | None
    verdict: dict | None        # the GM's "verdict" note, None when the judge never decided (aborted)
    scores: dict = field(default_factory=dict)  # scores.json's episode scores, when scored
    interactions: dict = field(default_factory=dict)

    @property
    def aborted(self) -> bool:
        return self.verdict is None

    def judge_view(self) -> list[dict]:
        """The judge's own conversation as it saw it (user: what the GM sent, assistant: its replies)."""
        from playpen.dataset_from_records import player_view

        judge = next(name for name, p in self.interactions["players"].items()
                     if isinstance(p, dict) and p.get("game_role") == "Judge")
        return player_view(self.interactions["turns"], judge)


def _notes(interactions: dict, kind: str) -> list:
    return [e["action"]["content"] for events in interactions.get("turns", []) for e in events
            if e.get("from") == "GM" and e.get("to") == "GM" and (e.get("action") or {}).get("type") == kind]


def read_episode(path: Path) -> Episode | None:
    """The episode of one interactions.json, None when it is not a (complete) record of one of GAMES."""
    interactions = read_json_or_none(path, DATA_MAX_BYTES)
    if not isinstance(interactions, dict):
        return None
    meta = interactions.get("meta") or {}
    game = meta.get("game_name") or path.parents[2].name
    if game.removeprefix("playpen-") not in GAMES or not isinstance(interactions.get("players"), dict):
        return None
    instance = sidecar(path, INSTANCE, {})
    verdicts = _notes(interactions, "verdict")
    scores = (sidecar(path, SCORES, {}) or {}).get("episode scores", {})
    seats = {p["game_role"]: p.get("model_name", "") for name, p in interactions["players"].items()
             if name != "GM" and isinstance(p, dict)}
    side = verdicts[-1]["player_1_side"] if verdicts else instance.get("consultant_side", "A")
    return Episode(path, game.removeprefix("playpen-"), meta.get("experiment_name") or path.parents[1].name,
                   meta.get("game_id", instance.get("game_id")), seats, instance.get("correct"), side,
                   verdicts[-1] if verdicts else None, scores, interactions)


def episodes_under(folder: Path) -> list[Episode]:
    found = (read_episode(p) for p in interactions_files(folder))
    return [e for e in found if e is not None]


def mean(values) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else float("nan")
