"""clemscore and statscore from clemcore `scores.json` files, computed exactly as `clem eval` does.

clemcore's definition (clemcore/clemeval.py, `save_clem_table`):
  per game:    % played = 100 × mean(1 − Aborted);  quality = mean(Main Score) over episodes where it is not NaN
               (both rounded to 2 decimals)
  across games: the mean of the per-game % played and the mean of the per-game quality (NaN games skipped),
               rounded to 2 decimals
  clemscore   = (mean % played / 100) × mean quality, rounded to 2 decimals.
statscore is the same formula over the static games only. Where clemcore would write NaN because nothing was
played at all (every quality is NaN), we write 0.0: 0 % played scores nothing, and a number compares.

Only numpy and the standard library are used here, so reading results is cheap. Both record layouts are read:
clemcore 3.7 (`<model>/<game>/<experiment>/instance_NNNNN/scores.json`) and clembench v2.0 runs
(`<model-pair>/<game>/<N_experiment>/episode_N/scores.json`); clemcore's bare `NaN` tokens are accepted.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from playpen.errors import PlaypenError
from playpen.games.scores import ABORTED, COMMON, LOSE, SUCCESS, main_score
from playpen.reading import RECORD_MAX_BYTES, read_json
from playpen.records import episode_location

SCORES_FILE = "scores.json"


@dataclass(frozen=True)
class EpisodeScores:
    model: str  # the folder clemcore names after the player models ("playpen-tiny", "A-t0.0--B-t0.0")
    game: str
    experiment: str
    episode: str
    scores: dict  # the "episode scores" block of scores.json

    @property
    def played(self) -> float:
        return 1.0 - float(self.scores[ABORTED])

    @property
    def quality(self) -> float:
        return main_score(self.scores)


@dataclass(frozen=True)
class GameSummary:
    game: str
    episodes: int
    played: float  # % played, 0-100, rounded like clemcore
    quality: float | None  # mean Main Score over played episodes, 0-100; None when nothing was played
    success: float  # % of episodes with Success = 1
    lose: float
    aborted: float
    own: dict = field(default_factory=dict)  # the game's own episode scores, each its mean where not NaN

    @property
    def clemscore(self) -> float:
        """The game's own clemscore: % played / 100 × quality (0 when nothing was played)."""
        return 0.0 if self.quality is None else _round(self.played / 100 * self.quality)

    def to_dict(self) -> dict:
        return {**asdict(self), "clemscore": self.clemscore}


def _round(x: float) -> float:
    return float(np.round(x, 2))  # numpy rounding, as pandas' DataFrame.round in clemeval


def _nanmean(values: Iterable[float]) -> float:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def read_scores_file(path: str | Path) -> dict:
    """The episode-scores block of one scores.json (Python's json accepts clemcore's bare NaN)."""
    data = read_json(path, "scores file", RECORD_MAX_BYTES)
    if not isinstance(data, dict) or not isinstance(data.get("episode scores"), dict):
        raise PlaypenError(f"{path}: no 'episode scores' mapping (not a clemcore scores.json); remove it")
    return data["episode scores"]


def episode_from_path(path: Path) -> EpisodeScores:
    where = episode_location(path)  # same parsing as clemeval.parse_directory_name
    return EpisodeScores(where.model_dir, where.game, where.experiment, where.episode, read_scores_file(path))


def load_episode_scores(root: str | Path, model: str | None = None,
                        games: Iterable[str] | None = None) -> list[EpisodeScores]:
    """Every `scores.json` below `root`, optionally only one model folder and some games."""
    games = set(games) if games is not None else None
    episodes = []
    for path in sorted(Path(root).rglob(SCORES_FILE)):
        if len(path.relative_to(root).parts) < 5:
            continue
        where = episode_location(path)
        if (model is None or where.model_dir == model) and (games is None or where.game in games):
            episodes.append(episode_from_path(path))
    return episodes


def summarize_game(game: str, episodes: list[EpisodeScores]) -> GameSummary:
    """Per-game % played and quality as clemcore computes them (means rounded to 2 decimals)."""
    if not episodes:
        raise ValueError(f"no scored episodes for game {game}")
    n = len(episodes)
    played = _round(100 * float(np.mean([e.played for e in episodes])))
    quality = _nanmean(e.quality for e in episodes)
    rate = lambda key: _round(100 * sum(float(e.scores.get(key) or 0) for e in episodes) / n)  # noqa: E731
    own = sorted({key for e in episodes for key in e.scores} - COMMON)
    means = {key: _nanmean(_number(e.scores.get(key)) for e in episodes) for key in own}
    return GameSummary(game=game, episodes=n, played=played,
                       quality=None if math.isnan(quality) else _round(quality),
                       success=rate(SUCCESS), lose=rate(LOSE), aborted=rate(ABORTED),
                       own={key: float(np.round(value, 4)) for key, value in means.items() if not math.isnan(value)})


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def summarize(episodes: list[EpisodeScores]) -> dict[str, GameSummary]:
    """One summary per game, in game-name order."""
    by_game: dict[str, list[EpisodeScores]] = {}
    for e in episodes:
        by_game.setdefault(e.game, []).append(e)
    return {game: summarize_game(game, eps) for game, eps in sorted(by_game.items())}


def aggregate_score(summaries: Iterable[GameSummary]) -> dict | None:
    """clemcore's across-game aggregate: mean % played, mean quality (NaN games skipped) and their product.
    None when there are no games (e.g. statscore without static games)."""
    summaries = list(summaries)
    if not summaries:
        return None
    played = _round(float(np.mean([s.played for s in summaries])))
    quality = _nanmean(s.quality for s in summaries)
    quality = None if math.isnan(quality) else _round(quality)
    score = 0.0 if quality is None else _round(played / 100 * quality)
    return {"score": score, "played": played, "quality": quality, "games": [s.game for s in summaries]}


def val_scores(summaries: dict[str, GameSummary], static_games: Iterable[str]) -> dict:
    """The body of `<model>.val.json`: clemscore over dialogue games, statscore over static games, per game."""
    static = set(static_games)
    dialogue = [s for g, s in summaries.items() if g not in static]
    statics = [s for g, s in summaries.items() if g in static]
    clem, stat = aggregate_score(dialogue), aggregate_score(statics)
    return {
        "clemscore": None if clem is None else clem["score"],
        "statscore": None if stat is None else stat["score"],
        "clem": clem,
        "static": stat,
        "games": {g: {**s.to_dict(), "static": g in static} for g, s in summaries.items()},
    }
