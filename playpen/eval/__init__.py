"""Evaluation: `playpen eval` (clemscore/statscore of one model) and sweeps (models/checkpoints × games).

    from playpen.eval import evaluate
    val = evaluate("playpen-tiny", games=["wordle"])   # → the <model>.val.json dict (clemscore, statscore, ...)

Modules: evaluation (play, score, val.json), partners (a partner in the other seat, experiment selection),
scoring (clemcore's clemscore formula), clemlog (clemcore's log), sweep + cells (sweeps of models/checkpoints ×
games), plots (sweep tables and PNGs), screening (`playpen screen`), cli (`playpen eval`). Importing this
package is light: torch and clemcore load when games are played.
"""
from __future__ import annotations

from playpen.eval.evaluation import evaluate

__all__ = ["evaluate"]
