"""The token rows expert iteration and on-policy distillation train on, cut from the rollout engine's traces.

A row is {"input_ids": [...], "labels": [...]} with -100 on every token that is not trained (TRL's SFTTrainer
takes such rows as they are), plus "meta" naming where it came from:

- `learner_row`: a learner seat's whole episode, trained on exactly the tokens the learner sampled (the engine's
  env_mask, the mask GRPO trains): expert iteration, and distillation from a model teacher.
- `expert_rows`: one row per learner turn: the tokens the learner saw before that reply, then the game expert's
  reply to that same history as the target (DAgger). The episode itself went on with the learner's own reply.
"""
from __future__ import annotations

import random

IGNORE = -100


def episode_meta(episode) -> dict:
    """Where a row comes from: the episode's experiment and its record folder's name."""
    from playpen.records import preferred_name

    branch = episode.branch.index if episode.branch else 0
    return {"experiment": episode.experiment, "episode": preferred_name(episode.game_id, episode.group_index, branch)}


def learner_row(trace, meta: dict) -> dict:
    """A learner seat's episode with labels on its own sampled tokens only."""
    labels = [IGNORE] * len(trace.prompt_ids) + [t if m else IGNORE for t, m in zip(trace.completion_ids,
                                                                                     trace.env_mask)]
    return {"input_ids": list(trace.prompt_ids) + list(trace.completion_ids), "labels": labels, "meta": meta}


def reply_spans(env_mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of learner-sampled tokens in a trace's completion: one run per reply."""
    spans, start = [], None
    for i, m in enumerate(list(env_mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def learner_histories(trace) -> list[tuple[list[int], list[dict], str]]:
    """For each learner reply of a trace: (token ids the learner saw before it, the messages it saw, the reply as
    generated). Empty when the trace does not line up reply for reply (a game that rewrote the history)."""
    spans = reply_spans(trace.env_mask)
    replies = [i for i, m in enumerate(trace.messages) if m["role"] == "assistant"]
    if trace.segments > 1 or len(spans) != len(replies):
        return []
    prompt = list(trace.prompt_ids)
    return [(prompt + list(trace.completion_ids[:start]), trace.messages[:index], trace.messages[index]["content"])
            for (start, _), index in zip(spans, replies)]


class ExpertTargets:
    """The game expert's reply to a learner's history, as text and as the tokens the learner is trained to say:
    the reply, then the end-of-turn token a sampled reply ends with."""

    def __init__(self, game: str, policy, seed: int):
        from playpen.games import expert_player, load_benchmark

        self.game, self.policy = game, policy
        self.players = {role: expert_player(game, role, seed=seed) for role in load_benchmark(game).roles}
        self.rng = random.Random(seed)

    def reply(self, role: str, history: list[dict]) -> str:
        clean = [{"role": m["role"], "content": m["content"].strip() if m["role"] == "assistant" else m["content"]}
                 for m in history]
        return self.players[role].expert_response(clean, self.rng, 1.0)

    def target_ids(self, text: str) -> list[int]:
        return self.policy.encode(text) + [self.policy.stop_ids[0]]


def expert_rows(trace, experts: ExpertTargets, meta: dict) -> tuple[list[dict], int]:
    """DAgger's rows of one learner trace, and how many of its replies already were the expert's."""
    rows, agreed = [], 0
    for turn, (context, history, reply) in enumerate(learner_histories(trace)):
        target = experts.reply(trace.role, history)
        agreed += same_move(reply, target)
        ids = experts.target_ids(target)
        rows.append({"input_ids": context + ids, "labels": [IGNORE] * len(context) + ids,
                     "meta": {**meta, "turn": turn, "target": target, "reply": reply}})
    return rows, agreed


def same_move(reply: str, target: str) -> bool:
    """A learner reply and an expert reply make the same move (whitespace and case aside)."""
    return " ".join(reply.split()).lower() == " ".join(target.split()).lower()
