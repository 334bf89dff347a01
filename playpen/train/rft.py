"""Expert iteration (rejection-sampling fine-tuning, RAFT / STaR) on games: rounds of play → keep the wins → SFT.

    playpen train rft --config rft/tiny_numberguess [key=value ...]

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

from playpen.config import bounded
from playpen.errors import PlaypenError
from playpen.train import game_play, rounds, sequences
from playpen.train.checkpoints import load_state
from playpen.train.recipe import Session


@dataclass
class Config(game_play.GameConfig):
    """Keys of GameConfig and TrainConfig; `trainer:` takes trl.SFTConfig keys, max_steps per round."""

    rounds: int = bounded(3, ge=1)       # play → keep → SFT rounds, each from the model the last one ended with
    group_size: int = bounded(4, ge=1)   # episodes played per instance per round (K)
    instances: int | None = bounded(32, ge=1)  # train instances played per round: the next ones of the split,
                                         # shuffled once with seed (null: all of them every round)
    min_reward: float | None = None      # keep episodes whose reward >= this; null: the game's own Success
    max_per_instance: int = bounded(1, ge=1)  # kept episodes per instance per round (M)
    shuffle_rewards: bool = False        # control: keep as many episodes per instance, chosen at random


class RFT(rounds.RoundsRecipe):
    name = "rft"
    Config = Config
    trl_config = "SFTConfig"
    rows_folder = "kept"

    def check(self, cfg: Config, where: str) -> None:
        game_play.check_game(cfg, where)

    def trainer_defaults(self, cfg: Config) -> dict:
        return {"max_length": 2048, "packing": False, "max_steps": 20, "learning_rate": 1e-4,
                "per_device_train_batch_size": 8}

    def forced(self, cfg: Config) -> dict:
        # the rows carry their labels (the learner's own tokens); a chat-template mask would train nothing more
        return {"assistant_only_loss": False, "completion_only_loss": False}

    def fit(self, session: Session):
        # all of the split, shuffled with the seed: each round plays the next `instances` of them
        self._instances = game_play.train_instances(session.cfg, session.run.path if session.is_main else None,
                                                    limit=None)
        self._partner = game_play.load_partner(session.cfg)
        return rounds.iterate(self, session)

    def collect(self, session: Session, k: int, model, offset: int) -> tuple[list[dict], dict]:
        cfg = session.cfg
        chosen = round_instances(self._instances, k, cfg.instances)
        episodes = play_round(session, k, model, chosen, self._partner, group_size=cfg.group_size)
        kept, passed = keep_episodes(episodes, cfg, random.Random(f"{cfg.seed}-{k}"))
        rows = rounds.gather([sequences.learner_row(e.traces[0], {
            **sequences.episode_meta(e), "reward": e.reward, "by_reward": not cfg.shuffle_rewards}) for e in kept])
        stats = rounds.merged_stats({**game_play.episode_stats(episodes), "pass_rate": passed / max(len(episodes), 1)},
                                    len(episodes))
        return rows, {**stats, "kept": len(rows)}

    def train_round(self, session: Session, rows: list[dict], args, resume, offset: int, model, peft_config):
        return train_rows(session, rows, args, resume, offset, model, peft_config)


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


def round_instances(instances: list, k: int, n: int | None) -> list:
    """The instances round k plays: the next n of the (already shuffled) list, wrapping around; all when n is
    None."""
    if not n or n >= len(instances):
        return list(instances)
    start = (k * n) % len(instances)
    return [instances[(start + i) % len(instances)] for i in range(n)]


def play_round(session: Session, k: int, model, instances: list, partner, group_size: int, engine_options=None):
    """Round k's episodes of this process's share of `instances` (records tagged iter_k), seeded by (seed, k)."""
    from playpen.rollout import LocalPolicy, RolloutEngine

    cfg = session.cfg
    shard = instances[session.rank::session.world_size]
    policy = LocalPolicy(model, session.tokenizer, name=session.spec["model_name"].replace("/", "_"))
    seed = (cfg.seed * 1_000_003 + k) * 1_009 + session.rank
    engine = RolloutEngine(learner=policy, teacher=partner, max_new_tokens=cfg.max_new_tokens,
                           temperature=cfg.temperature, batch_size=cfg.rollout_batch_size, seed=seed,
                           teacher_seats=cfg.partner_seats, **(engine_options or {}))
    tag = game_play.records_tag("iter", k, session.rank, session.world_size)
    game_play.clear_records(session.run.records, lambda prefix, step: prefix == "iter" and step == k)
    episodes = engine.play(cfg.game, instances=shard, group_size=group_size, records_dir=session.run.records,
                           records_tag=tag)
    if failure := game_play.partner_failure(cfg, episodes, f"of round {k}"):
        raise PlaypenError(f"{failure} (records: {session.run.records})")
    return episodes


def rows_dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{"input_ids": r["input_ids"], "labels": r["labels"]} for r in rows])


def train_rows(session: Session, rows: list[dict], args, resume, offset: int, model, peft_config,
               trainer_class=None, **trainer_options):
    """TRL's SFTTrainer (or a subclass) on token rows whose labels say what is trained."""
    from trl import SFTTrainer

    state = load_state(resume) if resume else {"step": 0}
    trainer = (trainer_class or SFTTrainer)(
        model=model, args=args, train_dataset=rows_dataset(rows), processing_class=session.tokenizer,
        peft_config=peft_config, callbacks=session.callbacks(step_offset=offset, resumed_step=state["step"]),
        **trainer_options)
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    return trainer


RECIPE = RFT()
