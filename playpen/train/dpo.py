"""DPO from a static preference file or from branching game rollouts, optionally iterated.

    playpen train dpo --config configs/dpo/tiny_static.yaml      # data: prefs.jsonl
    playpen train dpo --config configs/dpo/tiny_rollouts.yaml    # game: wordle, iterations: 2

Static: rows {"prompt": [...messages] | str, "chosen": [...] | str, "rejected": [...] | str}.
Rollouts: the learner plays each instance once, then `group_size - 1` branches replay it from just before one
of its replies (`RolloutEngine.branch`); `playpen.rollout.preference_pairs` turns each branch group into a
best-vs-worst pair on that reply (ties skipped). With `iterations: N` it repeats
play → pairs → DPO, each round against the policy it starts from (TRL copies the adapter as "ref"; without
LoRA it keeps a frozen copy). Round k lives in checkpoints/iter_k/ with its pairs in pairs/iter_k.jsonl, so a
rerun resumes inside the round it stopped in, without replaying finished rounds.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from playpen.config import bounded
from playpen.errors import PlaypenError
from playpen.storage import atomic_write_json, atomic_write_text, remove_tree, share_as_umask
from playpen import data_files, distributed
from playpen.models import modeling
from playpen.train import game_play
from playpen.train.checkpoints import find_resume_checkpoint, load_state, remove_incomplete
from playpen.train.metrics import metrics_callback
from playpen.train.recipe import Recipe, Session


@dataclass
class Config(game_play.GameConfig):
    data: str | None = None             # static preference jsonl; or leave it out and set game:
    iterations: int = bounded(1, ge=1)  # rollout mode: rounds of play → pairs → DPO
    # branch factor: episodes per instance sharing a prefix
    group_size: int = bounded(4, ge=2, hint="a preference pair compares two episodes of an instance")
    instances: int | None = bounded(16, ge=1)  # training instances played per round


def _side(value, name: str) -> str | None:
    if isinstance(value, str):
        return None if value else f"'{name}' is empty"
    problem = data_files.check_messages(value, need_assistant=name != "prompt")
    return f"'{name}': {problem}" if problem else None


def _row_problem(row: dict) -> str | None:
    for name in ("prompt", "chosen", "rejected"):
        if name not in row:
            return f"missing '{name}' (rows need prompt, chosen, rejected)"
        if problem := _side(row[name], name):
            return problem
    return data_files.same_sides(row)


def _dataset(rows: list[dict]):
    from datasets import Dataset

    return Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])


class DPO(Recipe):
    name = "dpo"
    Config = Config
    trl_config = "DPOConfig"

    def check(self, cfg: Config, where: str) -> None:
        if bool(cfg.data) == bool(cfg.game):
            raise PlaypenError(f"{where}: set exactly one of data (a preference jsonl) or game (pairs from "
                               f"branching rollouts)")
        if cfg.data:
            if cfg.iterations != 1:
                raise PlaypenError(f"{where}: iterations > 1 needs game play (set game, not data)")
            data_files.read_jsonl_rows(cfg.data, where, "data", _row_problem)
        else:
            game_play.check_game(cfg, where)

    def trainer_defaults(self, cfg: Config) -> dict:
        return {"beta": 0.1, "max_length": 1024, "learning_rate": 5e-6}

    def find_resume(self, cfg: Config, run) -> tuple[Path | None, int]:
        if cfg.data:
            return super().find_resume(cfg, run)
        for k in reversed(_rounds_on_disk(run, cfg.iterations)):  # (not range(iterations): it may be huge)
            folder = _iter_dir(run, k)
            if (folder / DONE).is_file():
                return None, json.loads((folder / DONE).read_text())["global_step"]
            checkpoint = find_resume_checkpoint(folder)
            if checkpoint is not None:
                return checkpoint, load_state(checkpoint)["global_step"]
        return None, 0

    def final_step(self, session: Session, trainer) -> int:
        return super().final_step(session, trainer) if session.cfg.data else session.state["global_step"]

    def planned_steps(self, cfg: Config) -> int:
        # from rollouts, max_steps bounds each round, and a round without preference pairs trains nothing
        return super().planned_steps(cfg) if cfg.data else -1

    def is_complete(self, cfg: Config, run, final_step: int) -> bool:
        """From rollouts, the run is complete when its last round is done."""
        if cfg.data:
            return super().is_complete(cfg, run, final_step)
        return all((_iter_dir(run, k) / DONE).is_file() for k in range(cfg.iterations))

    def fit(self, session: Session):
        if session.cfg.data:
            rows = data_files.read_jsonl_rows(session.cfg.data, session.where, "data", _row_problem)
            return self._train(session, _dataset(rows), session.args, session.resume, step_offset=0)
        return self._iterate(session)

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

    def _iterate(self, session: Session):
        cfg, run = session.cfg, session.run
        instances = game_play.train_instances(cfg, run.path if session.is_main else None)
        teacher = game_play.load_teacher(cfg)
        model, peft_config, trainer, offset = session.model, session.peft_config, None, 0
        for k in range(cfg.iterations):
            folder = _iter_dir(run, k)
            if (folder / DONE).is_file():  # finished round: continue from its final weights
                offset = json.loads((folder / DONE).read_text())["global_step"]
                continue
            if k > 0:
                model, peft_config = _load_round(session, _iter_dir(run, k - 1) / "final", model)
            pairs = self._pairs(session, k, model, instances, teacher, offset)
            resume = find_resume_checkpoint(folder)
            if session.is_main:
                remove_incomplete(folder, resume)
            args = session.make_args(output_dir=folder)
            if pairs:
                _drop_ref_adapter(model)
                trainer = self._train(session, _dataset(pairs), args, resume, offset, model, peft_config)
                model, peft_config = trainer.model, None
                _clear_final(session, folder)
                trainer.save_model(str(folder / "final"))
                offset += trainer.state.global_step
            else:
                session.log(f"[playpen] round {k}: no preference pairs (all episodes tied); skipping its training")
                _clear_final(session, folder)
                _save_weights(session, model, folder / "final")
            if session.is_main:
                share_as_umask(folder / "final")  # (safetensors writes 0600)
                atomic_write_json(folder / DONE, {"global_step": offset, "pairs": len(pairs)})
            session.barrier()
        session.state["global_step"] = offset
        if trainer is None:  # every round was already done: rebuild a trainer around the final weights
            model, _ = _load_round(session, _iter_dir(run, cfg.iterations - 1) / "final", model)
            trainer = _Saver(model, session.tokenizer)
        return trainer

    def _pairs(self, session: Session, k: int, model, instances, teacher, offset: int) -> list[dict]:
        """Pairs of round k: read back if already played, else play (records tagged iter_k) and save."""
        from playpen.rollout import LocalPolicy, RolloutEngine, preference_pairs

        cfg = session.cfg
        path = session.run.path / "pairs" / f"iter_{k:02d}.jsonl"
        if path.is_file():
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        shard = instances[session.rank::session.world_size]
        was_training = model.training
        model.eval()
        policy = LocalPolicy(model, session.tokenizer, name=session.spec["model_name"].replace("/", "_"))
        engine = RolloutEngine(learner=policy, teacher=teacher, max_new_tokens=cfg.max_new_tokens,
                               temperature=cfg.temperature, batch_size=cfg.rollout_batch_size,
                               teacher_seats=cfg.teacher_seats)
        tag = game_play.records_tag("iter", k, session.rank, session.world_size)
        game_play.clear_records(session.run.records, lambda prefix, step: prefix == "iter" and step == k)
        episodes = engine.branch(cfg.game, shard, branch_factor=cfg.group_size, records_dir=session.run.records,
                                 records_tag=tag)
        if failure := game_play.partner_failure(cfg, episodes, f"of round {k}"):
            raise PlaypenError(f"{failure} (records: {session.run.records})")
        model.train(was_training)
        pairs = _gather(session, [_plain_pair(p) for p in preference_pairs(episodes)])
        stats = _gather(session, [game_play.episode_stats(episodes) | {"n": len(episodes)}])
        if session.is_main:
            n = sum(s["n"] for s in stats) or 1
            row = {key: sum(s[key] * s["n"] for s in stats) / n for key in stats[0] if key != "n"}
            metrics_callback(session.run.metrics, session.run.logs).log_row(offset, {**row, "pairs": len(pairs)})
            atomic_write_text(path, "".join(json.dumps(p) + "\n" for p in pairs))
            print(f"[playpen] round {k}: {sum(s['n'] for s in stats)} episodes, reward {row['reward']:.3f}, "
                  f"{len(pairs)} preference pairs")
        session.barrier()
        return pairs


DONE = "round_done.json"


def _iter_dir(run, k: int) -> Path:
    return run.checkpoints / f"iter_{k:02d}"


def _rounds_on_disk(run, iterations: int) -> list[int]:
    """The rounds below `iterations` that have a folder, in order: what a resume looks at."""
    if not run.checkpoints.is_dir():
        return []
    found = (re.fullmatch(r"iter_(\d+)", p.name) for p in run.checkpoints.iterdir() if p.is_dir())
    return sorted(k for m in found if m and (k := int(m.group(1))) < iterations)


def _plain_pair(pair: dict) -> dict:
    return {k: pair[k] for k in ("prompt", "chosen", "rejected")}


def _gather(session: Session, items: list) -> list:
    parts = distributed.all_gather(items)
    return [x for part in parts for x in part]


def _drop_ref_adapter(model) -> None:
    """TRL adds a frozen "ref" copy of the adapter for each round; the previous round's copy must go first."""
    if hasattr(model, "peft_config") and "ref" in getattr(model, "peft_config", {}):
        model.delete_adapter("ref")
        model.set_adapter("default")


def _load_round(session: Session, final: Path, model):
    """The policy a finished round ended with (adapter or full weights), loaded into a trainable model."""
    if (final / "adapter_config.json").is_file():
        from peft import PeftModel, set_peft_model_state_dict
        from peft.utils import load_peft_weights

        if isinstance(model, PeftModel):
            _drop_ref_adapter(model)
            set_peft_model_state_dict(model, load_peft_weights(str(final)), adapter_name="default")
            return model, None
        return PeftModel.from_pretrained(model, str(final), is_trainable=True), None
    dtype = next(model.parameters()).dtype
    return modeling.load_model(str(final), None, dtype), session.peft_config


def _clear_final(session: Session, folder: Path) -> None:
    """A round's final/ is written by the library by name: whatever is there (links planted inside) goes first."""
    if session.is_main:
        remove_tree(folder / "final", folder)
    session.barrier()


def _save_weights(session: Session, model, folder: Path) -> None:
    if session.is_main:
        model.save_pretrained(str(folder))


class _Saver:
    """Stands in for a trainer when nothing was left to train: `save_model` like Trainer.save_model."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def save_model(self, output_dir: str) -> None:
        if distributed.is_rank_zero():
            self.model.save_pretrained(output_dir)


RECIPE = DPO()
