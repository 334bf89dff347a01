"""Dynamic sampling (DAPO, arXiv 2503.14476): a GRPO step made only of groups whose episodes do not all score alike.

A group whose episodes all earn the same reward has zero advantage everywhere, so it adds no gradient and only
dilutes the step (TRL 1.16 logs the share as `frac_reward_zero_std` but keeps those groups; its issue #3708 is
open). Here such groups are dropped and refilled with groups of fresh instances, played at once by the same
engine, until every slot holds a group that varies or `rounds` refill rounds are spent; slots still uniform then
stay (they weigh nothing). The step keeps its size, so TRL's batch shapes and group boundaries do not change.

Per step, `stats` says what happened (logged to metrics.jsonl and drawn in the learning curve):
    dynamic/uniform_share   share of the step's first groups that were uniform (dropped)
    dynamic/refill_groups   groups played to refill them
    dynamic/uniform_left    share of slots still uniform after the last round
"""
from __future__ import annotations

import random
from typing import Callable, Sequence


def is_uniform(group: Sequence, reward: Callable) -> bool:
    return len({reward(e) for e in group}) <= 1


def refill_uniform_groups(episodes: list, group_size: int, reward: Callable, play: Callable[[list], list],
                          draw: Callable[[int], list], rounds: int) -> tuple[list, dict]:
    """`episodes` in groups of `group_size` (instance-major, as the engine returns them) with every uniform group
    replaced, where fresh play allows, by a group that varies. `draw(n)` gives n fresh instances, `play(instances)`
    plays each `group_size` times."""
    groups = [episodes[i:i + group_size] for i in range(0, len(episodes), group_size)]
    uniform = [k for k, g in enumerate(groups) if is_uniform(g, reward)]
    stats = {"dynamic/uniform_share": len(uniform) / len(groups), "dynamic/refill_groups": 0.0}
    for _ in range(rounds):
        if not uniform:
            break
        fresh = play(draw(len(uniform)))
        stats["dynamic/refill_groups"] += len(fresh) // group_size
        for start in range(0, len(fresh), group_size):
            candidate = fresh[start:start + group_size]
            if uniform and not is_uniform(candidate, reward):
                groups[uniform.pop(0)] = candidate
    stats["dynamic/uniform_left"] = len(uniform) / len(groups)
    return [e for g in groups for e in g], stats


def fresh_instance_drawer(instances: list, exclude: set[int], seed: int) -> Callable[[int], list]:
    """Draws instances (by index into `instances`) not in `exclude` and not drawn before in this step, in an
    order fixed by `seed` (a resumed run replays the same refills); when none are left it starts over."""
    order = [i for i in range(len(instances)) if i not in exclude] or list(range(len(instances)))
    random.Random(seed).shuffle(order)
    position = [0]

    def draw(n: int) -> list:
        picked = [order[(position[0] + k) % len(order)] for k in range(n)]
        position[0] += n
        return [instances[i] for i in picked]

    return draw
