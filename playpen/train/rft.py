"""Expert iteration (rejection-sampling fine-tuning, RAFT / STaR) on games: rounds of play → keep the wins → SFT.

    playpen train rft --config rft/tiny_wordle [key=value ...]

Each round (rounds.py) plays `group_size` episodes of each of its `instances` train instances with the current
model (the rollout engine, batched, at `temperature`), keeps the learner's successful episodes (the game's Success,
or reward >= `min_reward`; at most `max_per_instance` per instance, identical token sequences once), and trains
TRL's SFTTrainer for `trainer.max_steps` steps on them, on the learner's own tokens only (the engine's env_mask,
the mask GRPO trains). The next round plays the model this one ended with. `shuffle_rewards: true` is the control:
the same number of episodes per instance kept, chosen at random instead of by reward.

Rows of round k are in <run>/kept/iter_KK.jsonl (with the instance, reward and whether it was chosen by reward);
each round's episodes played, pass rate and kept count go to metrics.jsonl and the learning curve.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from playpen.config import bounded, documented
from playpen.train import game_play, rounds, sequences
from playpen.train.rounds import ACROSS_ROUNDS_HELP, MAX_ROUNDS
from playpen.train.recipe import Session


@dataclass
class Config(game_play.GameConfig):
    """Keys of GameConfig and TrainConfig; `trainer:` takes trl.SFTConfig keys, max_steps per round."""

    rounds: int = bounded(3, ge=1, le=MAX_ROUNDS,
                          help="play → keep → SFT rounds, each from the model the last one ended with")
    group_size: int = bounded(4, ge=1, help="episodes played per instance per round (K)")
    instances: int | None = bounded(32, ge=1, help="train instances played per round: the next ones of the split, "
                                                   "shuffled once with seed (null: all of them every round)")
    min_reward: float | None = documented(None, help="keep episodes whose reward >= this; null: the game's own "
                                                     "Success")
    max_per_instance: int = bounded(1, ge=1, help="kept episodes per instance per round (M)")
    shuffle_rewards: bool = documented(False, help="control: keep as many episodes per instance, chosen at random")
    schedule_across_rounds: bool = documented(False, help=ACROSS_ROUNDS_HELP)


class RFT(rounds.SFTRoundsRecipe):
    name = "rft"
    Config = Config
    rows_folder = "kept"

    def check(self, cfg: Config, where: str) -> None:
        game_play.check_game(cfg, where)

    def fit(self, session: Session):
        # all of the split, shuffled with the seed: each round plays the next `instances` of them
        self._instances = game_play.train_instances(session.cfg, session.run.path if session.is_main else None,
                                                    limit=None)
        self._partner = game_play.load_partner(session.cfg)
        return rounds.iterate(self, session)

    def collect(self, session: Session, k: int, model, offset: int) -> tuple[list[dict], dict]:
        cfg = session.cfg
        chosen = game_play.round_instances(self._instances, k, cfg.instances)
        episodes = game_play.play_round(session, k, model, chosen, self._partner, group_size=cfg.group_size)
        kept, passed = keep_episodes(episodes, cfg, random.Random(f"{cfg.seed}-{k}"))
        rows = rounds.gather([sequences.learner_row(e.traces[0], {
            **sequences.episode_meta(e), "reward": e.reward, "by_reward": not cfg.shuffle_rewards}) for e in kept])
        stats = rounds.merged_stats({**game_play.episode_stats(episodes), "pass_rate": passed / max(len(episodes), 1)},
                                    len(episodes))
        return rows, {**stats, "kept": len(rows)}


def successful(episode, min_reward: float | None) -> bool:
    if episode.aborted:
        return False
    return episode.success if min_reward is None else episode.reward >= min_reward


def keep_episodes(episodes: list, cfg: Config, rng: random.Random) -> tuple[list, int]:
    """The episodes a round trains on, and how many passed. Per instance: its successful episodes, identical
    learner token sequences once, at most max_per_instance; with shuffle_rewards, as many of its episodes chosen at
    random instead."""
    by_instance: dict[tuple, list] = {}
    for e in episodes:
        by_instance.setdefault((e.experiment, e.game_id), []).append(e)
    kept, passed = [], 0
    for group in by_instance.values():
        wins = [e for e in group if successful(e, cfg.min_reward)]
        passed += len(wins)
        chosen = distinct(wins, cfg.max_per_instance)
        kept += distinct(rng.sample(group, len(group)), len(chosen)) if cfg.shuffle_rewards else chosen
    return kept, passed


def distinct(episodes: list, n: int) -> list:
    """The first n episodes whose learner token sequences differ."""
    seen: set[tuple] = set()
    chosen = []
    for e in episodes:
        key = tuple(e.traces[0].completion_ids)
        if len(chosen) < n and key not in seen:
            seen.add(key)
            chosen.append(e)
    return chosen


RECIPE = RFT()
