"""GRPO on games: the learner plays each training instance `group_size` times; reward = the episode's outcome.

    playpen train grpo --config grpo/demo [key=value ...]

TRL's GRPOTrainer does the algorithm (group-normalised advantages, clipped policy loss, KL to the reference
with beta; with LoRA the reference is the model with adapters off); playpen supplies `rollout_func`:
the prompts TRL hands over (one per episode, each instance repeated group_size times in a row) are played as
whole multi-turn games by `playpen.rollout.RolloutEngine`, and each episode comes back as one token sequence
(prompt_ids + completion_ids) with `env_mask` = 0 on game-master and partner tokens, so only the learner's own
tokens are trained. Reward per episode (Episode.reward): main score / 100, 0 for a loss, -1 for an abort.

Self-play: without a partner the learner plays every role. With `partner:` a frozen model plays the other
roles: a local Hugging Face model, or a remote API model (its key.json entry is checked before training).
Records of every step are written under <run>/playpen-records, tagged step_NNNNN (rewritten on replay).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import groupby

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen.storage import atomic_write_json, read_jsonl
from playpen import distributed
from playpen.train import dynamic_sampling, game_play, learned_reward
from playpen.train.recipe import Recipe, Session


@dataclass
class Config(game_play.GameConfig):
    """Keys of GameConfig and TrainConfig, plus a learned reward (learned_reward.py); `trainer:` takes
    trl.GRPOConfig keys."""

    group_size: int = bounded(8, ge=2, hint="GRPO's advantage compares the episodes of a group",
                              help="episodes per instance: TRL's num_generations, whose rewards are normalised "
                                   "against each other")
    prompts: str | None = documented(None, help="jsonl of prompts: single-turn GRPO against reward_model (no game)")
    reward_model: str | None = documented(None, help="sequence classifier (registry name, folder) or callable "
                                                     "scorer")
    reward_label: str | None = documented(None, help="the label of a multi-label reward_model to reward")
    reward_weight: float = documented(1.0, help="with a game: the weight of the learned reward in the sum ...")
    game_reward_weight: float = documented(1.0, help="... and of the game's own episode reward")
    abort_reward: float = documented(-1.0, help="reward of an aborted episode (a broken reply format); 0 makes a "
                                                "game's reward 1/0 once SFT has the format")
    mask_truncated: bool = documented(False, help="train nothing from an episode in which a learner reply hit "
                                                  "max_new_tokens (TRL's mask_truncated_completions looks at the "
                                                  "last token of the whole episode, which is the game's, so it is "
                                                  "not used)")
    dynamic_sampling: int = bounded(0, ge=0, hint="refill rounds per step; 0 keeps uniform groups",
                                    help="dynamic sampling (DAPO): up to N rounds per step refill groups whose "
                                         "episodes all score alike (0: off)")


def instance_key(index: int, experiment, instance) -> str:
    name = experiment.get("name", "") if isinstance(experiment, dict) else str(experiment)
    return f"{index}|{name}/{instance.get('game_id', index)}"


class GameRollouts:
    """TRL's rollout_func and reward function for one game; keeps the counters saved with checkpoints."""

    def __init__(self, session: Session, instances: list, partner):
        self.session, self.cfg, self.instances, self.partner = session, session.cfg, instances, partner
        self.counters = {k: session.state.get(k, 0) for k in ("episodes", "rollouts")}
        self.timing = {"rollout_seconds": 0.0}
        self._writing = None  # the engine whose records are still being written, while the step trains
        self._policy = None
        self.step_stats: dict = {}  # this step's dynamic sampling counts (dynamic_sampling.py)

    def state(self) -> dict:
        return dict(self.counters)

    def finish_records(self) -> None:
        """Wait for the last rollout's records: before the next rollout, a checkpoint, and the end of training."""
        if self._writing is not None:
            self._writing.finish_records()
            self._writing = None

    def rollout(self, prompts: list[str], trainer) -> dict:
        from playpen.rollout import RolloutEngine

        started = time.perf_counter()
        self.finish_records()
        cfg, session = self.cfg, self.session
        indices = [int(p.split("|", 1)[0]) for p in prompts]
        runs = [(i, len(list(g))) for i, g in groupby(indices)]
        sizes = {n for _, n in runs}
        if len(sizes) == 1:  # the usual case: whole groups on this process
            chosen, group = [self.instances[i] for i, _ in runs], sizes.pop()
        else:  # a group split across processes: one episode per prompt
            chosen, group = [self.instances[i] for i in indices], 1
        tag = game_play.records_tag("step", trainer.state.global_step, session.rank, session.world_size)
        with game_play.model_for_play(trainer) as model:
            was_training = model.training
            policy = self.policy(model)
            # seeded by (seed, rollout number, rank): a resumed run replays exactly the rollouts it lost
            seed = (cfg.seed * 1_000_003 + self.counters["rollouts"]) * 1_009 + session.rank
            policy = game_play.with_vllm(session, policy, trainer.state.global_step, seed, trainer.accelerator)
            engine = RolloutEngine(learner=policy, partner=self.partner, max_new_tokens=cfg.max_new_tokens,
                                   temperature=cfg.temperature, batch_size=cfg.rollout_batch_size, seed=seed,
                                   partner_seats=cfg.partner_seats)
            self._writing = engine

            played = [0]  # episodes, refills included

            def play(instances: list) -> list:
                played[0] += len(instances) * group
                return engine.play(cfg.game, instances=instances, group_size=group,
                                   records_dir=session.run.records, records_tag=tag, wait_for_records=False)

            episodes = play(chosen)
            self.step_stats = {}
            if cfg.dynamic_sampling and group > 1:
                draw = dynamic_sampling.fresh_instance_drawer(self.instances, {i for i, _ in runs}, seed)
                episodes, self.step_stats = dynamic_sampling.refill_uniform_groups(
                    episodes, group, self.reward, play, draw, cfg.dynamic_sampling)
            model.train(was_training)
        if failure := game_play.partner_failure(cfg, episodes, f"of step {trainer.state.global_step}"):
            self.finish_records()  # their error.json files say what the partner answered
            raise PlaypenError(f"{failure} (records: {session.run.records})")
        if len(episodes) != len(prompts):
            raise RuntimeError(f"rollout engine returned {len(episodes)} episodes for {len(prompts)} prompts")
        self.counters["episodes"] += played[0] * session.world_size
        self.counters["rollouts"] += 1
        self.timing["rollout_seconds"] += time.perf_counter() - started
        seqs = [self.trained_seat(e, j) for j, e in enumerate(episodes)]
        return {
            "prompt_ids": [list(t.prompt_ids) for t in seqs],
            "completion_ids": [list(t.completion_ids) for t in seqs],
            "logprobs": [list(t.logprobs) for t in seqs],  # the sampling log-probabilities (T applied)
            "env_mask": [[0] * len(t.env_mask) if cfg.mask_truncated and t.cut_replies else list(t.env_mask)
                         for t in seqs],
            "episode": [{"reward": self.reward(e), "score": game_play.main_score(e), "aborted": bool(e.aborted),
                         "success": bool(e.success), "turns": int(e.num_turns), "step": self.step_stats}
                        for e in episodes],
        }

    def reward(self, episode) -> float:
        """The episode's reward TRL normalises per group: Episode.reward, with `abort_reward` for an abort."""
        return float(self.cfg.abort_reward if episode.aborted else episode.reward)

    def policy(self, model):
        """One LocalPolicy per model for the whole run: it keeps tokenizations and template renderings."""
        from playpen.rollout import LocalPolicy

        if self._policy is None or self._policy.model is not model:
            name = self.session.spec["model_name"].replace("/", "_")  # as eval names the model's records
            self._policy = LocalPolicy(model, self.session.tokenizer, name=name)
        return self._policy

    def trained_seat(self, episode, j: int):
        """The token sequence trained for the j-th episode: with several learner seats (self-play of a 2-player
        game) and train_seats "all", episode j trains seat j mod seats, so every role learns from its group."""
        traces = [t for t in episode.traces if t.completion_ids]
        if self.cfg.train_seats == "all" and len(traces) > 1:
            return traces[j % len(traces)]
        return episode.traces[0]  # (the seat whose fields the Episode repeats)

    @staticmethod
    def episode_reward(prompts, completions, episode, log_metric=None, **kwargs) -> list[float]:
        """The reward TRL normalises per group; also logs episode statistics (averaged over all processes)."""
        if log_metric is not None:
            for e in episode:
                log_metric("episode_score", e["score"])
                log_metric("aborted_pct", 100.0 * e["aborted"])
                log_metric("success_rate", float(e["success"]))
                log_metric("turns", float(e["turns"]))
            for key, value in (episode[0]["step"] if episode else {}).items():  # once per step: dynamic sampling
                log_metric(key, float(value))
        return [e["reward"] for e in episode]


def _records_written_callback(game: GameRollouts):
    from transformers import TrainerCallback

    class RecordsWritten(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            game.finish_records()

        def on_train_end(self, args, state, control, **kwargs):
            game.finish_records()

    return RecordsWritten()


def _validation_callback(session: Session, metrics, val_instances: list, partner):
    """Plays held-out validation instances (greedy by default) at the start, every N steps and at the end."""
    from transformers import TrainerCallback

    cfg = session.cfg
    done = {r["step"] for r in read_jsonl(session.run.metrics) if "val/reward" in r}

    class Validation(TrainerCallback):
        def __init__(self):
            self.trainer = None
            self.results: dict[int, dict] = {}

        def validate(self, step: int) -> None:
            from playpen.rollout import LocalPolicy

            if step in done:
                return
            done.add(step)
            shard = val_instances[session.rank::session.world_size]
            with game_play.model_for_play(self.trainer) as m:
                was_training = m.training
                m.eval()
                policy = LocalPolicy(m, session.tokenizer, name=session.spec["model_name"].replace("/", "_"))
                tag = game_play.records_tag("validation", step, session.rank, session.world_size)
                stats = game_play.play_validation(policy, cfg, shard, partner, session.run.records, tag) \
                    if shard else {}
                m.train(was_training)
            parts = distributed.all_gather((stats, len(shard)))
            total = sum(n for _, n in parts)
            merged = {f"val/{k}": sum(s[k] * n for s, n in parts if n) / total for k in parts[0][0]}
            self.results[step] = merged
            metrics.log_row(step, merged)
            session.log(f"[playpen] validation at step {step}: reward {merged['val/reward']:.3f}, "
                        f"score {merged['val/episode_score']:.1f}, aborted {merged['val/aborted_pct']:.0f}%")

        def on_train_begin(self, args, state, control, **kwargs):
            self.validate(state.global_step) if state.global_step == 0 else None

        def on_step_end(self, args, state, control, **kwargs):
            if cfg.validation_every and state.global_step % cfg.validation_every == 0:
                self.validate(state.global_step)

        def on_train_end(self, args, state, control, **kwargs):
            self.validate(state.global_step)

    return Validation()


def report_validation(session: Session) -> dict:
    """validation.json in the run dir and one line: validation reward and score, first vs last."""
    rows = {r["step"]: r for r in read_jsonl(session.run.metrics) if "val/reward" in r}
    if not rows:
        return {}
    results = {str(s): {k: v for k, v in rows[s].items() if k.startswith("val/")} for s in sorted(rows)}
    atomic_write_json(session.run.path / "validation.json", results)
    first, last = results[min(results, key=int)], results[max(results, key=int)]
    print(f"[playpen] validation (held-out): reward {first['val/reward']:.3f} -> {last['val/reward']:.3f}, "
          f"score {first['val/episode_score']:.1f} -> {last['val/episode_score']:.1f} "
          f"(steps {min(rows)} -> {max(rows)})")
    return results


class GRPO(Recipe):
    name = "grpo"
    Config = Config
    trl_config = "GRPOConfig"

    def check(self, cfg: Config, where: str) -> None:
        learned_reward.check(cfg, where)  # (trainer.beta >= 0 is checked with every trainer: value)
        if not cfg.prompts:
            game_play.check_game(cfg, where)

    def trainer_defaults(self, cfg: Config) -> dict:
        # dropout off: episodes are sampled in eval mode, so a training forward with dropout would score other
        # log-probabilities than the ones sampled (and the KL would measure dropout noise)
        return {"per_device_train_batch_size": cfg.group_size, "beta": 0.04, "learning_rate": 1e-5,
                "max_completion_length": cfg.max_new_tokens, "log_completions": False, "disable_dropout": True}

    def forced(self, cfg: Config) -> dict:
        # TRL rescales logits by its temperature when scoring; it must be the temperature the episodes were
        # sampled with. The group size is TRL's num_generations.
        # No sampler shuffle: the instances are already shuffled with the run's seed, and TRL's RepeatSampler
        # restarts its generator on resume, so a shuffled resumed run would see other prompts than the original.
        # Games: mask_truncated replaces TRL's mask_truncated_completions (see Config); prompts keep TRL's own.
        game = {} if cfg.prompts else {"mask_truncated_completions": False}
        return {"num_generations": cfg.group_size, "temperature": cfg.temperature, "shuffle_dataset": False,
                **game, **learned_reward.forced(cfg)}

    def fit(self, session: Session):
        from datasets import Dataset
        from trl import GRPOTrainer

        cfg = session.cfg
        if cfg.prompts:
            return learned_reward.fit_on_prompts(session, limit=cfg.instances)
        if session.is_main:  # rollouts after the resumed checkpoint are replayed: their records go first
            step = session.state["step"]
            game_play.clear_records(session.run.records, lambda prefix, n: (prefix == "step" and n >= step) or
                                   (prefix == "validation" and n > step))
        session.barrier()
        instances = game_play.train_instances(cfg, session.run.path if session.is_main else None)
        partner = game_play.load_partner(cfg)
        game = GameRollouts(session, instances, partner)
        dataset = Dataset.from_list([{"prompt": instance_key(i, exp, inst)} for i, (exp, inst) in enumerate(instances)])
        callbacks = session.callbacks(extra_state=game.state, resumed_step=session.state["step"])
        validation = None
        if cfg.validation_instances:
            val_instances = game_play.select_instances(cfg, "validation", cfg.validation_instances)
            validation = _validation_callback(session, callbacks[0], val_instances, partner)
            callbacks.insert(0, validation)  # its end-of-training row lands before metrics closes tensorboard
        callbacks.insert(0, _records_written_callback(game))  # before the checkpoint's state file says "done"
        reward_funcs, rollout_func = [GameRollouts.episode_reward], game.rollout
        if cfg.reward_model:  # the learned reward beside the game's, weighted (forced reward_weights)
            reward_funcs.append(learned_reward.game_reward(session))
            rollout_func = learned_reward.with_learner_text(game.rollout, session.tokenizer)
        trainer = GRPOTrainer(model=session.model, reward_funcs=reward_funcs, args=session.args,
                              train_dataset=dataset, processing_class=session.tokenizer,
                              peft_config=session.peft_config, rollout_func=rollout_func, callbacks=callbacks)
        if validation is not None:
            validation.trainer = trainer
        trainer.train(resume_from_checkpoint=str(session.resume) if session.resume else None)
        if validation is not None and session.is_main:
            report_validation(session)
        session.log(f"[playpen] {game.counters['episodes']} episodes played; rollouts took "
                    f"{game.timing['rollout_seconds']:.1f} s on this process")
        return trainer


RECIPE = GRPO()
