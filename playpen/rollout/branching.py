"""Preference pairs from branched rollouts (`RolloutEngine.branch`).

Episodes of one branch group share the game state and the learner's conversation up to one learner reply and
differ from that reply on. The pair for DPO is that reply: the best-scoring branch's reply is `chosen`, the
worst's is `rejected`; groups whose best and worst tie in reward (or whose replies are identical) give no pair.
"""
from __future__ import annotations

from collections import defaultdict

from playpen.rollout.episode import Episode


def _assistant_positions(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def preference_pairs(episodes: list[Episode], min_margin: float = 0.0) -> list[dict]:
    """[{"prompt": [messages before the diverging reply], "chosen": [reply], "rejected": [reply], "meta": {...}}]
    in TRL's conversational preference format. Pairs need reward(best) - reward(worst) > min_margin."""
    groups: dict[tuple[str, int], list[Episode]] = defaultdict(list)
    for episode in episodes:
        if episode.branch is not None:
            groups[(episode.branch.root, episode.branch.turn)].append(episode)
    pairs = []
    for (root, turn), group in groups.items():
        replies = []
        for episode in group:
            positions = _assistant_positions(episode.messages)
            if turn < len(positions):
                replies.append((episode, positions[turn]))
        if len(replies) < 2:
            continue
        replies.sort(key=lambda r: r[0].reward)
        (worst, w_at), (best, b_at) = replies[0], replies[-1]
        if best.reward - worst.reward <= min_margin:
            continue
        chosen, rejected = best.messages[b_at], worst.messages[w_at]
        if chosen["content"] == rejected["content"]:
            continue
        pairs.append({
            "prompt": [dict(m) for m in best.messages[:b_at]],
            "chosen": [dict(chosen)],
            "rejected": [dict(rejected)],
            "meta": {"game": best.game, "experiment": best.experiment, "game_id": best.game_id, "root": root,
                     "turn": turn, "chosen_reward": best.reward, "rejected_reward": worst.reward},
        })
    return pairs
