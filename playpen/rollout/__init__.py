"""Batched rollouts of clemcore games for training and evaluation.

    from playpen.rollout import RolloutEngine, Episode, LocalPolicy, load_instances, preference_pairs

See engine.py (scheduling), generation.py (batched KV-cached sampling), episode.py (Episode and the token
invariant), records.py (playpen-records layout), branching.py (DPO pairs), instances.py (splits, validation).
"""
from playpen.rollout.branching import preference_pairs
from playpen.rollout.engine import RolloutEngine
from playpen.rollout.episode import BranchInfo, Episode, Trace
from playpen.rollout.instances import load_instances, read_instances
from playpen.rollout.policy import LocalPolicy, PolicyModel

__all__ = ["RolloutEngine", "Episode", "Trace", "BranchInfo", "LocalPolicy", "PolicyModel", "load_instances",
           "read_instances", "preference_pairs"]
