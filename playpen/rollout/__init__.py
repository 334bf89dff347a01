"""Batched rollouts of clemcore games for training and evaluation.

    from playpen.rollout import RolloutEngine, Episode, LocalPolicy, preference_pairs
    from playpen.games.instances import load_instances

See engine.py (scheduling), generation.py (batched KV-cached sampling), episode.py (Episode and the token
invariant), playpen.records (the records layout), branching.py (DPO pairs). Games and their instances come from
playpen.games (registry.py, instances.py).
"""
from playpen.rollout.branching import preference_pairs
from playpen.rollout.engine import RolloutEngine
from playpen.rollout.episode import BranchInfo, Episode, Trace
from playpen.rollout.policy import LocalPolicy, PolicyModel

__all__ = ["RolloutEngine", "Episode", "Trace", "BranchInfo", "LocalPolicy", "PolicyModel", "preference_pairs"]
