"""Rounds of collect → train, each round starting from the weights the round before it ended with: the loop that
iterative DPO, expert iteration (`rft.py`) and on-policy distillation (`distill.py`) share.

A method subclasses `RoundsRecipe` and says how a round's rows are collected (it plays the current model) and
trained (a TRL trainer over them). This module does the rest, the same way for all three:

    <run>/<rows_folder>/iter_KK.jsonl      the rows of round K, written before it trains
    <run>/checkpoints/iter_KK/             its checkpoints, final/ (the weights the next round starts from) and
                                           round_done.json {"global_step", "rows", ...}

A rerun skips finished rounds and resumes inside the unfinished one from its last checkpoint, reading its rows
back instead of playing again: a round killed halfway trains on exactly the rows it started with.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from playpen import distributed
from playpen.models import modeling
from playpen.errors import PlaypenError
from playpen.storage import (atomic_write_json, atomic_write_text, close_to_others, jsonl_lines, make_folder,
                             read_json_or_none, read_text_lossy, remove_tree, share_as_umask)
from playpen.train.checkpoints import find_resume_checkpoint, load_state, remove_incomplete
from playpen.train.metrics import metrics_callback
from playpen.train.recipe import Recipe, Session

DONE = "round_done.json"
MAX_ROUNDS = 1000  # rounds of play → train (rft, distill, iterative dpo), each a full play and training
ACROSS_ROUNDS_HELP = ("one learning-rate schedule over all rounds (linear or constant, warmup in the first round "
                      "only) instead of trainer.lr_scheduler_type restarting every round")


class RoundsRecipe(Recipe):
    """A method trained in rounds. Subclasses set `rows_folder` and implement `collect` and `train_round`; the
    config has `rounds` (or overrides `round_count`)."""

    rows_folder = "rows"

    def round_count(self, cfg) -> int:
        return cfg.rounds

    def collect(self, session: Session, k: int, model, offset: int) -> tuple[list[dict], dict]:
        """Round k's rows (the same list on every process) and its statistics for metrics.jsonl."""
        raise NotImplementedError

    def train_round(self, session: Session, rows: list[dict], args, resume: Path | None, offset: int, model,
                    peft_config):
        """Train on the round's rows; return the trainer (its model is what the next round starts from)."""
        raise NotImplementedError

    # ------------------------------------------------------------ what the runner asks of every recipe

    def planned_steps(self, cfg) -> int:
        return -1  # max_steps bounds each round; a round with no rows trains nothing

    def find_resume(self, cfg, run) -> tuple[Path | None, int]:
        for k in reversed(_rounds_on_disk(run, self.round_count(cfg))):  # (not range(rounds): it may be huge)
            folder = iter_dir(run, k)
            if (folder / DONE).is_file():
                return None, _done_step(folder)
            checkpoint = find_resume_checkpoint(folder)
            if checkpoint is not None:
                return checkpoint, load_state(checkpoint)["global_step"]
        return None, 0

    def final_step(self, session: Session, trainer) -> int:
        return session.state["global_step"]

    def is_complete(self, cfg, run, final_step: int) -> bool:
        return all((iter_dir(run, k) / DONE).is_file() for k in range(self.round_count(cfg)))

    def fit(self, session: Session):
        return iterate(self, session)


class SFTRoundsRecipe(RoundsRecipe):
    """Rounds whose rows are token rows with labels (sequences.py), trained by TRL's SFTTrainer as they are."""

    trl_config = "SFTConfig"

    def trainer_defaults(self, cfg) -> dict:
        return {"max_length": 2048, "packing": False, "max_steps": 20, "learning_rate": 1e-4,
                "per_device_train_batch_size": 8}

    def forced(self, cfg) -> dict:
        # the rows carry their labels; a chat-template mask would train something else
        return {"assistant_only_loss": False, "completion_only_loss": False}

    def train_round(self, session: Session, rows: list[dict], args, resume: Path | None, offset: int, model,
                    peft_config):
        return train_rows(session, rows, args, resume, offset, model, peft_config)


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


def iterate(recipe: RoundsRecipe, session: Session):
    """Every round not done yet: collect (or read back) its rows, train, save final/, mark it done."""
    run = session.run
    model, peft_config, trainer, offset = session.model, session.peft_config, None, 0
    rounds = recipe.round_count(session.cfg)
    for k in range(rounds):
        folder = iter_dir(run, k)
        if (folder / DONE).is_file():  # finished round: continue from its final weights
            offset = _done_step(folder)
            continue
        if k > 0:
            model, peft_config = load_round(session, iter_dir(run, k - 1) / "final", model)
        rows = _round_rows(recipe, session, k, model, offset)
        resume = find_resume_checkpoint(folder)
        if session.is_main:  # the Trainer's output_dir: it writes checkpoint-N and README.md there by name
            close_to_others(make_folder(folder, "run folder", root=run.path), "run folder")
            remove_incomplete(folder, resume)
        args = session.make_args(output_dir=folder)
        if getattr(session.cfg, "schedule_across_rounds", False):
            args = session.make_args(output_dir=folder, **round_schedule(args, k, rounds, session.where))
        if rows:
            trainer = recipe.train_round(session, rows, args, resume, offset, model, peft_config)
            model, peft_config = trainer.model, None
            _clear_final(session, folder)
            trainer.save_model(str(folder / "final"))
            offset += trainer.state.global_step
        else:
            session.log(f"[playpen] round {k}: no rows to train on; its weights are the round's start")
            _clear_final(session, folder)
            _save_weights(session, model, folder / "final")
        if session.is_main:
            share_as_umask(folder / "final", closed=True)  # (safetensors writes 0600)
            atomic_write_json(folder / DONE, {"global_step": offset, "rows": len(rows)})
        session.barrier()
    session.state["global_step"] = offset
    if trainer is None:  # every round was already done: a trainer around the final weights
        model, _ = load_round(session, iter_dir(run, rounds - 1) / "final", model)
        trainer = _Saver(model, session.tokenizer)
    return trainer


def round_schedule(args, k: int, rounds: int, where: str) -> dict:
    """Round k's slice of one schedule over all rounds: a linear decay from the configured learning rate to 0
    over rounds x max_steps becomes, in round k, a linear decay from its value at the round's first step to its
    value at the round's last (transformers' polynomial schedule, power 1); a constant one stays; warmup only in
    the first round."""
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    if args.max_steps <= 0:
        raise PlaypenError(f"{where}: schedule_across_rounds needs trainer.max_steps (the steps of each round)")
    later = {"warmup_steps": 0} if k > 0 else {}  # (transformers 5: a fraction in warmup_steps too)
    if kind in ("constant", "constant_with_warmup"):
        return {**later, "lr_scheduler_type": "constant" if k > 0 else kind}
    if kind != "linear":
        raise PlaypenError(f"{where}: schedule_across_rounds slices a linear or constant schedule; "
                           f"trainer.lr_scheduler_type is {kind}")
    lr = args.learning_rate
    start, end = lr * (1 - k / rounds), lr * (1 - (k + 1) / rounds)
    return {**later, "learning_rate": start, "lr_scheduler_type": "polynomial",
            "lr_scheduler_kwargs": {"lr_end": end, "power": 1.0}}


def rows_file(run, folder: str, k: int) -> Path:
    return run.path / folder / f"iter_{k:02d}.jsonl"


def _round_rows(recipe: RoundsRecipe, session: Session, k: int, model, offset: int) -> list[dict]:
    """Round k's rows: read back when the round already collected them, else collected and saved (with one row of
    statistics in metrics.jsonl at the round's first step)."""
    path = rows_file(session.run, recipe.rows_folder, k)
    if path.is_file():
        return [json.loads(line) for line in jsonl_lines(read_text_lossy(path, "rows file")) if line.strip()]
    was_training = model.training
    model.eval()
    rows, stats = recipe.collect(session, k, model, offset)
    model.train(was_training)
    if session.is_main:
        metrics_callback(session.run.metrics, session.run.logs).log_row(offset, {"round": k, **stats})
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))
        summary = ", ".join(f"{key} {value:.3g}" if isinstance(value, float) else f"{key} {value}"
                            for key, value in stats.items())
        print(f"[playpen] round {k}: {summary}", flush=True)
    session.barrier()
    return rows


def gather(items: list) -> list:
    """Every process's items, in rank order (the same list on every process)."""
    return [x for part in distributed.all_gather(items) for x in part]


def merged_stats(stats: dict, n: int) -> dict:
    """Per-process means weighted by their counts n, over all processes; "episodes" is the total."""
    parts = distributed.all_gather((stats, n))
    total = sum(count for _, count in parts) or 1
    merged = {key: sum(s[key] * count for s, count in parts if count) / total for key in stats}
    return {"episodes": sum(count for _, count in parts), **merged}


def iter_dir(run, k: int) -> Path:
    return run.checkpoints / f"iter_{k:02d}"


def _rounds_on_disk(run, rounds: int) -> list[int]:
    """The rounds below `rounds` that have a folder, in order: what a resume looks at."""
    if not run.checkpoints.is_dir():
        return []
    found = (re.fullmatch(r"iter_(\d+)", p.name) for p in run.checkpoints.iterdir() if p.is_dir())
    return sorted(k for m in found if m and (k := int(m.group(1))) < rounds)


def drop_ref_adapter(model) -> None:
    """TRL's DPO adds a frozen "ref" copy of the adapter for each round; the previous round's copy must go first."""
    if hasattr(model, "peft_config") and "ref" in getattr(model, "peft_config", {}):
        model.delete_adapter("ref")
        model.set_adapter("default")


def load_round(session: Session, final: Path, model):
    """The policy a finished round ended with (adapter or full weights), loaded into a trainable model."""
    if (final / "adapter_config.json").is_file():
        from peft import PeftModel, set_peft_model_state_dict
        from peft.utils import load_peft_weights

        if isinstance(model, PeftModel):
            drop_ref_adapter(model)
            set_peft_model_state_dict(model, load_peft_weights(str(final)), adapter_name="default")
            return model, None
        return PeftModel.from_pretrained(model, str(final), is_trainable=True), None
    dtype = next(model.parameters()).dtype
    return modeling.load_model(str(final), None, dtype), session.peft_config


def _done_step(folder: Path) -> int:
    """The global step a finished round ended at (its round_done.json)."""
    done = read_json_or_none(folder / DONE)
    if not isinstance(done, dict) or not isinstance(done.get("global_step"), int):
        raise PlaypenError(f"{folder / DONE} is not a round's record; delete it to play the round again")
    return done["global_step"]


def _clear_final(session: Session, folder: Path) -> None:
    """A round's final/ is written by the library by name: whatever is there (links planted inside) goes first."""
    if session.is_main:
        remove_tree(folder / "final", folder)
        close_to_others(make_folder(folder / "final", "run folder", root=folder), "run folder")
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
