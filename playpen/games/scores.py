"""What a game's scorer reports about an episode, read in one place: clemcore's "episode scores" keys and the
Main Score rule every reader shares (NaN when the episode was aborted or logged none, as clemcore's quality mean
skips it; each reader then says what a NaN counts as for it)."""
from __future__ import annotations

import math

ABORTED, LOSE, SUCCESS, MAIN_SCORE = "Aborted", "Lose", "Success", "Main Score"
# what every clemcore game logs; the rest of an episode's scores are the game's own (numberguess's Guesses, ...)
COMMON = {ABORTED, LOSE, SUCCESS, MAIN_SCORE, "Request Count", "Parsed Request Count", "Violated Request Count",
          "Request Success Ratio"}


def main_score(episode_scores: dict | None) -> float:
    """The episode's Main Score, 0-100; NaN when missing, unreadable or not finite."""
    try:
        value = float((episode_scores or {})[MAIN_SCORE])
    except (TypeError, KeyError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan
