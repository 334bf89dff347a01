"""Offline labellers: callable scorers that need no model hub. Each takes a list of texts and returns one float
per text, higher = more of the property. They label texts for reward-model training (`playpen meter --classifier
vader` writes a labelled jsonl) and serve as independent meters of what RL against a learned reward changed.

vaderSentiment (PyPI, pinned in requirements/lock.txt) is a lexicon + rules sentiment scorer shipped with its
lexicon, so it runs offline and deterministically. alt-profanity-check was considered too; it pins scikit-learn
(+ scipy), which would more than double what the lock installs for one labeller, so it is not bundled: register
it yourself as `module:function` if you need it.
"""
from __future__ import annotations

from functools import lru_cache

from playpen.errors import PlaypenError


@lru_cache(maxsize=1)
def _vader():
    try:
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
    except ImportError:
        raise PlaypenError("scorer 'vader' needs vaderSentiment (pip install -r requirements/cpu.txt)") from None
    return SentimentIntensityAnalyzer()


def vader_compound(texts: list[str]) -> list[float]:
    """VADER's compound sentiment in [-1, 1] (> 0.05 is VADER's own "positive")."""
    analyzer = _vader()
    return [float(analyzer.polarity_scores(text)["compound"]) for text in texts]


vader_compound.threshold = 0.05  # the share above this is the share of positive texts
