"""DPO from a static preference file or from branching game rollouts, optionally iterated.

    playpen train dpo --config dpo/tiny_static      # data: prefs.jsonl
    playpen train dpo --config dpo/tiny_rollouts    # game: wordle, iterations: 2

Static: rows {"prompt": [...messages] | str, "chosen": [...] | str, "rejected": [...] | str}.
Rollouts: the learner plays each instance once, then `group_size - 1` branches replay it from just before one
of its replies (`RolloutEngine.branch`); `playpen.rollout.preference_pairs` turns each branch group into a
best-vs-worst pair on that reply (ties skipped). With `pairs: best_of_n` (debate and consultancy games with
`best_of_n:` advocates) each instance is played once and every best-of-N choice is a pair: the chosen speech
against the candidate the chooser liked least (NYU's DPO data; scores kept in the pairs file's meta).
With `iterations: N` it repeats play → pairs → DPO, each round against the policy it starts from (TRL copies
the adapter as "ref"; without LoRA it keeps a frozen copy). Round k lives in checkpoints/iter_k/ with its pairs
in pairs/iter_k.jsonl, so a rerun resumes inside the round it stopped in, without replaying finished rounds.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from playpen.config import bounded, documented
from playpen.errors import PlaypenError
from playpen import training_data
from playpen.train import game_play, rounds
from playpen.train.checkpoints import load_state
from playpen.train.rounds import MAX_ROUNDS
from playpen.train.recipe import Recipe, Session


@dataclass
class Config(game_play.GameConfig):
    data: str | None = documented(None, help="static preference jsonl; or leave it out and set game:")
    iterations: int = bounded(1, ge=1, le=MAX_ROUNDS, help="rollout mode: rounds of play → pairs → DPO")
    group_size: int = bounded(4, ge=2, hint="a preference pair compares two episodes of an instance",
                              help="branch factor: episodes per instance sharing a prefix")
    instances: int | None = bounded(16, ge=1, help="training instances played per round")
    pairs: str = documented("branching", help="where rollout pairs come from: branching (replays from one learner "
                                              "reply) or best_of_n (each instance played once with best_of_n: "
                                              "advocates; a pair per choice, the chosen speech against the "
                                              "lowest-scored candidate; group_size is not used)")


def _side(value, name: str) -> str | None:
    if isinstance(value, str):
        return None if value else f"'{name}' is empty"
    problem = training_data.check_messages(value, need_assistant=name != "prompt")
    return f"'{name}': {problem}" if problem else None


def _row_problem(row: dict) -> str | None:
    for name in ("prompt", "chosen", "rejected"):
        if name not in row:
            return f"missing '{name}' (rows need prompt, chosen, rejected)"
        if problem := _side(row[name], name):
            return problem
    return training_data.same_sides(row)


def _dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])


class DPO(rounds.RoundsRecipe):
    """From a preference file: one TRL DPO training. From games: rounds (rounds.py) of play → pairs → DPO."""

    name = "dpo"
    Config = Config
    trl_config = "DPOConfig"
    rows_folder = "pairs"

    def round_count(self, cfg: Config) -> int:
        return cfg.iterations

    def check(self, cfg: Config, where: str) -> None:
        if bool(cfg.data) == bool(cfg.game):
            raise PlaypenError(f"{where}: set exactly one of data (a preference jsonl) or game (pairs from "
                               f"branching rollouts)")
        if cfg.data:
            if cfg.iterations != 1:
                raise PlaypenError(f"{where}: iterations > 1 needs game play (set game, not data)")
            training_data.read_jsonl_rows(cfg.data, where, "data", _row_problem)
        else:
            game_play.check_game(cfg, where)
            if cfg.pairs not in ("branching", "best_of_n"):
                raise PlaypenError(f"{where}: pairs must be branching or best_of_n, got {cfg.pairs!r}")
            if cfg.pairs == "best_of_n" and cfg.best_of_n is None:
                raise PlaypenError(f"{where}: pairs: best_of_n needs best-of-n advocates: set best_of_n (e.g. "
                                   f"best_of_n: {{n: 4, chooser: judge}})")

    def trainer_defaults(self, cfg: Config) -> dict:
        return {"beta": 0.1, "max_length": 1024, "learning_rate": 5e-6}

    # a preference file trains once, as any recipe; games train in rounds
    def find_resume(self, cfg: Config, run) -> tuple[Path | None, int]:
        return Recipe.find_resume(self, cfg, run) if cfg.data else super().find_resume(cfg, run)

    def final_step(self, session: Session, trainer) -> int:
        return Recipe.final_step(self, session, trainer) if session.cfg.data else super().final_step(session, trainer)

    def planned_steps(self, cfg: Config) -> int:
        return Recipe.planned_steps(self, cfg) if cfg.data else super().planned_steps(cfg)

    def is_complete(self, cfg: Config, run, final_step: int) -> bool:
        return Recipe.is_complete(self, cfg, run, final_step) if cfg.data else \
            super().is_complete(cfg, run, final_step)

    def fit(self, session: Session):
        if session.cfg.data:
            rows = training_data.read_jsonl_rows(session.cfg.data, session.where, "data", _row_problem)
            return self._train(session, _dataset(rows), session.args, session.resume, step_offset=0)
        self._instances = game_play.train_instances(session.cfg, session.run.path if session.is_main else None)
        self._partner = game_play.load_partner(session.cfg)
        return rounds.iterate(self, session)

    def _train(self, session: Session, dataset, args, resume: Path | None, step_offset: int, model=None,
               peft_config=None):
        from trl import DPOTrainer

        state = load_state(resume) if resume else {"step": 0}
        trainer = DPOTrainer(
            model=model if model is not None else session.model, args=args, train_dataset=dataset,
            processing_class=session.tokenizer,
            peft_config=peft_config if model is not None else session.peft_config,
            callbacks=session.callbacks(step_offset=step_offset, resumed_step=state["step"]))
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        return trainer

    def train_round(self, session: Session, rows: list[dict], args, resume, offset: int, model, peft_config):
        rounds.drop_ref_adapter(model)
        return self._train(session, _dataset(rows), args, resume, offset, model, peft_config)

    def collect(self, session: Session, k: int, model, offset: int) -> tuple[list[dict], dict]:
        """Round k's preference pairs: each instance played once and branched (records tagged iter_k)."""
        from playpen.rollout import LocalPolicy, RolloutEngine, preference_pairs

        cfg = session.cfg
        shard = self._instances[session.rank::session.world_size]
        policy = LocalPolicy(model, session.tokenizer, name=session.spec["model_name"].replace("/", "_"))
        policy = game_play.with_vllm(session, policy, k, (cfg.seed * 1_000_003 + k) * 1_009 + session.rank)
        engine = RolloutEngine(learner=policy, partner=self._partner, max_new_tokens=cfg.max_new_tokens,
                               temperature=cfg.temperature, batch_size=cfg.rollout_batch_size,
                               partner_seats=cfg.partner_seats)
        tag = game_play.records_tag("iter", k, session.rank, session.world_size)
        game_play.clear_records(session.run.records, lambda prefix, step: prefix == "iter" and step == k)
        if cfg.pairs == "best_of_n":
            from playpen.games.debate import best_of_n

            episodes = engine.play(cfg.game, shard, records_dir=session.run.records, records_tag=tag)
            found = [p for e in episodes for p in best_of_n.preference_pairs(e.interactions)]
        else:
            episodes = engine.branch(cfg.game, shard, branch_factor=cfg.group_size,
                                     records_dir=session.run.records, records_tag=tag)
            found = [_plain_pair(p) for p in preference_pairs(episodes)]
        if failure := game_play.partner_failure(cfg, episodes, f"of round {k}"):
            raise PlaypenError(f"{failure} (records: {session.run.records})")
        pairs = rounds.gather(found)
        stats = rounds.merged_stats(game_play.episode_stats(episodes), len(episodes))
        return pairs, {**stats, "pairs": len(pairs)}


def _plain_pair(pair: dict) -> dict:
    return {k: pair[k] for k in ("prompt", "chosen", "rejected")}


RECIPE = DPO()
